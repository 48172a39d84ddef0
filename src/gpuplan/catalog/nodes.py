"""How a GPU count reads when it is no whole number of the GPU's usual nodes (catalog/hardware.make_hardware)."""

from __future__ import annotations

from gpuplan.spec import GPU

# GPUs a node holds where a count is no whole number of the GPU's usual nodes: 4-GPU boards (NVIDIA HGX A100 and
# H100 4-GPU; the 4-A100 nodes of NERSC Perlmutter, ALCF Polaris, CINECA Leonardo and JSC JUWELS Booster)
SMALLER_NODES = (4,)


def node_for(g: GPU, gpus: object) -> int:
    """The GPUs per node a count of ``gpus`` is read with when none is given: the GPU's usual node, or — a count
    past one node that is no whole number of them (12 A100s) — the largest smaller node that divides it (three of
    4); else the usual one (``Hardware`` then names the counts that fit)."""
    usual = g.gpus_per_node
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= usual or gpus % usual == 0:
        return usual
    return next((d for d in SMALLER_NODES if d < usual and gpus % d == 0), usual)
