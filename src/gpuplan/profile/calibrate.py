"""``gpuplan calibrate``: correction factors from the stored trial runs, per GPU type.

memory_factor = median(measured peak / predicted peak) and compute_factor = median(measured
tokens/s / predicted tokens/s) over the GPU type's stored runs (medians: one odd run moves
nothing). The bundled published validation set is scored with the factors applied to its rows
of the same GPU type; if a factor would raise that error it is shrunk toward 1 (in quarters)
until it does not — the user's runs teach gpuplan about their stack without unlearning the
published ones. Applied only when a scenario asks for it (``hardware.calibration: default``).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.profile.store import MAX_FACTOR, MIN_FACTOR, Store


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked(store: Store, run: dict) -> dict:
    """The run's measured and predicted totals as positive numbers (None where not measured or not
    predicted), or one error line naming the run: a store edited by hand or by another tool must
    neither crash calibrate nor divide by zero."""
    def bad(what: str) -> GpuplanError:
        return GpuplanError(f"store {store.path}: run {run['id']} is malformed ({what}): "
                            f"{store.delete_hint('runs', 'id', run['id'])}")

    if not isinstance(run["gpu"], str) or not run["gpu"]:
        raise bad(f"gpu is {run['gpu']!r}")
    out = {}
    for side in ("measured", "predicted"):
        block = run[side]
        if not isinstance(block, dict):
            raise bad(f"{side} is not a mapping")
        for section, key in (("memory", "total"), ("time", "tokens_per_s")):
            sub = block.get(section)
            if not isinstance(sub, dict):
                raise bad(f"{side} has no {section} mapping")
            value = sub.get(key)
            if value is not None and not (_number(value) and value > 0):
                raise bad(f"{side} {section}.{key} is {value!r}, not a positive number")
            out[f"{side}_{key}"] = value
    if out["measured_total"] is not None and out["predicted_total"] is None:
        raise bad("measured memory.total but no predicted memory.total")
    return out


def _ratios(rows: list[dict], key: str) -> list[float]:
    return [r[f"measured_{key}"] / r[f"predicted_{key}"] for r in rows
            if r[f"measured_{key}"] is not None and r[f"predicted_{key}"] is not None]


def _errors(rows: list[dict], mem_f: float, comp_f: float) -> tuple[float | None, float | None]:
    mem = [abs(x / mem_f - 1) for x in _ratios(rows, "total")]
    tps = [abs(x / comp_f - 1) for x in _ratios(rows, "tokens_per_s")]
    return (statistics.median(mem) if mem else None, statistics.median(tps) if tps else None)


def _validation_error(gpu: str, comp_f: float) -> float | None:
    """Median |error| of the published throughput rows on this GPU type with the factor applied."""
    from gpuplan.validation.corpus_check import score_corpus

    rows = [r for r in score_corpus()["rows"] if r.get("gpu") == gpu and r["category"] == "throughput"]
    if not rows:
        return None
    return statistics.median(abs((1 + r["error"]) * comp_f - 1) for r in rows)


def calibrate(store: Store) -> dict[str, Any]:
    """Fit, check and store the factors of every GPU type with trial runs. Nothing is written unless
    every used run is well-formed and every factor is a finite number from MIN_FACTOR to MAX_FACTOR."""
    if not store.exists:
        raise GpuplanError(f"there is no store at {store.path}{store.origin}: record GPU trial runs with "
                           "`gpuplan profile --device cuda` first, or give --store PATH")
    by_gpu: dict[str, list[dict]] = {}
    for r in store.runs():
        if r["gpu"] != "cpu" and r["kind"] == "profile":
            by_gpu.setdefault(r["gpu"], []).append(_checked(store, r))
    out: dict[str, Any] = {"store": str(store.path), "gpus": {}}
    for gpu, rows in by_gpu.items():
        mem_ratios, tps_ratios = _ratios(rows, "total"), _ratios(rows, "tokens_per_s")
        mem_f = statistics.median(mem_ratios) if mem_ratios else 1.0
        comp_f = statistics.median(tps_ratios) if tps_ratios else 1.0
        base_val = _validation_error(gpu, 1.0)
        shrink = 1.0
        while base_val is not None and shrink > 0:
            val = _validation_error(gpu, 1 + shrink * (comp_f - 1))
            if val is None or val <= base_val + 1e-12:
                break
            shrink -= 0.25
        comp_used = 1 + max(shrink, 0.0) * (comp_f - 1)
        for name, value in (("memory", mem_f), ("throughput", comp_used)):
            if not MIN_FACTOR <= value <= MAX_FACTOR:
                raise GpuplanError(
                    f"store {store.path}: the {len(rows)} run(s) on {gpu} give a {name} factor of {value:.3g} "
                    f"(measured/predicted), outside {MIN_FACTOR:g} to {MAX_FACTOR:g}: these runs did not measure "
                    "what was predicted; delete them and profile again (nothing was stored)")
        before, after = _errors(rows, 1.0, 1.0), _errors(rows, mem_f, comp_used)
        out["gpus"][gpu] = {"runs": len(rows), "memory_factor": mem_f, "compute_factor": comp_used,
                            "compute_factor_fitted": comp_f,
                            "memory_error_before": before[0], "memory_error_after": after[0],
                            "throughput_error_before": before[1], "throughput_error_after": after[1],
                            "validation_error_before": base_val,
                            "validation_error_after": _validation_error(gpu, comp_used)}
    for gpu, r in out["gpus"].items():  # every GPU type checked first: all stored or none
        store.set_calibration(gpu, r["memory_factor"], r["compute_factor"], r["runs"])
    return out
