"""Lines of an answer built from several of its numbers: the exposed communication by parallelism, the time/cost
frontier (report/text.py and report/document.py print them)."""

from __future__ import annotations

from gpuplan.units import fmt_duration, fmt_usd


def comm_parts(d: dict) -> str:
    """The exposed communication by parallelism, each with its total where overlap hides part of it."""
    def part(name: str, exposed: float, total: float) -> str:
        return f"{name} {fmt_duration(exposed)}" + (f" of {fmt_duration(total)}" if total > exposed * (1 + 1e-9)
                                                    else "")
    out = [part("tp", d.get("tp_exposed", d["tp"]), d["tp"]), part("cp", d["cp"], d["cp"]),
           part("ep", d.get("ep_exposed", d["ep"]), d["ep"]), part("pp", d.get("pp_exposed", d["pp"]), d["pp"]),
           part("dp", d["dp_exposed"], d["dp_total"])]
    if "activation_offload" in d:
        out.append(f"activation offload {fmt_duration(d['activation_offload'])}")
    return ", ".join(out)


PARETO_SHOWN = 8  # frontier points in the text answer (all of them in --json)


def pareto_words(res: dict) -> str:
    """The frontier, fastest first: every point when few, else the ends and the recommended one with the count
    left out between them (``--json`` holds every point)."""
    pts = res["pareto"]
    rec = res.get("recommendation") or {}
    mine = [i for i, p in enumerate(pts) if p["gpus"] == rec.get("gpus") and p["gpu"] == rec.get("gpu")]
    keep = set(range(len(pts))) if len(pts) <= PARETO_SHOWN else \
        {0, 1, 2, len(pts) - 3, len(pts) - 2, len(pts) - 1, *mine}
    words, last = [], -1
    for i in sorted(keep):
        if i > last + 1:
            words.append(f"… {i - last - 1} more")
        p = pts[i]
        words.append(f"{p['gpus']}× {p['gpu']} ({fmt_duration(p['train_s'])}, {fmt_usd(p['usd'])})"
                     + (" — recommended" if i in mine else ""))
        last = i
    return "; ".join(words)
