"""Human-readable output of what gpuplan measures or checks: trial runs, calibration, validation on the
published runs and the component microbenchmarks. Numbers arrive in SI."""

from __future__ import annotations

import statistics

from gpuplan.report.text import layout_str, table
from gpuplan.units import fmt_gib


def profile_text(rep: dict) -> str:
    lay = layout_str(rep["scenario"]["layout"])
    lines = [f"trial run on {rep['world']}× {rep['gpu']} ({rep['device']}), layout {lay}"]
    if rep["oom"]:
        lines.append("OUT OF MEMORY")
    else:
        mm, pm = rep["measured"]["memory"], rep["predicted"]["memory"]
        rows = [[k, fmt_gib(mm[k], 3), fmt_gib(pm[k], 3), f"{mm[k] / pm[k]:.3f}" if pm[k] else "-"]
                for k in ("weights", "gradients", "optimizer")]
        p_states = pm["weights"] + pm["gradients"] + pm["optimizer"]
        rows.append(["model states", fmt_gib(mm["model_states"], 3), fmt_gib(p_states, 3),
                     f"{mm['model_states'] / p_states:.3f}"])
        if mm["total"]:
            rows.append(["peak allocated", fmt_gib(mm["total"], 2), fmt_gib(pm["total"], 2),
                         f"{mm['total'] / pm['total']:.3f}"])
            rows.append(["peak reserved", fmt_gib(mm["reserved"], 2), "", ""])
        lines.append(table(["memory per GPU (GiB)", "measured", "predicted", "ratio"], rows))
        mt, pt = rep["measured"]["time"], rep["predicted"]["time"]
        lines.append(f"step {mt['step_s']:.3f} s, {mt['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
                     + (f" (predicted {pt['tokens_per_s_per_gpu']:,.0f}, MFU {mt['mfu']:.1%})"
                        if rep["device"] == "cuda" and mt.get("mfu") is not None else ""))
        if rep.get("max_micro_batch"):
            lines.append(f"largest micro-batch that fits: {rep['max_micro_batch']}")
    lines += [f"note: {n}" for n in rep.get("notes", [])]
    lines += [f"advice: {a}" for a in rep.get("advice", [])]
    if rep.get("stored"):
        lines.append(f"recorded as run {rep['stored']} in {rep['store']}")
    return "\n".join(lines)

def _summary_lines(summary: dict) -> list[str]:
    """One line per labelled group of validation rows: count, median and max |error|, share within ±15%."""
    return [f"{label} rows: n={s['n']}, median |error| {s['median_abs_error']:.1%}, "
            f"within ±15%: {s['within_15pct']:.0%}, max |error| {s['max_abs_error']:.0%}"
            for label, s in summary.items()]

def _error_line(label: str, a: dict) -> str:
    if not a or not a.get("n"):
        return f"  {label:24s} -"
    return (f"  {label:24s} n {a['n']:3d}   median |error| {a['median_abs_error']:6.1%}   within ±15% "
            f"{a['within_15pct']:4.0%}   within ±25% {a['within_25pct']:4.0%}   median signed {a['median_error']:+.1%}")

def validate_text(s: dict) -> str:
    """``gpuplan validate``: error on the open corpus, cross-validated (leave one source out) and in-sample."""
    lines = ["Prediction error on the open corpus of published training runs (src/gpuplan/validation/corpus.json,",
             "imported from the cited published_runs.yaml). Cross-validated: each source's rows predicted by",
             "constants fitted on the other sources only (tools/fit_constants.py, validation/cv.json).", ""]
    for part, label in (("cross_validated", "leave-one-source-out (the honest figure)"),
                        ("in_sample", "in-sample (shipped constants)")):
        summary = s.get(part)
        lines.append(f"{label}:")
        if not summary:
            lines.append("  not measured: run python tools/fit_constants.py --write")
            continue
        for cat, v in summary.items():
            lines.append(_error_line(cat, v["all"]))
            lines += [_error_line("  as " + m, b) for m, b in v.get("by_metric", {}).items()]
            lines += [_error_line("  " + src, b) for src, b in v["by_source"].items()]
        lines.append("")
    lines += _baseline_lines(s)
    for kind, c in (s.get("interval_coverage") or {}).items():
        if c.get("share") is not None:
            lines.append(f"80% intervals, {kind}: the published value inside the interval built without its own "
                         f"source in {c['share']:.0%} of {c['n']} cases (tails widened ×{c['width']:g} about the "
                         f"median; {c['unwidened']['share']:.0%} unwidened)")
    lines.append(table(["row", "source", "published as", "published", "predicted", "error"],
                       [[r["id"], r["source_key"], r["metric"], f"{r['published']:,.4g}", f"{r['predicted']:,.4g}",
                         f"{r['error']:+.0%}"] for r in s["rows"]]))
    lines.append(f"skipped {len(s['skipped'])} rows: " + "; ".join(f"{x['id']} ({x['why']})" for x in s["skipped"]))
    return "\n".join(lines)

