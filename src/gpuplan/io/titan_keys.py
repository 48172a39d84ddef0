"""torchtitan's batch keys as a scenario gives them (its [training] ``local_batch_size`` and ``global_batch_size``,
its [parallelism] ``pipeline_parallel_microbatch_size``), read as gpuplan's micro-batch and global batch
(torchtitan/config/job_config.py; its data-parallel degrees are io/config_keys.py ``shard_degrees``):
``local_batch_size`` is the sequences one data-parallel rank takes per step — without a pipeline its micro-batch,
under one the batch its micro-batches of ``pipeline_parallel_microbatch_size`` (default 1) split —;
``global_batch_size`` -1 (the default) is local × dp: no gradient accumulation. Each reading is said (field, given,
value, rule).
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.io.words import Reading
from gpuplan.units import parse_count

TITAN_KEYS = ("local_batch_size", "pipeline_parallel_microbatch_size")
SOURCE = "torchtitan/config/job_config.py"


def take_titan_keys(training: Any, layout: Any) -> dict[str, Any]:
    """torchtitan's keys taken out of the training and layout sections (in place), with a global batch of -1
    (torchtitan's "local × dp"); read once the GPU count is known (``titan_batch_layout``)."""
    out: dict[str, Any] = {}
    for part in (p for p in (layout, training) if isinstance(p, dict)):
        for key in [k for k in part if k in TITAN_KEYS]:
            if key in out:
                raise GpuplanError(f"{key} is given twice (training and layout): give it once")
            out[key] = part.pop(key)
    if isinstance(training, dict) and training.get("global_batch") in (-1, "-1"):
        out["global_batch_size"] = training.pop("global_batch")
    return out


def _degree(value: Any, key: str) -> int:
    n = parse_count(value, key)
    if n != int(n) or n < 1:
        raise GpuplanError(f"{key} must be a whole degree of at least 1, got {value!r}")
    return int(n)


def titan_batch_layout(raw: dict[str, Any], training: dict[str, Any], layout: dict[str, Any], gpus: int
                       ) -> tuple[dict[str, Any], dict[str, Any], tuple[Reading, ...]]:
    """(training, layout) raw sections with the torchtitan keys ``take_titan_keys`` left in the scenario ``raw`` read
    into gpuplan's fields, and the readings; dp is the layout's, else what the GPUs leave over tp × pp × cp."""
    titan = raw.get("_titan") or {}
    if not titan:
        return training, layout, ()
    training, layout = dict(training), dict(layout)
    tp, pp, cp = (_degree(layout.get(k, 1), f"layout.{k}") for k in ("tp", "pp", "cp"))
    dp = _degree(layout["dp"], "layout.dp") if "dp" in layout else gpus // (tp * pp * cp)
    if "dp" not in layout and (gpus % (tp * pp * cp) or dp < 1):
        raise GpuplanError(f"torchtitan's local_batch_size is per data-parallel rank, but {gpus} GPUs do not split "
                           f"into tp × pp × cp = {tp * pp * cp}: give layout.dp")
    return training, layout, tuple(_batch(titan, training, layout, pp, dp))


def _batch(titan: dict[str, Any], training: dict[str, Any], layout: dict[str, Any], pp: int, dp: int
           ) -> list[Reading]:
    """local_batch_size as the micro-batch (no pipeline) or the per-replica batch (a pipeline's micro-batches of
    pipeline_parallel_microbatch_size), and global_batch_size -1 as local × dp; in place."""
    reads: list[Reading] = []
    local = titan.get("local_batch_size")
    mb = titan.get("pipeline_parallel_microbatch_size", 1 if pp > 1 else None)
    if local is None:
        if "global_batch_size" in titan:
            raise GpuplanError("training.global_batch_size -1 is torchtitan's local_batch_size × dp: give "
                               "local_batch_size too (or a global batch)")
        if mb is not None and pp > 1:
            layout.setdefault("micro_batch", mb)
        return reads
    local = _degree(local, "training.local_batch_size")
    micro = _degree(mb, "parallelism.pipeline_parallel_microbatch_size") if pp > 1 and mb is not None else local
    if "micro_batch" not in layout:
        layout["micro_batch"] = micro
        reads.append(("layout.micro_batch", f"local_batch_size: {local}", micro,
                      "torchtitan's local batch split into pipeline micro-batches" if pp > 1 else
                      f"torchtitan's local batch: one rank's sequences per step, run whole without a pipeline "
                      f"({SOURCE})"))
    if training.get("global_batch") is None:
        training["global_batch"] = local * dp
        reads.append(("training.global_batch", f"local_batch_size: {local}", local * dp,
                      f"torchtitan's global_batch_size -1 (its default): local_batch_size × dp {dp}, no gradient "
                      f"accumulation ({SOURCE})"))
    return reads
