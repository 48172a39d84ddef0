"""Benchmark: `evaluate` over 1,000 varied scenarios (issue: "well under a second of compute").

Run: python benchmarks/bench_evaluate.py
Reports the time per scenario and the ratio to the 1-second budget for the batch, and the
ratio of evaluation time to parsing time (parsing includes catalogue lookups).
"""

from __future__ import annotations

import itertools
import time

from gpuplan.io.scenario import parse_scenario
from gpuplan.model.estimate import evaluate

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen2.5-14b", "deepseek-v3"]
GPUS = [("h100-sxm", 64), ("a100-80gb-sxm", 128), ("mi300x", 32), ("b200", 256)]
LAYOUTS = [{"zero": 3}, {"tp": 8, "zero": 1}, {"tp": 4, "pp": 2, "zero": 1, "recompute": "selective"},
           {"tp": 8, "pp": 4, "recompute": "full"}, {"zero": 2, "micro_batch": 2}]
TRAINING = [{"seq_len": 4096}, {"seq_len": 8192, "precision": "fp8"}, {"method": "lora"},
            {"optimizer": "adamw-8bit"}, {"method": "qlora", "seq_len": 2048}]


def raw_scenarios(n: int = 1000) -> list[dict]:
    combos = itertools.cycle(itertools.product(MODELS, GPUS, LAYOUTS, TRAINING))
    out = []
    for model, (gpu, gpus), layout, training in itertools.islice(combos, n):
        out.append({"model": model, "hardware": {"gpu": gpu, "gpus": gpus}, "training": training,
                    "layout": layout})
    return out


def main() -> None:
    raws = raw_scenarios()
    parse_scenario(raws[0])  # warm the catalogue caches once, as a long-running process would
    t0 = time.perf_counter()
    scs = [parse_scenario(r) for r in raws]
    t1 = time.perf_counter()
    errors = 0
    for sc in scs:
        try:
            evaluate(sc)
        except ValueError:
            errors += 1
    t2 = time.perf_counter()
    total = t2 - t0
    print(f"{len(raws)} scenarios ({errors} rejected layouts): parse {t1 - t0:.3f} s, evaluate {t2 - t1:.3f} s")
    print(f"per scenario: {total / len(raws) * 1e6:.0f} us; batch / 1 s budget = {total:.2f}; "
          f"evaluate / parse = {(t2 - t1) / (t1 - t0):.2f}")


if __name__ == "__main__":
    main()
