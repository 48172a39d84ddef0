"""The trace calibration file (torch-free, so ``evaluate`` and ``plan`` can read it).

``gpuplan trace --calibrate`` keeps, per architecture (``model_type``), the running means of
traced / predicted ratios: ``{"llama": {"n": 3, "states": 1.0, "activations": 1.04,
"model_flops": 1.0, "updated": "2025-01-01"}}``, in ``calibration.json`` of the cache folder
(``policy.trace_calibration_path``). A scenario applies the activation ratio with
``training.trace_calibration: default | PATH`` (the words of ``policy.choose``; read once, in
``parse_scenario``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuplan.bounds import check_text, is_path, load_json, read_regular
from gpuplan.errors import GpuplanError
from gpuplan.io.stores.policy import CACHE_ENV, cache_origin, choose, is_default_word, trace_calibration_path

KEY = "training.trace_calibration"
WANTS = "default or the path of a calibration.json"
MAX_ACTIVATION_RATIO = 100.0  # traced / predicted activations beyond 100× is a broken trace


def trace_activation_factor(value: Any, model_type: str) -> float | None:
    """The activation ratio a scenario's ``training.trace_calibration`` asks for, None when off."""
    chosen = choose(value, KEY, WANTS)
    return None if chosen is None else activation_factor(chosen, model_type)


def activation_factor(ref: str, model_type: str) -> float:
    """The stored traced/predicted activation ratio for ``model_type`` in the file ``ref`` names
    (a default word: the default file), or one GpuplanError line."""
    path = trace_calibration_path() if is_default_word(ref) else Path(check_text(ref, KEY)).expanduser()
    if is_path(str(path)) and path.is_dir():
        raise GpuplanError(f"{KEY}: {path} is a folder: give the calibration.json written by "
                           "`gpuplan trace --calibrate`, or default")
    if not is_path(str(path)):
        raise GpuplanError(f"{KEY}: {path} not found: run `gpuplan trace --calibrate` on a model of this "
                           "architecture first, or give the path of its calibration.json")
    entries = _read(path)
    if not entries or not all(isinstance(v, dict) and "n" in v for v in entries.values()):
        raise GpuplanError(f"{KEY}: {path} is not a calibration file written by `gpuplan trace --calibrate`")
    entry = entries.get(model_type)
    if entry is None:
        raise GpuplanError(f"{KEY}: {path} has no calibration for {model_type} (it has {', '.join(sorted(entries))}): "
                           f"run `gpuplan trace --calibrate` on a {model_type} model")
    factor = entry.get("activations")
    if not _number(factor) or not 0 < factor < MAX_ACTIVATION_RATIO:
        raise GpuplanError(f"{KEY}: {path} has no usable activation ratio for {model_type} ({factor!r})")
    return float(factor)


def record_ratios(model_type: str, ratios: Mapping[str, float | None]) -> tuple[Path, dict[str, Any]]:
    """Fold one trace's traced/predicted ratios (``states``, ``activations``, ``model_flops``; None:
    not measured) into the running means of ``model_type`` in the default file; (path, new entry).
    A missing or unreadable file starts afresh; the file is replaced whole (never left half-written)."""
    path = trace_calibration_path()
    data = _read(path) if path.is_file() else {}
    entry = data.get(model_type)
    if not isinstance(entry, dict) or not _number(entry.get("n")) or entry["n"] < 0:
        entry = {"n": 0}
    n = int(entry["n"])
    for key, ratio in ratios.items():
        if ratio is not None:
            previous = entry.get(key)
            previous = previous if _number(previous) else ratio
            entry[key] = (previous * n + ratio) / (n + 1)
    entry["n"] = n + 1
    entry["updated"] = time.strftime("%Y-%m-%d")
    data[model_type] = entry
    _write(path, data)
    return path, entry


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _read(path: Path) -> dict[str, Any]:
    """The file's mapping; {} when it cannot be read or is not a JSON mapping."""
    try:
        data = load_json(read_regular(path, "calibration file"), str(path))
    except GpuplanError:
        return {}
    return data if isinstance(data, dict) else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise GpuplanError(f"cannot write the trace calibration {path}{cache_origin()} "
                           f"({err.strerror or err}): set {CACHE_ENV} to a writable folder") from None
