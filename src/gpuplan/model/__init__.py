"""The analytic model: torch-free, no I/O. Spec values in, frozen results out.

states → activations → memory (per-GPU peak); flops, compute (device, roofline, layer time),
comm (collectives on the topology), pipeline (stage split, in-flight micro-batches, bubble,
worst stage: used by memory and time), runtime (step time), estimate (the Estimate).
"""

from __future__ import annotations


def clear_caches() -> None:
    """Forget every value derived from the catalogue constants (``catalog.constants.override``)."""
    import functools
    import sys

    for name, mod in list(sys.modules.items()):
        if not name.startswith("gpuplan.model.") or mod is None:
            continue
        for obj in vars(mod).values():
            if isinstance(obj, functools._lru_cache_wrapper):
                obj.cache_clear()
