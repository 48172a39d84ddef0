"""Reports for a design doc (``--report plan.md`` or ``.html``): the inputs, the recommendation
and why, the top alternatives, the scaling curve, the assumptions with their sources and
status, and the model's measured error on published runs.

A report is a list of blocks (heading, paragraph, list, table) rendered to Markdown or to a
self-contained HTML page; numbers arrive in SI and are formatted here.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.outfiles import write_atomic
from gpuplan.report.lines import comm_parts
from gpuplan.report.spans import peak_span, span, tight_line
from gpuplan.report.text import gpu_label, layout_str, market_line, no_best_line
from gpuplan.units import fmt_count, fmt_duration, fmt_gib, fmt_usd

Block = tuple  # ("h", level, text) | ("p", text) | ("ul", [items]) | ("table", headers, rows)
SOURCE_CHARS = 180  # assumption sources are cut to this length in the table


# ---- content ---------------------------------------------------------------------------------

def _inputs(est: dict) -> list[Block]:
    sc = est["scenario"]
    hw, tr, m = sc["hardware"], sc["training"], est["model"]
    rows = [["model", f"{m['name']} — {fmt_count(m['params'])} parameters"
             + (f", {fmt_count(m['params_active'])} active" if m["params_active"] != m["params"] else "")
             + f" (count from {m.get('params_source', 'formula')})"],
            ["GPU", f"{gpu_label(hw['gpu'])}, {hw['gpus_per_node']} per node, scale-up {hw['scale_up']}, "
                    f"scale-out {hw['scale_out'] or '-'}"],
            ["price", f"{fmt_usd(hw['price_per_gpu_hour'])} per GPU-hour" if hw["price_per_gpu_hour"] else "-"],
            ["sequence length", str(tr["seq_len"])],
            ["global batch", _batch_words(tr) if tr["global_batch"] else "-"],
            ["tokens to train", fmt_count(tr["tokens"]) if tr["tokens"] else (f"{tr['steps']} steps"
                                                                               if tr["steps"] else "-")],
            ["precision / optimizer / method", f"{tr['precision']} / {tr['optimizer']} / {tr['method']}"]]
    return [("h", 2, "Inputs"), ("table", ["input", "value"], rows)]


def _estimate_rows(ests: list[dict]) -> list[list[str]]:
    rows = []
    for e in ests:
        t, hw = e["time"], e["scenario"]["hardware"]
        rows.append([f"{hw['gpus']}× {gpu_label(hw['gpu'])}", layout_str(e["scenario"]["layout"]),
                     fmt_duration(t["train_s"]) if t.get("train_s") else "-", fmt_usd(e["cost"]["usd"]),
                     f"{t['tokens_per_s_per_gpu']:,.0f}" if t.get("tokens_per_s_per_gpu") else "-",
                     f"{t['mfu']:.0%}" if t.get("mfu") is not None else "-",
                     f"{fmt_gib(e['memory']['total'])} / {fmt_gib(e['memory']['capacity'], 0)}"])
    return rows


EST_HEAD = ["GPUs", "layout", "time to train", "cost", "tokens/s/GPU", "MFU", "memory GiB / capacity"]


def _why(est: dict) -> list[str]:
    mem, t = est["memory"], est["time"]
    out = [f"fits with {fmt_gib(mem['headroom'])} GiB free of {fmt_gib(mem['capacity'])} GiB per GPU "
           f"(peak {fmt_gib(mem['total'])} GiB{peak_span(mem)}, in the {mem['peak_phase']})" if mem["fits"] else
           tight_line(mem) if mem.get("tight") else
           f"does NOT fit: {fmt_gib(mem['total'])} GiB{peak_span(mem)} needed of {fmt_gib(mem['capacity'])} GiB"]
    if t.get("step_s"):
        d = t["comm_detail"]
        out.append(f"step {fmt_duration(t['step_s'])}: compute {fmt_duration(t['compute_s'])}, exposed "
                   f"communication {fmt_duration(t['comm_exposed_s'])} ({comm_parts(d)}), pipeline bubble "
                   f"{fmt_duration(t['bubble_s'])}")
        out.append(f"MFU {t['mfu']:.1%} (HFU {t['hfu']:.1%}), {t['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
                   + span(t, "tokens_per_s_per_gpu", lambda x: f"{x:,.0f}"))
        if t.get("train_s_with_failures"):
            out.append(f"with interruptions and restarts: {fmt_duration(t['train_s_with_failures'])}")
    return out


def _assumptions(est: dict | None) -> list[Block]:
    from gpuplan.catalog.constants import entries

    consts = entries()
    counts: dict[str, int] = {}
    rows = []
    for name, c in consts.items():
        status = c.get("status", "?")
        counts[status] = counts.get(status, 0) + 1
        val = c.get("value", "")
        if isinstance(val, int | float):
            val_s = f"{val:,}" if isinstance(val, int) else f"{val:g}"
        else:
            val_s = "(table)" if isinstance(val, dict) else str(val)
        src = " ".join(str(c.get("source", "")).split())
        rows.append([name, val_s, status, src if len(src) <= SOURCE_CHARS else src[:SOURCE_CHARS - 1] + "…"])
    out: list[Block] = [("h", 2, "Assumptions and their sources"),
                        ("p", "Modelling constants (src/gpuplan/catalog/constants.json): "
                              + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                              + ". 'cited' values come from a paper or documentation; 'estimate' values are "
                                "typical figures to be replaced by `gpuplan profile` measurements."),
                        ("table", ["constant", "value", "status", "source"], rows)]
    if est is not None:
        notes = list(est["model"].get("assumed") or [])
        hw = est["scenario"]["hardware"]
        notes.append(f"GPU and fabric figures from the catalogue (src/gpuplan/catalog/gpus.json, fabrics.json): "
                     f"{gpu_label(hw['gpu'])}, {hw['scale_up']}, {hw['scale_out'] or 'no scale-out'}; each row cites "
                     "its datasheet; prices are dated list prices")
        notes.append("memory is per GPU for the most loaded rank (first pipeline stage); MFU counts model FLOPs "
                     "only (PaLM convention)")
        out.append(("ul", notes))
    return out


def _validation(scores: dict | None) -> list[Block]:
    """The model's error on published runs (``gpuplan validate``'s scores, computed by the caller)."""
    if not scores:
        return []
    rows = []
    for part in ("cross_validated", "in_sample"):
        for cat, v in (scores.get(part) or {}).items():
            s = v["all"]
            rows.append([cat, part.replace("_", " "), str(s["n"]), f"{s['median_abs_error']:.1%}",
                         f"{s['within_15pct']:.0%}", f"{s['within_25pct']:.0%}"])
    return [("h", 2, "How accurate the model is"),
            ("p", "Prediction error on the open corpus of published training runs bundled with gpuplan "
                  "(src/gpuplan/validation/corpus.json; `gpuplan validate` lists every row). 'cross validated': "
                  "each source's rows predicted by constants fitted on the other sources only."),
            ("table", ["category", "error", "n", "median |error|", "within ±15%", "within ±25%"], rows)]


def plan_blocks(res: dict, scores: dict | None = None) -> list[Block]:
    if "error" in res:
        return [("h", 1, "gpuplan plan"), ("p", f"error: {res['error']}")]
    best = res.get("best")
    blocks: list[Block] = [("h", 1, f"Training plan: {best['model']['name']}" if best else "Training plan")]
    if best is None:
        line = no_best_line(res)
        blocks.append(("p", line[0].upper() + line[1:]))
        blocks += [("ul", res.get("advice") or [])]
        return blocks
    blocks += _inputs(best)
    sc = best["scenario"]
    blocks += [("h", 2, "Recommendation"),
               ("p", f"**{sc['hardware']['gpus']}× {gpu_label(sc['hardware']['gpu'])}** "
                     f"({sc['hardware']['nodes']} node{'s' if sc['hardware']['nodes'] > 1 else ''}), layout "
                     f"`{layout_str(sc['layout'])}`: {fmt_duration(best['time']['train_s'])}"
                     f"{span(best['time'], 'train_s', fmt_duration)} to train, {fmt_usd(best['cost']['usd'])}"
                     f"{span(best['cost'], 'usd', fmt_usd)}. Searched {res['searched']:,} configurations."),
               ("p", market_line(best["cost"]["market"]) + ".") if best["cost"].get("market") else ("p", ""),
               ("p", f"Why this one: {res['recommendation']['text']}."
                     + (f" ({res['recommendation']['space']}.)" if res["recommendation"].get("space") else ""))
               if res.get("recommendation") else ("p", ""),
               ("ul", _why(best) + [f"advice: {a}" for a in res.get("advice", [])]),
               ("h", 2, "Top alternatives"), ("table", EST_HEAD, _estimate_rows(res["candidates"]))]
    if res.get("scaling"):
        eq = res["equilibrium"]
        rows = []
        for r in res["scaling"]:
            e = r["best"]
            marks = ["equilibrium"] if r["gpus"] == eq.get("gpus") else []
            if not r.get("improves", True):
                marks.append("slower than a smaller count")
            rows.append([str(r["gpus"]), layout_str(e["scenario"]["layout"]), f"{r['speedup']:.2f}×",
                         f"{r['efficiency']:.0%}", fmt_duration(e["time"]["train_s"]) if e["time"]["train_s"] else "-",
                         fmt_usd(e["cost"]["usd"]), ", ".join(marks)])
        blocks += [("h", 2, f"Scaling curve on {eq['gpu']}"),
                   ("table", ["GPUs", "best layout", "speed-up", "parallel eff.", "time to train", "cost", ""], rows),
                   ("p", f"Compute equilibrium: {eq['why']}.")]
        if res.get("scaling_note"):
            blocks.append(("p", f"Note: {res['scaling_note']}."))
    mins = ", ".join(f"{g}: {n if n is not None else 'none'}" for g, n in res["min_gpus"].items())
    blocks.append(("p", f"Smallest GPU count that fits — {mins}."))
    if res.get("pareto"):
        blocks += [("h", 2, "Time/cost Pareto frontier"),
                   ("table", ["GPUs", "time to train", "cost"],
                    [[f"{p['gpus']}× {p['gpu']}", fmt_duration(p["train_s"]) if p["train_s"] else "-",
                      fmt_usd(p["usd"])] for p in res["pareto"]])]
    blocks += _assumptions(best) + _validation(scores)
    return blocks


def estimate_blocks(est: dict, scores: dict | None = None) -> list[Block]:
    if "error" in est:
        return [("h", 1, "gpuplan evaluate"), ("p", f"error: {est['error']}")]
    sc = est["scenario"]
    blocks: list[Block] = [("h", 1, f"Training estimate: {est['model']['name']} on {sc['hardware']['gpus']}× "
                                    f"{gpu_label(sc['hardware']['gpu'])}")]
    blocks += _inputs(est)
    mem = est["memory"]
    blocks += [("h", 2, "Layout and verdict"), ("p", f"`{layout_str(sc['layout'])}`"), ("ul", _why(est)),
               ("table", EST_HEAD, _estimate_rows([est])),
               ("h", 2, "Memory per GPU"),
               ("table", ["part", "GiB"], [[k, fmt_gib(mem[k], 2)] for k in
                                           ("weights", "gradients", "optimizer", "activations", "other", "total",
                                            "capacity")])]
    blocks += _assumptions(est) + _validation(scores)
    return blocks


# ---- rendering -------------------------------------------------------------------------------

def _md_cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2])
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "ul":
            out.append("\n".join(f"- {item}" for item in b[1]))
        elif b[0] == "table":
            head, rows = b[1], b[2]
            out.append("\n".join(["| " + " | ".join(_md_cell(h) for h in head) + " |",
                                  "|" + "|".join("---" for _ in head) + "|",
                                  *("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows)]))
        elif b[0] == "img":
            out.append(f"![{b[1]}]({b[2]})")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    """Escape, then the two Markdown marks the report uses: **bold** and `code`."""
    import re

    s = html.escape(text)
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


def to_html(blocks: list[Block], svgs: list[str] | None = None) -> str:
    title = next((b[2] for b in blocks if b[0] == "h"), "gpuplan report")
    parts: list[str] = []
    for b in blocks:
        if b[0] == "h":
            parts.append(f"<h{b[1]}>{_inline_html(b[2])}</h{b[1]}>")
            if b[1] == 1 and svgs:
                parts.extend(f"<figure>{s[s.find('<svg'):]}</figure>" for s in svgs)
        elif b[0] == "p":
            parts.append(f"<p>{_inline_html(b[1])}</p>")
        elif b[0] == "ul":
            parts.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b[1]) + "</ul>")
        elif b[0] == "table":
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in b[1])
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in b[2])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;line-height:1.45}"
             "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;"
             "padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}"
             "code{background:#f3f3f3;padding:1px 4px}svg{max-width:100%;height:auto}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def write(results: list[dict], path: str | Path, kind: str, scores: dict | None = None, force: bool = False) -> Path:
    """Write the report of plan (``kind="plan"``) or evaluate results to ``path`` (.md or .html),
    with ``scores`` (``{"runtime": ..., "memory": ...}`` from validation/) as its accuracy section.
    The HTML page embeds the plots when matplotlib is installed."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext not in (".md", ".html", ".htm"):
        raise GpuplanError(f"--report {str(p)!r}: use a .md or .html file name")
    write_atomic("--report", p, render(results, "md" if ext == ".md" else "html", kind, scores), force)
    return p


def render(results: list[dict], fmt: str, kind: str, scores: dict | None = None) -> str:
    """The report's text: Markdown (``fmt="md"``) or a self-contained HTML page (``"html"``)."""
    make = plan_blocks if kind == "plan" else estimate_blocks
    blocks: list[Block] = []
    for r in results:
        blocks += make(r, scores)
    if fmt == "md":
        return to_markdown(blocks)
    svgs: list[str] = []
    try:
        from gpuplan.report import plots

        good = [r for r in results if "error" not in r and (kind != "plan" or r.get("best"))]
        svgs = [plots.svg_text(plots.plan_figure(r) if kind == "plan" else plots.estimate_figure(r)) for r in good]
    except GpuplanError:
        svgs = []  # no matplotlib: the report without pictures
    return to_html(blocks, svgs)


def _batch_words(tr: dict) -> str:
    """The global batch as the scenario counts it: sequences, or a preference run's pairs (two sequences each)."""
    seqs = tr["global_batch"] * (2 if tr.get("preference") else 1)
    pairs = f"{tr['global_batch']} pairs, " if tr.get("preference") else ""
    return f"{pairs}{seqs} sequences ({fmt_count(seqs * tr['seq_len'])} tokens)"
