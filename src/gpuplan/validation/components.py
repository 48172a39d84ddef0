"""``gpuplan validate --components``: the runtime model's components against published microbenchmarks.

``components.json`` holds published measurements — GEMM throughput by shape and dtype, attention
kernels by pass, mask, head size and sequence, collective bandwidth by size and group, memory-bound
kernels, the Mamba-2 chunked scan — each with its source. For every point the model's own component
function gives its time (``component_models``, computed by the functions the step model calls, at burst
rates: the share a training step sustains, the one fitted constant the kernels carry, is left out); the two
are compared as rates (FLOP/s, bytes/s), error = modelled / measured − 1. Summaries per component,
per source and per GPU: median |error|, the share within ±15 %, the median signed error and the worst
points. A component's bias here is what an end-to-end fit would otherwise absorb.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.catalog.constants import entries
from gpuplan.catalog.hardware import gpus
from gpuplan.validation import component_models as cm

COMPONENTS = ("gemm", "attention", "memory", "collective", "scan", "fp8_linear")
WITHIN = 0.15
WORST = 5
# the constants each component's modelled value uses (catalog/constants.json; the GEMM's tiles, sweeps and
# best shapes are catalog/matmul.json), as the kernel model applies them: burst rates, so none is fitted
APPLIED = {
    "gemm": ("gemm_efficiency", "fp8_gemm_efficiency_ratio", "hbm_stream_share"),
    "attention": ("attention_kernels", "hbm_stream_share", "kernel_floor_s"),
    "memory": ("hbm_stream_share", "kernel_floor_s"),
    "collective": ("scale_up_efficiency", "scale_out_efficiency", "ring_latency_s", "nvls_tree_share"),
    "scan": ("scan_kernel_share", "hbm_stream_share", "kernel_floor_s"),
    "fp8_linear": ("gemm_efficiency", "fp8_gemm_efficiency_ratio", "hbm_stream_share", "kernel_floor_s"),
}


@cache
def _corpus() -> dict[str, Any]:
    return load_json("../validation/components.json")  # type: ignore[no-any-return]


def corpus() -> dict[str, Any]:
    """The component corpus (a fresh copy)."""
    return load_json("../validation/components.json")  # type: ignore[no-any-return]


def _label(p: dict[str, Any]) -> str:
    x = p["inputs"]
    c = p["component"]
    if c == "gemm":
        return f"{x['dtype']} {x['m']}x{x['n']}x{x['k']}" + (f" b{x['batch']}" if x.get("batch", 1) != 1 else "")
    if c == "attention":
        return (f"{x['kernel']} {x['pass']} {'causal' if x['causal'] else 'full'} d{x['head_dim']} "
                f"s{x['seq_len']} b{x['batch']}")
    if c == "memory":
        return x["op"] + (f" {x['dtype']} {x['rows']}x{x['cols']}" if "rows" in x else "")
    if c == "fp8_linear":
        return f"{x['recipe']} LN-Linear-Sigmoid {x['m']}x{x['k']}x{x['n']}"
    if c == "scan":
        return f"{x['kernel']} h{x['heads']} P{x['head_dim']} N{x['state']} Q{x['chunk']} s{x['seq_len']} b{x['batch']}"
    if x["collective"].startswith("deepep"):
        return f"{x['collective']} EP{x['group']} ({x['nodes']} node{'s' * (x['nodes'] > 1)}) {x['tokens']} tokens"
    return f"{x['collective']} {x['group']}/{x['gpus']} gpus {_size(x['bytes'])}" + (
        f" {x['algorithm']}" if x.get("algorithm") else "")


def _size(b: float) -> str:
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b:g} B"


def _rates(p: dict[str, Any]) -> tuple[float, float, str]:
    """(measured rate, modelled rate, unit) of one point, both in the same convention."""
    c, meas = p["component"], p["measured"]
    if c == "gemm":
        return meas["value"], cm.gemm_flops(p) / cm.gemm_modelled_s(p), "flop/s"
    if c == "attention":
        return meas["value"], cm.attention_flops_published(p) / cm.attention_modelled_s(p), "flop/s"
    if c == "memory":
        if meas["quantity"] == "bytes_per_s":
            return meas["value"], cm.memory_bandwidth(p), "B/s"
        model_s, nbytes = cm.memory_modelled(p)
        return nbytes / meas["value"], nbytes / model_s, "B/s"
    if c == "scan":
        return cm.scan_flops(p) / meas["value"], cm.scan_flops(p) / cm.scan_modelled_s(p), "flop/s"
    if c == "fp8_linear":  # the speedup over the same module in bf16: bf16 time / fp8 time
        bf16_s, fp8_s = cm.fp8_linear_times(p)
        return meas["value"], bf16_s / fp8_s, "x"
    if p["inputs"]["collective"].startswith("deepep"):
        return (*cm.deepep_rates(p), "B/s")
    nbytes = p["inputs"]["bytes"]
    return nbytes / cm.collective_measured_s(p), nbytes / cm.collective_modelled_s(p), "B/s"


def evaluate(p: dict[str, Any]) -> dict[str, Any]:
    """One row: the point, its published and modelled rate, and the error (modelled / measured − 1)."""
    measured, modelled, unit = _rates(p)
    row = {"id": p["id"], "component": p["component"], "source": p["source"], "gpu": p["gpu"], "what": _label(p),
           "measured": measured, "modelled": modelled, "unit": unit, "error": modelled / measured - 1,
           "read_off_plot": p.get("read_off_plot", False)}
    if p["component"] == "attention":
        row["kernel_modelled"] = cm.attention_kernel_modelled(p)
    return row


def rows(points: Iterable[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [evaluate(p) for p in (_corpus()["points"] if points is None else points)]


def stats(errors: list[float], worst: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Median |error|, share within ±15 %, median signed error (and the worst rows when given)."""
    out: dict[str, Any] = {"n": len(errors)}
    if errors:
        out.update(median_abs_error=statistics.median(abs(e) for e in errors),
                   within_15=sum(abs(e) <= WITHIN for e in errors) / len(errors),
                   median_signed_error=statistics.median(errors))
    if worst is not None:
        out["worst"] = [{k: r[k] for k in ("id", "what", "gpu", "measured", "modelled", "unit", "error")}
                        for r in sorted(worst, key=lambda r: -abs(r["error"]))[:WORST]]
    return out


