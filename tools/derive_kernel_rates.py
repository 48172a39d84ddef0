"""Derive the kernel models' few shape parameters from the published curves, with the model's own
functions — the microbenchmark counterpart of tools/fit_constants.py (which fits only what a
microbenchmark cannot measure, on end-to-end runs).

* GEMM (catalog/matmul.json ``kernel_model``): per architecture with a shape sweep (``sweeps``: the
  OpenXLA table less the shapes validation/components.json checks), the kernel floor, the fixed work
  per output tile (K elements) and the split-K reduction's fixed cost that minimise the mean |log
  error| of model/gemm.py's physics (the sweep's own interpolation off) over the sweep's points.
* attention (catalog/constants.json ``attention_kernels``): per kernel, the fixed work per 128-row
  query block (``row_block_cost``) that minimises the median |error| over the kernel's published
  curves in validation/components.json at sequences below the plateau point the rate is read at —
  a shape parameter fitted on the points it is checked against, one per kernel (say so).
* eager attention (``attention_kernels.eager.score_pass_bytes``): the cost of PyTorch's passes over the
  s×s scores — softmax forward, the causal mask's add, softmax backward — in bytes per score element
  at the streaming bandwidth, by least squares on the relative error over the PyTorch baseline's
  points at its longest sequence (the time the model's batched GEMMs, layout copies and kernel floors
  leave); the shorter sequences are the check.
* fp8 scaling kernels (catalog/matmul.json ``fp8_scaling_overhead.cast_bandwidth_share``): per recipe with a
  published microbenchmark of a whole fp8 linear — torchao's rowwise LayerNorm -> Linear -> Sigmoid table
  (validation/components.json, source torchao_fp8_rowwise) — the share of the streaming bandwidth its scaling kernels
  reach (0.30 ... 1.00 by 0.01) that minimises the median |log error| of the modelled speedup over the cells whose
  M, K and N are all 4096 or more (there neither the kernel floors nor thin-GEMM rates decide); every cell is the
  check (``gpuplan validate --components``).

    python tools/derive_kernel_rates.py            # print what it finds
    python tools/derive_kernel_rates.py --write    # and write it into the catalogue
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

FLOORS_US = (3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0, 6.5, 7.0, 8.0)
TILE_K = (0, 32, 64, 96, 128, 192, 256, 384, 512, 768)
REDUCE_US = (0.0, 1.0, 2.0, 3.0, 5.0)
ROW_BLOCK = [x / 10 for x in range(0, 81, 2)]


def _gemm_loss(arch: str, floor_s: float, tile_k: float, reduce_s: float) -> float:
    from gpuplan.catalog.hardware import get_gpu
    from gpuplan.catalog.matmul import kernel_model, matmul_sweep
    from gpuplan.model.compute import hbm_bytes_per_s
    from gpuplan.model.gemm import GemmKernel, _model_s, _solve_main, burst_share

    errs = []
    for prec in ("bf16", "fp8"):
        sweep = matmul_sweep(arch, prec)
        if sweep is None:
            continue
        g = get_gpu(sweep.gpu_id)
        model = replace(kernel_model(arch), floor_s=floor_s, tile_k=tile_k, reduce_s=reduce_s)
        share, shape = burst_share(g, prec)
        k = GemmKernel(peak=g.peak_flops[prec], burst=share, main=share, sms=g.sm_count, model=model,
                       bw=hbm_bytes_per_s(g))
        k = replace(k, main=_solve_main(k, shape))
        elem = 1.0 if prec == "fp8" else 2.0
        errs += [abs(math.log(2 * m * n * kk / (tf * 1e12) / _model_s(m, n, kk, 1, elem, k)))
                 for m, n, kk, tf in sweep.points]
    return statistics.mean(errs)


def derive_gemm() -> dict[str, dict[str, float]]:
    from gpuplan.catalog.matmul import _sweeps

    out = {}
    for arch in sorted({a for a, _ in _sweeps()}):
        grid = itertools.product(FLOORS_US, TILE_K, REDUCE_US)
        loss, f, k0, red = min((_gemm_loss(arch, f * 1e-6, k0, r * 1e-6), f, k0, r) for f, k0, r in grid)
        out[arch] = {"floor_s": round(f * 1e-6, 9), "tile_k": k0, "reduce_s": round(red * 1e-6, 9)}
        print(f"gemm {arch:10s} floor {f} us  tile_k {k0}  reduce {red} us  mean |log err| {loss:.3f}")
    return out


def derive_attention() -> dict[str, float]:
    from gpuplan.catalog.constants import override, table
    from gpuplan.validation import components as comp

    points = [p for p in comp.corpus()["points"] if p["component"] == "attention" and p["inputs"]["kernel"] != "eager"]
    longest = {}
    for p in points:
        x = p["inputs"]
        key = (p["gpu"], x["kernel"], x["pass"], x["causal"], x["head_dim"], x.get("kv_heads"))
        longest[key] = max(longest.get(key, 0), x["seq_len"])
    doc = json.loads(json.dumps(dict(table("attention_kernels"))))
    out = {}
    for kernel in sorted({p["inputs"]["kernel"] for p in points}):
        mine = [p for p in points if p["inputs"]["kernel"] == kernel and p["inputs"]["seq_len"] < longest[
            (p["gpu"], kernel, p["inputs"]["pass"], p["inputs"]["causal"], p["inputs"]["head_dim"],
             p["inputs"].get("kv_heads"))]]
        best = None
        for c in ROW_BLOCK:
            doc["kernels"][kernel]["row_block_cost"] = c
            with override({"attention_kernels": doc}):
                loss = statistics.median(abs(r["error"]) for r in comp.rows(mine))
            if best is None or loss < best[0]:
                best = (loss, c)
        doc["kernels"][kernel]["row_block_cost"] = best[1]
        out[kernel] = best[1]
        print(f"attention {kernel:12s} row_block_cost {best[1]}  median |err| {best[0]:.3f} over {len(mine)} points")
    return out


EAGER_PASSES = ("softmax_fwd", "mask_add", "softmax_bwd")


def _solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a·x = b (3 × 3, Cramer's rule)."""
    def det(m: list[list[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))
    d = det(a)
    return [det([[b[r] if c == i else a[r][c] for c in range(3)] for r in range(3)]) / d for i in range(3)]


def derive_eager() -> dict[str, float]:
    """Each point's measured time is the model's time with the passes at zero plus the unknown bytes per
    score times (scores / bandwidth), a pass counted where it runs (forward always, the mask when
    causal, the backward in fwd_bwd): linear in the three unknowns, solved on relative residuals."""
    from gpuplan.catalog.constants import override, table
    from gpuplan.validation import component_models as cm
    from gpuplan.validation import components as comp

    points = [p for p in comp.corpus()["points"] if p["component"] == "attention" and p["inputs"]["kernel"] == "eager"]
    longest = max(p["inputs"]["seq_len"] for p in points)
    fit = [p for p in points if p["inputs"]["seq_len"] == longest]
    doc = json.loads(json.dumps(dict(table("attention_kernels"))))

    def model_s(p: dict, bytes_: dict[str, float]) -> float:
        doc["eager"]["score_pass_bytes"] = bytes_
        with override({"attention_kernels": doc}):
            return cm.attention_modelled_s(p)

    zero = dict.fromkeys(EAGER_PASSES, 0.0)
    ata, atb = [[0.0] * 3 for _ in range(3)], [0.0] * 3
    for p in fit:
        measured = cm.attention_flops_published(p) / p["measured"]["value"]
        base = model_s(p, zero)
        row = [(model_s(p, {**zero, k: 1.0}) - base) / measured for k in EAGER_PASSES]
        rhs = (measured - base) / measured
        for i in range(3):
            atb[i] += row[i] * rhs
            for j in range(3):
                ata[i][j] += row[i] * row[j]
    out = {k: round(v, 1) for k, v in zip(EAGER_PASSES, _solve3(ata, atb), strict=True)}
    doc["eager"]["score_pass_bytes"] = out
    with override({"attention_kernels": doc}):
        check = [abs(r["error"]) for r in comp.rows([p for p in points if p["inputs"]["seq_len"] < longest])]
    print(f"attention eager {out} from {len(fit)} points at s={longest}; "
          f"median |err| {statistics.median(check):.3f} over the {len(check)} shorter ones")
    return out


CAST_SHARES = [round(0.30 + 0.01 * i, 2) for i in range(71)]
CAST_FIT_FROM = 4096  # M, K and N at least this: the cells the share is read off


def derive_fp8_cast() -> dict[str, float]:
    from gpuplan.validation import component_models as cm
    from gpuplan.validation import components as comp

    points = [p for p in comp.corpus()["points"] if p["component"] == "fp8_linear"]
    out = {}
    for recipe in sorted({p["inputs"]["recipe"] for p in points}):
        mine = [p for p in points if p["inputs"]["recipe"] == recipe]
        fit = [p for p in mine if min(p["inputs"][d] for d in ("m", "k", "n")) >= CAST_FIT_FROM]
        if len(fit) < 8:  # a figure or two is a check, not a table to read a rate off
            continue

        def loss(share: float, pts: list[dict]) -> float:
            return statistics.median(abs(math.log(_speedup(cm, p, share) / p["measured"]["value"])) for p in pts)

        best = min(CAST_SHARES, key=lambda s: (loss(s, fit), s))
        out[recipe] = best
        print(f"fp8 {recipe} cast_bandwidth_share {best}: median |log err| {loss(best, fit):.3f} over {len(fit)} "
              f"cells (M, K, N >= {CAST_FIT_FROM}), {loss(best, mine):.3f} over all {len(mine)} "
              f"(at the streaming rate: {loss(1.0, mine):.3f})")
    return out


def _speedup(cm, p: dict, share: float) -> float:  # noqa: ANN001
    bf16_s, fp8_s = cm.fp8_linear_times(p, share)
    return bf16_s / fp8_s


def write(gemm: dict[str, dict[str, float]], attention: dict[str, float],
          eager: dict[str, float] | None = None, fp8_cast: dict[str, float] | None = None) -> None:
    from import_matmul_sweeps import MATMUL, dump

    doc = json.loads(MATMUL.read_text())
    for arch, values in gemm.items():
        doc["kernel_model"]["architectures"][arch].update(values, derived="tools/derive_kernel_rates.py")
    for recipe, share in (fp8_cast or {}).items():
        doc["fp8_scaling_overhead"]["cast_bandwidth_share"][recipe]["value"] = share
    MATMUL.write_text(dump(doc))
    path = ROOT / "src" / "gpuplan" / "catalog" / "constants.json"
    text = path.read_text()
    for kernel, c in attention.items():  # edit in place: the file's one-line rows stay as they are
        at = text.index(f'"{kernel}": {{', text.index('"attention_kernels"'))
        key = text.index('"row_block_cost": ', at)
        end = text.index(",", key)
        text = text[:key] + f'"row_block_cost": {c}' + text[end:]
    if eager:
        key = text.index('"score_pass_bytes": ', text.index('"attention_kernels"'))
        end = text.index("}", key) + 1
        text = text[:key] + '"score_pass_bytes": ' + json.dumps(eager) + text[end:]
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true")
    p.add_argument("--only", choices=("gemm", "attention", "fp8"))
    args = p.parse_args(argv)
    gemm = derive_gemm() if args.only in (None, "gemm") else {}
    attention = derive_attention() if args.only in (None, "attention") else {}
    eager = derive_eager() if args.only in (None, "attention") else {}
    fp8_cast = derive_fp8_cast() if args.only in (None, "fp8") else {}
    if args.write:
        write(gemm, attention, eager, fp8_cast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
