"""The trace calibration file (torch-free, so ``evaluate`` and ``plan`` can read it).

``gpuplan trace --calibrate`` keeps, per architecture (``model_type``), the running means of
traced / predicted ratios: ``{"llama": {"n": 3, "states": 1.0, "activations": 1.04,
"model_flops": 1.0, "updated": "2025-01-01"}}``. A scenario applies the activation ratio with
``training.trace_calibration: default | PATH`` (read once, in ``parse_scenario``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpuplan.errors import GpuplanError

KEY = "training.trace_calibration"


def calibration_path() -> Path:
    """``$GPUPLAN_CACHE_DIR/calibration.json``, else ``$XDG_CACHE_HOME/gpuplan/…``, else ``~/.cache/gpuplan/…``."""
    base = os.environ.get("GPUPLAN_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuplan")
    return Path(base) / "calibration.json"


def activation_factor(ref: str, model_type: str) -> float:
    """The stored traced/predicted activation ratio for ``model_type``, or one GpuplanError line."""
    path = calibration_path() if ref in ("default", "true", "yes") else Path(ref).expanduser()
    if not path.is_file():
        raise GpuplanError(f"{KEY}: {path} not found: run `gpuplan trace --calibrate` on a model of this "
                           "architecture first, or give the path of its calibration.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    entries = data if isinstance(data, dict) else {}
    if not entries or not all(isinstance(v, dict) and "n" in v for v in entries.values()):
        raise GpuplanError(f"{KEY}: {path} is not a calibration file written by `gpuplan trace --calibrate`")
    entry = entries.get(model_type)
    if entry is None:
        raise GpuplanError(f"{KEY}: {path} has no calibration for {model_type} (it has {', '.join(sorted(entries))}): "
                           f"run `gpuplan trace --calibrate` on a {model_type} model")
    factor = entry.get("activations")
    if not isinstance(factor, int | float) or not 0 < factor < 100:
        raise GpuplanError(f"{KEY}: {path} has no usable activation ratio for {model_type} ({factor!r})")
    return float(factor)
