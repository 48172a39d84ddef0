"""Benchmark: `plan` speed, and its rate against llm-analysis' in the same run.

Targets (issue "one evaluation path, fast enough to plan as you type"): Llama-3.1-405B over every catalogue
GPU type and counts up to 16,384 in < 1 s of one core; a 70B single-type plan in < 100 ms; a layout rate
≥ 300× llm-analysis' per-layout rate.

Run: python benchmarks/bench_plan.py [--llm-analysis-python PATH]
Reports CPU seconds of this process (one core: other load on the machine does not count) — cold (a fresh
process), warm (the next request of a running service, the peaks earlier plans sized dropped) and re-plan (the
same plan after a token edit, which no peak reads: search/book.py's peak tables) —, the layouts
the plan classified (``searched``: the whole space — evaluated, or proven out of memory or unable to win
by the search's bounds), layouts per second, and each time's ratio to its target (< 1 meets it).
llm-analysis (PyPI llm-analysis, cli99/llm-analysis) is timed on its own per-layout call,
``LLMAnalysis(...).training(...)``, over a grid of 405B layouts — from this interpreter when it imports
llm_analysis, else from ``--llm-analysis-python`` (a venv with it installed), in the same run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from gpuplan.api import plan_scenario
from gpuplan.io.scenario import parse_scenario
from gpuplan.search.book import clear_peak_tables

TARGET_ALL_S = 1.0
TARGET_70B_S = 0.1
TARGET_RATIO = 300.0

LLM_ANALYSIS = r"""
import itertools, json, logging, time
from llm_analysis.analysis import LLMAnalysis, ActivationRecomputation, DSZeRO
from llm_analysis.config import (ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name,
                                 get_model_config_by_name)
logging.disable(logging.CRITICAL)
model = get_model_config_by_name("upstage_Llama-2-70b-instruct-v2")
gpu = get_gpu_config_by_name("h100-sxm-80gb")
dtype = get_dtype_config_by_name("w16a16e16")
grid = [(tp, pp, dp, mb, z, r) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8) for dp in (1, 4, 16)
        for mb in (1, 2, 4) for z in (0, 1, 2, 3) for r in (0, 4)]
n, t0 = 0, time.process_time()
for tp, pp, dp, mb, z, r in grid:
    a = LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=tp, pp_size=pp, dp_size=dp, sp_size=tp),
                    flops_efficiency=0.5, hbm_memory_efficiency=0.9)
    try:
        a.training(batch_size_per_gpu=mb, global_batch_size=dp * mb * 8, seq_len=4096,
                   activation_recomputation=ActivationRecomputation(r), ds_zero=DSZeRO(z))
    except Exception:
        pass
    n += 1
print(json.dumps({"layouts": n, "s": time.process_time() - t0}))
"""


def timed(sc: Any, fresh: bool = True, **kw: Any) -> tuple[float, Any]:
    """CPU seconds of one plan; ``fresh``: without the peaks earlier plans sized (search/book.py peak tables)."""
    if fresh:
        clear_peak_tables()
    t0 = time.process_time()
    res = plan_scenario(sc, **kw).result
    return time.process_time() - t0, res


def llm_analysis_rate(python: str | None) -> float | None:
    """llm-analysis' layouts per CPU second, or None when it is not available."""
    try:
        import llm_analysis  # noqa: F401

        python = sys.executable
    except ImportError:
        if python is None:
            return None
    out = subprocess.run([python, "-c", LLM_ANALYSIS], capture_output=True, text=True, timeout=600)
    if out.returncode:
        print(f"llm-analysis failed: {out.stderr.strip()[-300:]}")
        return None
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["layouts"] / r["s"]


def scenario(model: str, tokens: float = 15e12) -> Any:
    # parsed anew for every run: a plan request carries its own scenario
    return parse_scenario({"model": model, "hardware": {"gpu": "h100-sxm"},
                           "training": {"seq_len": 8192, "tokens": tokens}})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-analysis-python", help="a Python with llm-analysis installed (pip install llm-analysis)")
    args = ap.parse_args()
    rows = []
    for label, model, kw, target in (("70B, one GPU type", "llama-3.1-70b", {}, TARGET_70B_S),
                                     ("405B, one GPU type", "llama-3.1-405b", {"max_gpus": 16384}, None),
                                     ("405B, all GPU types", "llama-3.1-405b", {"max_gpus": 16384, "gpu_types": "all"},
                                      TARGET_ALL_S)):
        cold_s, res = timed(scenario(model), **kw)  # a fresh process's first plan: what `gpuplan plan` pays
        warm_s = sorted(timed(scenario(model), **kw)[0] for _ in range(3))[1]  # a service's next request
        # the same plan after an edit no peak reads (the web page as the user types the token count)
        replan_s = sorted(timed(scenario(model, 1e12 * (i + 2)), fresh=False, **kw)[0] for i in range(3))[1]
        rows.append((label, cold_s, warm_s, replan_s, res.searched, target))
    base = llm_analysis_rate(args.llm_analysis_python)
    for label, cold_s, warm_s, replan_s, searched, target in rows:
        rate = searched / warm_s
        line = (f"{label:20s}: cold {cold_s:.3f} s, warm {warm_s:.3f} s, re-plan after a token edit {replan_s:.3f} s, "
                f"{searched:,} layouts, {rate:,.0f} layouts/s")
        if target:
            line += f", warm / target = {warm_s / target:.2f}"
        if base:
            line += f", {rate / base:,.0f}× llm-analysis ({base:,.0f} layouts/s; target ≥ {TARGET_RATIO:.0f}×)"
        print(line)


if __name__ == "__main__":
    main()
