"""CUDA graphs' memory: an allowance at the upper end of a peak's interval, not a modelled part."""

from __future__ import annotations

from gpuplan.catalog.constants import table
from gpuplan.catalog.intervals import intervals_on
from gpuplan.spec import ModelSpec, Training


def cuda_graph_allowance(model: ModelSpec, training: Training, pp: int) -> float:
    """Bytes CUDA graphs keep that the peak does not count (training.cuda_graphs): not modelled — no
    measurement ties their static buffers to a layout — so the documented allowance (constants.json
    ``cuda_graph_allowance_bytes``, Megatron Bridge's docs: ~0-2 GB per-layer, 10 GB+ with pipeline stages or a
    large MoE) raises the upper end of the peak's interval, where ``fits`` is decided; 0 without graphs and
    inside ``point_estimates`` (the interval is off there)."""
    if training.cuda_graphs == "none" or not intervals_on():
        return 0.0
    large = training.cuda_graphs == "full" or pp > 1 or model.moe
    return float(table("cuda_graph_allowance_bytes")["large" if large else "layer"])
