"""Score the runtime model on published training throughput (``runs.json``).

Each row's published figure is turned into tokens/s per GPU with gpuplan's own FLOP count,
in the convention the source used: tokens/s directly; step time → global batch tokens / step;
MFU → MFU · peak / model FLOPs per token (PaLM convention, as Llama 3, torchtitan, MosaicML and
Korthikanti et al. use); hardware TFLOP/s (Megatron 2021, BLOOM, MT-NLG count the recomputed
forward) → TFLOP/s / hardware FLOPs per token. Rows whose source leaves a deciding setting open
(micro-batch under pipeline parallelism, recompute, an unmodelled schedule) are skipped with
the reason. ``calibration: true`` rows are the only ones any constant was tuned on; the error
on the other rows is the honest, out-of-sample figure.
"""

from __future__ import annotations

import statistics
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.estimate import evaluate


def _skip_reason(run: dict) -> str | None:
    lay = run["layout"]
    if run.get("skip"):
        return run["skip"]
    if lay.get("recompute") is None:
        return "recompute not stated"
    if lay.get("micro_batch") is None and (lay.get("pp") or 1) > 1:
        return "micro-batch not stated under pipeline parallelism"
    if run["published"].get("flops_kind", "") and run["published"]["flops_kind"].startswith("unspecified") \
            and not run["published"].get("tokens_per_s_per_gpu"):
        return "FLOP convention not stated"
    return None


def published_tokens_per_s_per_gpu(run: dict, est: dict) -> tuple[float, str]:
    pub, t = run["published"], est["time"]
    gpus = run["gpus"]
    if pub.get("tokens_per_s_per_gpu"):
        return pub["tokens_per_s_per_gpu"], "tokens/s/GPU"
    if pub.get("mfu") and (pub.get("flops_kind") or "").startswith("model"):
        peak = est["_peak16"]
        return pub["mfu"] * peak / t["model_flops_per_token"], "MFU"
    if pub.get("tflops_per_gpu") and (pub.get("flops_kind") or "").startswith("hardware"):
        return pub["tflops_per_gpu"] * 1e12 / t["hardware_flops_per_token"], "hardware TFLOP/s"
    if pub.get("step_s"):
        return t["tokens_per_step"] / pub["step_s"] / gpus, "step time"
    raise GpuplanError(f"row {run['id']} has no usable published figure")


def score_runs(only: str | None = None) -> dict[str, Any]:
    rows, skipped = [], []
    for run in load_json("../validation/runs.json")["runs"]:
        reason = _skip_reason(run)
        if reason:
            skipped.append({"id": run["id"], "why": reason})
            continue
        lay = {k: v for k, v in run["layout"].items() if v is not None}
        lay.setdefault("micro_batch", 1)  # pp = 1 here: the micro-batch only changes launch overhead
        if lay.get("virtual_stages", 1) > 1:
            lay["pp_schedule"] = "interleaved"
        tr = {k: v for k, v in run["training"].items()
              if v is not None and k in ("seq_len", "global_batch", "precision", "attention", "dropout")}
        hw = {"gpu": run["gpu"], "gpus": run["gpus"], "gpus_per_node": run.get("gpus_per_node") or 8}
        if run.get("scale_out"):
            hw["scale_out"] = run["scale_out"]
        if run.get("power_limit_w"):
            hw["power_limit_w"] = run["power_limit_w"]
        raw = {"model": run["model"], "hardware": hw, "training": tr, "layout": lay}
        try:
            sc = parse_scenario(raw)
            est = evaluate(sc).to_json()
        except GpuplanError as err:
            skipped.append({"id": run["id"], "why": str(err)})
            continue
        g = sc.hardware.gpu.peak_flops
        est["_peak16"] = g.get("bf16") or g.get("fp16")
        published, metric = published_tokens_per_s_per_gpu(run, est)
        predicted = est["time"]["tokens_per_s_per_gpu"]
        rows.append({"id": run["id"], "gpu": sc.hardware.gpu.id,
                     "metric": metric, "published": published, "predicted": predicted,
                     "error": predicted / published - 1, "calibration": bool(run.get("calibration")),
                     "mfu_predicted": est["time"]["mfu"], "source": run["source"]})
    return {"rows": rows, "skipped": skipped, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict[str, Any]:
    out = {}
    for label, subset in (("all", rows), ("calibration", [r for r in rows if r["calibration"]]),
                          ("held_out", [r for r in rows if not r["calibration"]])):
        errs = [abs(r["error"]) for r in subset]
        out[label] = {"n": len(errs), "median_abs_error": statistics.median(errs) if errs else None,
                      "within_15pct": sum(e <= 0.15 for e in errs) / len(errs) if errs else None,
                      "max_abs_error": max(errs) if errs else None}
    return out
