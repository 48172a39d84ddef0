"""Pictures of a plan or an Estimate: scaling curve, per-GPU memory against capacity, the
time/cost Pareto frontier, and the step-time breakdown.

matplotlib is optional (``pip install "gpuplan[plot]"``) and imported only here, lazily. The
figures are built with ``matplotlib.figure.Figure`` (no pyplot state, no GUI backend). Numbers
arrive in SI; this module converts them for the axes (GiB, days, USD, seconds).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.outfiles import write_atomic
from gpuplan.report.text import gpu_label
from gpuplan.units import GiB

DAY_S = 86400.0
FORMATS = (".png", ".svg", ".html")
MEMORY_PARTS = (("weights", "weights", "#4C72B0"), ("gradients", "gradients", "#55A868"),
                ("optimizer", "optimizer states", "#C44E52"), ("activations", "activations", "#8172B2"),
                ("other", "logits, buffers, runtime", "#CCB974"))
TIME_PARTS = (("compute_s", "compute", "#4C72B0"), ("comm_exposed_s", "exposed communication", "#DD8452"),
              ("bubble_s", "pipeline bubble", "#937860"), ("optimizer_s", "optimizer step", "#8C8C8C"))


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise GpuplanError('--plot needs matplotlib: pip install "gpuplan[plot]" (or pip install matplotlib)') \
            from None
    return Figure


def _short(est: dict) -> str:
    lay = est["scenario"]["layout"]
    hw = est["scenario"]["hardware"]
    parts = [f"{hw['gpus']}×{gpu_label(hw['gpu'])}", f"tp{lay['tp']} pp{lay['pp']}"]
    if lay["cp"] > 1:
        parts.append(f"cp{lay['cp']}")
    parts.append(f"z{lay['zero']}" + (f"/{lay['zero_group']}" if lay.get("zero_group") else ""))
    parts.append(f"mb{lay['micro_batch']}")
    return "\n".join([parts[0], " ".join(parts[1:])])


def _held(mem: dict, key: str) -> float:
    """Bytes of one part held at the peak: on one GPU the gradients not yet allocated when it
    comes (memory detail "backward_timing" < 0) are drawn out of the gradients bar, not as a
    negative "other"."""
    timing = min(0.0, mem.get("detail", {}).get("backward_timing", 0.0))
    return mem[key] + timing if key == "gradients" else mem[key] - timing if key == "other" else mem[key]


def _style(ax: Any) -> None:
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)


# ---- the four panels -------------------------------------------------------------------------

def scaling_panel(ax: Any, res: dict) -> None:
    rows = res.get("scaling") or []
    if not rows:
        ax.text(0.5, 0.5, "no scaling curve (nothing fits)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    gpus = [r["gpus"] for r in rows]
    days = [(r["best"]["time"]["train_s"] or 0) / DAY_S for r in rows]
    usd = [r["best"]["cost"]["usd"] for r in rows]
    ax.plot(gpus, days, "o-", color="#4C72B0", label="time to train")
    spans = [(r["best"]["time"].get("interval") or {}).get("train_s") for r in rows]
    if all(spans):  # the 80 % interval of each count's time to train (catalog/intervals.py)
        ax.fill_between(gpus, [s["p10"] / DAY_S for s in spans], [s["p90"] / DAY_S for s in spans],
                        color="#4C72B0", alpha=0.15, linewidth=0, label="80% interval")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("time to train (days)", color="#4C72B0")
    _style(ax)
    handles = ax.get_lines()[:]
    if all(u is not None for u in usd):
        ax2 = ax.twinx()
        ax2.plot(gpus, [u / 1e3 for u in usd], "s--", color="#C44E52", label="cost", markersize=4)
        ax2.set_ylabel("cost (thousand USD)", color="#C44E52")
        ax2.spines["top"].set_visible(False)
        handles += ax2.get_lines()
    eq = (res.get("equilibrium") or {}).get("gpus")
    if eq:
        handles.append(ax.axvline(eq, color="#55A868", linestyle=":", linewidth=1.5, label=f"equilibrium ({eq})"))
    per_node = rows[0]["best"]["scenario"]["hardware"]["gpus_per_node"]
    if gpus[0] <= per_node < gpus[-1]:
        handles.append(ax.axvline(per_node, color="#8C8C8C", linestyle="-.", linewidth=1,
                                  label=f"one node ({per_node})"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4, fontsize=8, frameon=False)
    ax.set_title(f"Scaling on {rows[0]['gpu']}: best layout per GPU count", fontsize=10)


def memory_panel(ax: Any, ests: list[dict]) -> None:
    labels = [_short(e) for e in ests]
    x = range(len(ests))
    bottom = [0.0] * len(ests)
    for key, name, color in MEMORY_PARTS:
        vals = [_held(e["memory"], key) / GiB for e in ests]
        ax.bar(x, vals, bottom=bottom, color=color, label=name, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    caps = {e["memory"]["capacity"] for e in ests}
    for cap in sorted(caps):
        ax.axhline(cap / GiB, color="black", linestyle="--", linewidth=1)
        ax.text(len(ests) - 0.5, cap / GiB, f" capacity {cap / GiB:.0f} GiB", va="bottom", ha="right", fontsize=8)
    for i, top in enumerate(bottom):
        ax.text(i, top, f"{top:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    if len(ests) == 1:
        ax.set_xlim(-1, 1)
    ax.set_ylabel("memory per GPU (GiB)")
    ax.set_ylim(0, max(max(bottom), max(caps) / GiB) * 1.18)
    ax.legend(fontsize=7, loc="upper left", frameon=False, ncol=3)
    _style(ax)
    ax.set_title("Per-GPU memory (most loaded rank) vs capacity", fontsize=10)


def pareto_panel(ax: Any, res: dict) -> None:
    pts = [p for p in res.get("pareto") or [] if p.get("train_s") and p.get("usd") is not None]
    allp = [r["best"] for r in res.get("scaling") or []
            if r["best"]["time"]["train_s"] and r["best"]["cost"]["usd"] is not None]
    if allp:
        ax.scatter([e["time"]["train_s"] / DAY_S for e in allp], [e["cost"]["usd"] / 1e3 for e in allp],
                   color="#BBBBBB", s=18, label="best per GPU count", zorder=2)
    if not pts:
        ax.text(0.5, 0.5, "no priced candidates", ha="center", va="center", transform=ax.transAxes)
        return
    pts.sort(key=lambda p: p["train_s"])
    xs = [p["train_s"] / DAY_S for p in pts]
    ys = [p["usd"] / 1e3 for p in pts]
    ax.plot(xs, ys, "o-", color="#DD8452", label="Pareto frontier", zorder=3)
    stride = max(1, -(-len(pts) // 8))  # at most ~8 labels
    for i, (p, xv, yv) in enumerate(zip(pts, xs, ys, strict=True)):
        if i % stride and i != len(pts) - 1:
            continue
        ax.annotate(f"{p['gpus']}×{p['gpu']}", (xv, yv), textcoords="offset points", xytext=(4, 4), fontsize=7)
    best = res.get("best")
    if best and best["time"]["train_s"] and best["cost"]["usd"] is not None:
        ax.scatter([best["time"]["train_s"] / DAY_S], [best["cost"]["usd"] / 1e3], marker="*", s=160,
                   color="#C44E52", label="recommended", zorder=4)
    ax.set_xscale("log")
    ax.set_xlabel("time to train (days)")
    ax.set_ylabel("cost (thousand USD)")
    ax.legend(fontsize=8, frameon=False)
    _style(ax)
    ax.set_title("Time vs cost: no point beats the frontier on both", fontsize=10)


def time_panel(ax: Any, ests: list[dict]) -> None:
    """Each step as shares of its time (compute, exposed communication, bubble, optimizer), so
    layouts of very different speed stay readable; the absolute step time is written beside."""
    ests = [e for e in ests if e["time"].get("step_s")]
    if not ests:
        ax.text(0.5, 0.5, "no runtime prediction", ha="center", va="center", transform=ax.transAxes)
        return
    y = range(len(ests))
    left = [0.0] * len(ests)
    for key, name, color in TIME_PARTS:
        vals = [100 * (e["time"].get(key) or 0.0) / e["time"]["step_s"] for e in ests]
        ax.barh(y, vals, left=left, color=color, label=name, height=0.6)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    for i, e in enumerate(ests):
        ax.text(left[i], i, f" {e['time']['step_s']:.2f} s/step\n MFU {e['time']['mfu']:.0%}", va="center",
                fontsize=8)
    ax.set_yticks(list(y))
    ax.set_yticklabels([_short(e).replace("\n", "  ") for e in ests], fontsize=7)
    ax.invert_yaxis()
    if len(ests) == 1:
        ax.set_ylim(1.2, -1.2)
    ax.set_xlabel("share of the optimizer step (%; parts that overlap are counted once)")
    ax.set_xlim(0, max(left) * 1.22)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=4, frameon=False)
    _style(ax)
    ax.set_title("Step time breakdown", fontsize=10)


# ---- figures ---------------------------------------------------------------------------------

def plan_figure(res: dict) -> Any:
    Figure = _figure_class()
    fig = Figure(figsize=(14, 9.5), layout="constrained")
    axs = fig.subplots(2, 2)
    cands = res.get("candidates") or []
    scaling_panel(axs[0][0], res)
    pareto_panel(axs[0][1], res)
    if cands:
        memory_panel(axs[1][0], cands[:6])
        time_panel(axs[1][1], cands[:6])
    else:
        for ax in axs[1]:
            ax.set_axis_off()
    best = res.get("best")
    title = "gpuplan plan"
    if best:
        title += f": {best['model']['name']}, recommended {best['scenario']['hardware']['gpus']}× " \
                 f"{gpu_label(best['scenario']['hardware']['gpu'])}"
    fig.suptitle(title, fontsize=12)
    return fig


def estimate_figure(est: dict) -> Any:
    Figure = _figure_class()
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 2])
    memory_panel(ax1, [est])
    time_panel(ax2, [est])
    fig.suptitle(f"gpuplan evaluate: {est['model']['name']} on {est['scenario']['hardware']['gpus']}× "
                 f"{gpu_label(est['scenario']['hardware']['gpu'])}", fontsize=12)
    return fig


def svg_text(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def png_bytes(fig: Any, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def html_page(title: str, svgs: list[str], caption: str = "") -> str:
    body = "\n".join(f'<figure>{s[s.find("<svg"):]}</figure>' for s in svgs)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em}"
            "figure{margin:0 0 2em 0}svg{max-width:100%;height:auto}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(caption)}</p>\n{body}\n</body></html>\n")


def write(results: list[dict], path: str | Path, kind: str, force: bool = False) -> list[Path]:
    """Save the plan (``kind="plan"``) or evaluate results as ``path`` (.png, .svg or .html).
    Several results: one page for .html, numbered files (name-1.png, ...) otherwise."""
    p = Path(path)
    ext = p.suffix.lower()
    if ext not in FORMATS:
        raise GpuplanError(f"--plot {str(p)!r}: use a .png, .svg or .html file name")
    good = [r for r in results if "error" not in r and (kind != "plan" or r.get("best") or r.get("scaling"))]
    if not good:
        raise GpuplanError("--plot: nothing to draw (every item failed or nothing fits)")
    figs = [plan_figure(r) if kind == "plan" else estimate_figure(r) for r in good]
    if ext == ".html":
        write_atomic("--plot", p, html_page(f"gpuplan {kind}", [svg_text(f) for f in figs]), force)
        return [p]
    out = []
    for i, fig in enumerate(figs):
        target = p if len(figs) == 1 else p.with_name(f"{p.stem}-{i + 1}{p.suffix}")
        write_atomic("--plot", target, png_bytes(fig) if ext == ".png" else svg_text(fig), force)
        out.append(target)
    return out


def png_data_uri(fig: Any) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(fig)).decode("ascii")