def _baseline_lines(s: dict) -> list[str]:
    """The constant-efficiency calculator beside gpuplan on the same rows (``validation.baseline``): pooled, and each
    source once, as the fit weighs them (139 llm-foundry rows do not outvote the other sources)."""
    base, cv = s.get("baseline") or {}, s.get("cross_validated") or s.get("in_sample") or {}
    if not base:
        return []
    lines = [f"a constant-efficiency calculator (every GPU at {base['efficiency']:.0%} of its dense peak over the "
             "model FLOPs per token, no layout, framework or network) on the same rows:"]
    for cat in ("throughput", "gpu_hours"):
        b, g = (base.get(cat) or {}).get("all"), (cv.get(cat) or {}).get("all")
        if not b or not b.get("n") or not g or not g.get("n"):
            continue
        lines.append(_error_line(cat, b) + _versus(b["median_abs_error"], g["median_abs_error"]))
        mb, mg = (statistics.median(x["median_abs_error"] for x in by.values()) for by in
                  (base[cat]["by_source"], cv[cat]["by_source"]))
        lines.append(f"  {'  median over sources':24s} n {len(base[cat]['by_source']):3d}   median |error| {mb:6.1%}"
                     + _versus(mb, mg))
    return lines + [""]


def _versus(calculator: float, ours: float) -> str:
    ratio = f"{calculator / ours:.1f}" if ours else "-"
    return f"   (gpuplan {ours:.1%}; calculator / gpuplan {ratio})"


def constants_text(rows: list[dict]) -> str:
    """``gpuplan validate --constants``: every modelling constant, its value, how it was set, its source."""
    def show(v: object) -> str:
        if isinstance(v, dict):
            return ", ".join(f"{k}={show(x)}" for k, x in v.items())
        return f"{v:,}" if isinstance(v, int) else f"{v:.4g}" if isinstance(v, float) else str(v)

    return table(["constant", "value", "status", "source"],
                 [[r["name"], show(r["value"])[:60], r["status"], " ".join(str(r["source"]).split())[:110]]
                  for r in rows])

def components_text(res: dict) -> str:
    """``gpuplan validate --components``: per component, published microbenchmarks against the model
    (rendered by report/components.py)."""
    from gpuplan.report.components import render

    return render(res)

def calibrate_text(res: dict) -> str:
    """``gpuplan calibrate`` for people: the factors per GPU type and the errors before and after."""
    if not res["gpus"]:
        return f"no GPU trial runs in {res['store']}: run `gpuplan profile --device cuda` first"

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    lines = [f"{gpu}: {r['runs']} runs; memory ×{r['memory_factor']:.3f} (error {pct(r['memory_error_before'])} → "
             f"{pct(r['memory_error_after'])}), throughput ×{r['compute_factor']:.3f} (error "
             f"{pct(r['throughput_error_before'])} → {pct(r['throughput_error_after'])}); published "
             f"validation error {pct(r['validation_error_before'])} → {pct(r['validation_error_after'])}"
             for gpu, r in res["gpus"].items()]
    lines.append(f"applied when a scenario sets hardware.calibration: default (store {res['store']})")
    return "\n".join(lines)
