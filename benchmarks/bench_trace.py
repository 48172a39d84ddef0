"""Benchmark: `gpuplan trace` of a 7B Llama (Llama-2-7B shape) with FSDP2 over 64 simulated ranks
(issue 5: under 60 s and under 2 GiB of RAM on a 2-core CPU machine).

Run: python benchmarks/bench_trace.py [--gpus 64] [--seq-len 4096]
Reports the wall time of the whole trace (build, warm-up step, measured step, comparison), the
process's max RSS, and the ratio of each to its target (< 1 meets it).
"""

from __future__ import annotations

import argparse
import resource
import time

TARGET_S = 60.0
TARGET_RSS_BYTES = 2 * 2**30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-2-7b")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=4096)
    a = ap.parse_args()
    t0 = time.perf_counter()
    from gpuplan.io.scenario import parse_scenario
    from gpuplan.trace import trace_scenario

    sc = parse_scenario({"model": a.model, "hardware": {"gpu": "h100-sxm", "gpus": a.gpus},
                         "training": {"seq_len": a.seq_len}, "layout": {"zero": 3, "micro_batch": 1}})
    res = trace_scenario(sc)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    for row in res["compare"]:
        if row["ratio"] is not None:
            unit = 1 if "FLOPs" in row["component"] else 2**30
            print(f"  {row['component']:40s} predicted {row['predicted'] / unit:12.4g}  "
                  f"traced {row['measured'] / unit:12.4g}  ratio {row['ratio']:.3f}")
    print(f"{a.model}, FSDP over {a.gpus} simulated ranks, seq {a.seq_len}: wall {wall:.1f} s "
          f"(time / target = {wall / TARGET_S:.2f}), max RSS {rss / 2**30:.2f} GiB "
          f"(RSS / target = {rss / TARGET_RSS_BYTES:.2f}); trace step itself {res['trace']['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
