"""Ground truth on a real GPU: profile a ~1B Llama at two micro-batches, record predicted vs measured.

Prepared for the few minutes of GPU time a session may get (the device tool runs it, e.g.
`python benchmarks/gpu_profile_check.py --out $OUT`). Needs torch with CUDA on that machine.
Writes OUT/gpu_profile.json and prints one line per micro-batch; exits non-zero when a run fails
so a bad machine is noticed. Copy the JSON to benchmarks/results/ and quote it in the README.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--seq-len", default="2048")
    ap.add_argument("--micro-batches", default="1,4")
    ap.add_argument("--steps", default="6")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mb in args.micro_batches.split(","):
        t0 = time.time()
        cmd = [sys.executable, "-m", "gpuplan.cli", "profile", "--model", args.model, "--gpu", "h100-sxm",
               "--device", "cuda", "--nproc", "1", "--steps", args.steps, "--warmup", "2", "--seq-len",
               args.seq_len, "--micro-batch", mb, "--precision", "bf16", "--no-store", "--timeout", "240", "--json"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            print(f"micro-batch {mb}: FAILED {res.stderr.strip()[-500:]}")
            return 1
        rep = json.loads(res.stdout)
        mm, pm = rep["measured"]["memory"], rep["predicted"]["memory"]
        mt, pt = rep["measured"]["time"], rep["predicted"]["time"]
        row = {"gpu": rep["gpu"], "model": args.model, "seq_len": int(args.seq_len), "micro_batch": int(mb),
               "peak_allocated_gib": mm["total"] / 2**30, "peak_reserved_gib": mm["reserved"] / 2**30,
               "predicted_gib": pm["total"] / 2**30, "memory_ratio": mm["total"] / pm["total"],
               "tokens_per_s": mt["tokens_per_s"], "predicted_tokens_per_s": pt["tokens_per_s"],
               "throughput_ratio": mt["tokens_per_s"] / pt["tokens_per_s"], "mfu": mt["mfu"],
               "wall_s": time.time() - t0}
        rows.append(row)
        print(f"{rep['gpu']} mb={mb}: peak {row['peak_allocated_gib']:.2f} GiB (predicted {row['predicted_gib']:.2f}, "
              f"ratio {row['memory_ratio']:.3f}); {row['tokens_per_s']:,.0f} tok/s (predicted "
              f"{row['predicted_tokens_per_s']:,.0f}, ratio {row['throughput_ratio']:.3f}), MFU {row['mfu']:.1%}")
    (out / "gpu_profile.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