def _grouped(rs: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rs:
        groups.setdefault(key(r), []).append(r)
    return {k: stats([r["error"] for r in v]) for k, v in sorted(groups.items())}


def summarize(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per component: the error over all its points, by source and by GPU, and its worst points."""
    out = {}
    for c in COMPONENTS:
        mine = [r for r in rs if r["component"] == c]
        if not mine:
            continue
        out[c] = {"all": stats([r["error"] for r in mine], mine),
                  "by_source": _grouped(mine, lambda r: r["source"]),
                  "by_gpu": _grouped(mine, lambda r: r["gpu"])}
        if c == "attention":
            out[c]["by_kernel"] = _grouped(mine, lambda r: f"{r['what'].split()[0]} as {r['kernel_modelled']}")
    return out


def kernel_support() -> list[dict[str, Any]]:
    """Per catalogue architecture: the attention kernel the model gives a generic stack and a
    Transformer Engine stack, and whether the published support statements let it run there."""
    from gpuplan.model.compute import attention_kernel

    facts = _corpus()["kernel_support"]
    runs = {"flash2": ("flash2", "sdpa_flash"), "cudnn": ("cudnn",), "sdpa_mem_efficient": ("sdpa_mem_efficient",),
            "rocm_ck": ("flash2",), "rocm_triton": ("flash2",), "flash1": ("flash1",), "eager": ()}
    out = []
    for arch in sorted({g.architecture for g in gpus() if g.architecture}):
        for framework in ("generic", "megatron-core"):
            kernel = attention_kernel(framework, arch)
            said = [f for f in facts if f["kernel"] in runs[kernel] and (arch in f["runs_on"] or arch in f["not_on"])]
            ok = None if not said else any(arch in f["runs_on"] for f in said)
            out.append({"architecture": arch, "framework": framework, "kernel_modelled": kernel, "runs": ok,
                        "sources": sorted({f["source"] for f in said}),
                        "gpus": sorted(g.id for g in gpus() if g.architecture == arch)})
    return out


def constants_applied() -> dict[str, dict[str, Any]]:
    """The constants the modelled values use, with their value and status."""
    every = entries()
    names = sorted({n for names in APPLIED.values() for n in names})
    return {n: {"value": every[n].get("value"), "status": every[n].get("status"),
                "components": [c for c in COMPONENTS if n in APPLIED[c]]} for n in names}


def report() -> dict[str, Any]:
    """What ``gpuplan validate --components`` prints: summaries, every row, kernel support, the
    constants applied, the corpus' known gaps and what it left out."""
    rs = rows()
    doc = _corpus()
    return {"summary": summarize(rs), "rows": rs, "kernel_support": kernel_support(),
            "constants": constants_applied(), "gaps": list(doc.get("gaps", [])),
            "excluded": list(doc.get("excluded", [])), "points": len(rs)}
