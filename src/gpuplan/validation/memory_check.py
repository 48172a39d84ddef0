"""Score the memory model on published, measured per-GPU peaks (``memory_runs.json``).

A row is scored only when its source states everything the prediction needs; rows that
leave a deciding setting open (pipeline micro-batching, recompute, LoRA rank) are listed
as skipped with the reason, never filled in by guesswork. Rows whose source does not name
the GPU are predicted on an H100 (the GPU type changes the capacity, not the usage).
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.estimate import evaluate
from gpuplan.units import GiB


def _skip_reason(run: dict) -> str | None:
    lay, tr = run.get("layout") or {}, run.get("training") or {}
    if lay.get("micro_batch") is None:
        return "micro-batch not stated"
    if lay.get("recompute") is None:
        return "recompute not stated"
    if tr.get("method") in ("lora", "qlora") and not tr.get("lora_rank"):
        return "LoRA rank not stated"
    if tr.get("optimizer") not in (None, "adamw", "adam", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"):
        return f"optimizer {tr.get('optimizer')} not modelled"
    return None


def score_memory_runs() -> dict[str, Any]:
    runs = load_json("../validation/memory_runs.json")["runs"]
    rows, skipped = [], []
    for run in runs:
        reason = _skip_reason(run)
        if reason:
            skipped.append({"id": run["id"], "why": reason})
            continue
        lay = {k: v for k, v in run["layout"].items() if v is not None}
        tr = {k: v for k, v in run["training"].items() if v is not None}
        raw = {"model": run["model"], "hardware": {"gpu": run.get("gpu") or "h100-sxm", "gpus": run["gpus"]},
               "training": tr, "layout": lay}
        try:
            est = evaluate(parse_scenario(raw)).to_json()
        except GpuplanError as err:
            skipped.append({"id": run["id"], "why": str(err)})
            continue
        measured = run["measured"]["peak_gib"]
        predicted = est["memory"]["total"] / GiB
        rows.append({"id": run["id"], "trust": run.get("trust"), "measured_gib": measured,
                     "predicted_gib": predicted, "error": predicted / measured - 1,
                     "kind": run["measured"].get("kind"), "source": run["source"]})
    return {"rows": rows, "skipped": skipped, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, subset in (("all", rows), ("high", [r for r in rows if r["trust"] == "high"])):
        errs = [abs(r["error"]) for r in subset]
        out[label] = {"n": len(errs),
                      "median_abs_error": statistics.median(errs) if errs else None,
                      "within_15pct": sum(e <= 0.15 for e in errs) / len(errs) if errs else None,
                      "max_abs_error": max(errs) if errs else None}
    return out
