"""The model's memo caches, emptied on demand: a long-running process (``gpuplan serve``) answers distinct
scenarios for hours, and caches keyed by each scenario's model and training values only fill; emptied
every so many answers, its memory stays flat (issue 25: a 30-minute soak of distinct evaluates). A CLI
run never needs this."""

from __future__ import annotations

import sys


def clear_model_caches() -> int:
    """Empty every ``functools`` cache defined in a ``gpuplan.model`` module (catalogue caches, read once
    per process, are kept); how many were emptied."""
    n = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("gpuplan.model."):
            continue
        for obj in list(vars(mod).values()):
            if callable(getattr(obj, "cache_clear", None)) and getattr(obj, "__module__", None) == name:
                obj.cache_clear()
                n += 1
    return n
