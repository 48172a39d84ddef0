"""``gpuplan validate --components`` in words: the model's components against published microbenchmarks
(the report of ``validation.components.report()``; nothing is computed here)."""

from __future__ import annotations

from typing import Any

from gpuplan.report.text import table

TITLES = {"gemm": "GEMM (matmul throughput by shape and dtype)",
          "attention": "attention kernels (FlashAttention 1/2/3/4, cuDNN, CK/Triton on ROCm, eager)",
          "memory": "memory-bound kernels (STREAM, norms, softmax)",
          "collective": "collectives (algorithm bandwidth = size / time)",
          "scan": "chunked scans (Mamba-2 SSD)",
          "fp8_linear": "fp8 linear (speedup of LayerNorm -> Linear -> Sigmoid, fwd + bwd, over bf16)"}


def rate(value: float, unit: str) -> str:
    """A rate as people read it: FLOP/s in TFLOP/s, bytes/s in GB/s (decimal)."""
    if unit == "flop/s":
        return f"{value / 1e12:,.1f} TFLOP/s"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value / 1e9:,.3g} GB/s"


def _cells(label: str, s: dict[str, Any]) -> list[str]:
    if not s.get("n") or "median_abs_error" not in s:
        return [label, str(s.get("n", 0)), "-", "-", "-"]
    return [label, str(s["n"]), f"{s['median_abs_error']:.1%}", f"{s['within_15']:.0%}",
            f"{s['median_signed_error']:+.1%}"]


def summary_table(summary: dict[str, Any]) -> str:
    """One line per component, then per source, GPU (and attention kernel) inside it."""
    out = []
    for comp, v in summary.items():
        out.append(_cells(f"{comp}", v["all"]))
        for part in ("by_source", "by_gpu", "by_kernel"):
            for key, s in v.get(part, {}).items():
                out.append(_cells(f"  {part[3:]}: {key}", s))
    return table(["component / group", "n", "median |error|", "within ±15 %", "median signed"], out)


def _worst(summary: dict[str, Any]) -> list[str]:
    lines = ["", "worst points (error = modelled / measured − 1):"]
    for comp, v in summary.items():
        for w in v["all"].get("worst", []):
            lines.append(f"  {comp:10s} {w['error']:+8.0%}  {w['what']} on {w['gpu']}: measured "
                         f"{rate(w['measured'], w['unit'])}, modelled {rate(w['modelled'], w['unit'])}  [{w['id']}]")
    return lines


def _support(rows: list[dict[str, Any]]) -> list[str]:
    bad = [r for r in rows if r["runs"] is False]
    if not bad:
        return ["", "kernel support: every attention kernel the model assigns runs where it assigns it"]
    return ["", "attention kernels the model assigns where the published support statements say they do not run:"] + [
        f"  {r['architecture']} ({', '.join(r['gpus'])}), {r['framework']}: {r['kernel_modelled']} "
        f"(not supported there: {', '.join(r['sources'])})" for r in bad]


def _constants(consts: dict[str, Any]) -> list[str]:
    def show(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {show(x)}" for k, x in v.items()) + "}"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ["", "constants applied (catalog/constants.json), as the step model applies them:"] + [
        f"  {name} = {show(c['value'])} ({c['status']}; {', '.join(c['components'])})" for name, c in consts.items()]


def rows_tables(rows: list[dict[str, Any]]) -> list[str]:
    """Every point, per component: what was measured, the published and the modelled rate, the error."""
    out = []
    for comp, title in TITLES.items():
        mine = [r for r in rows if r["component"] == comp]
        if not mine:
            continue
        out += ["", f"{title}:",
                table(["point", "gpu", "source", "published", "modelled", "error"],
                      [[r["what"] + (" *" if r["read_off_plot"] else ""), r["gpu"], r["source"],
                        rate(r["measured"], r["unit"]), rate(r["modelled"], r["unit"]), f"{r['error']:+.0%}"]
                       for r in mine])]
    return out + ["", "* read from the labels of a published figure (the corpus gives the uncertainty)"]


def render(res: dict[str, Any]) -> str:
    lines = [f"The runtime model's components against {res['points']} published microbenchmark points "
             "(src/gpuplan/validation/components.json).",
             "Modelled with the model's own component functions and fitted constants; error = modelled / measured − 1,",
             "compared as rates (FLOP/s, bytes/s).", "", summary_table(res["summary"])]
    lines += _worst(res["summary"]) + _support(res["kernel_support"]) + _constants(res["constants"])
    if res.get("gaps"):
        lines += ["", "not covered (no published measurement found):"] + [f"  - {g}" for g in res["gaps"]]
    lines += rows_tables(res["rows"])
    return "\n".join(lines)
