"""``gpuplan calibrate``: correction factors from the stored trial runs, per GPU type.

memory_factor = median(measured peak / predicted peak) and compute_factor = median(measured
tokens/s / predicted tokens/s) over the GPU type's stored runs (medians: one odd run moves
nothing). The bundled published validation set is scored with the factors applied to its rows
of the same GPU type; if a factor would raise that error it is shrunk toward 1 (in quarters)
until it does not — the user's runs teach gpuplan about their stack without unlearning the
published ones. Applied only when a scenario asks for it (``hardware.calibration: default``).
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.profile.store import Store


def _errors(runs: list[dict], mem_f: float, comp_f: float) -> tuple[float | None, float | None]:
    mem = [abs(r["measured"]["memory"]["total"] / (r["predicted"]["memory"]["total"] * mem_f) - 1)
           for r in runs if r["measured"]["memory"].get("total")]
    tps = [abs(r["measured"]["time"]["tokens_per_s"] / (r["predicted"]["time"]["tokens_per_s"] * comp_f) - 1)
           for r in runs if r["measured"]["time"].get("tokens_per_s") and r["predicted"]["time"].get("tokens_per_s")]
    return (statistics.median(mem) if mem else None, statistics.median(tps) if tps else None)


def _validation_error(gpu: str, comp_f: float) -> float | None:
    """Median |error| of the published throughput rows on this GPU type with the factor applied."""
    from gpuplan.validation.runtime_check import score_runs

    rows = [r for r in score_runs()["rows"] if r.get("gpu") == gpu]
    if not rows:
        return None
    return statistics.median(abs((1 + r["error"]) * comp_f - 1) for r in rows)


def calibrate(store: Store) -> dict[str, Any]:
    by_gpu: dict[str, list[dict]] = {}
    for r in store.runs():
        if r["gpu"] != "cpu" and r["kind"] == "profile":
            by_gpu.setdefault(r["gpu"], []).append(r)
    out: dict[str, Any] = {"store": str(store.path), "gpus": {}}
    for gpu, runs in by_gpu.items():
        mem_ratios = [r["measured"]["memory"]["total"] / r["predicted"]["memory"]["total"]
                      for r in runs if r["measured"]["memory"].get("total")]
        tps_ratios = [r["measured"]["time"]["tokens_per_s"] / r["predicted"]["time"]["tokens_per_s"]
                      for r in runs if r["measured"]["time"].get("tokens_per_s")]
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
        before, after = _errors(runs, 1.0, 1.0), _errors(runs, mem_f, comp_used)
        store.set_calibration(gpu, mem_f, comp_used, len(runs))
        out["gpus"][gpu] = {"runs": len(runs), "memory_factor": mem_f, "compute_factor": comp_used,
                            "compute_factor_fitted": comp_f,
                            "memory_error_before": before[0], "memory_error_after": after[0],
                            "throughput_error_before": before[1], "throughput_error_after": after[1],
                            "validation_error_before": base_val,
                            "validation_error_after": _validation_error(gpu, comp_used)}
    return out
