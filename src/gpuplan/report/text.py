"""Human-readable output: plain tables with units in the headers. Numbers arrive in SI."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.report.lines import comm_parts, pareto_words
from gpuplan.report.spans import alternatives_line, basis_line, peak_of, peak_span, span, tight_line
from gpuplan.spec.job import FP4_RECIPES
from gpuplan.units import GiB, fmt_count, fmt_duration, fmt_gib, fmt_usd


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def layout_str(lay: dict) -> str:
    parts = [f"dp={lay['dp']}", f"tp={lay['tp']}", f"pp={lay['pp']}"]
    if lay["cp"] > 1:
        parts.append(f"cp={lay['cp']}")
    if lay["ep"] > 1:
        parts.append(f"ep={lay['ep']}")
    parts.append(f"zero={lay['zero']}" + (f"/group {lay['zero_group']}" if lay.get("zero_group") else ""))
    parts.append(f"mb={lay['micro_batch']}")
    parts.append(f"recompute={lay['recompute']}" + (f"[{'+'.join(lay['recompute_modules'])}]"
                                                    if lay.get("recompute_modules") else "")
                 + (f"/every {lay['recompute_every']}" if lay.get("recompute_every", 1) > 1 else ""))
    if lay.get("sequence_parallel"):
        parts.append("sp")
    # what else the step was timed with, so the line is the layout `evaluate` takes back
    parts += [word for on, word in ((lay.get("tp_overlap"), "tp-overlap"), (lay.get("ep_overlap"), "ep-overlap"),
                                    (lay.get("etp") is not None, f"etp={lay.get('etp')}"),
                                    (lay.get("dp_overlap") is False and lay["dp"] * lay["cp"] > 1, "dp-overlap=off"),
                                    (lay["zero"] == 3 and lay.get("zero3_gather", "layer") != "layer",
                                     f"gather={lay.get('zero3_gather')}")) if on]
    if lay["pp"] > 1:
        parts.append(lay["pp_schedule"] + (f"×{lay['virtual_stages']}" if lay["virtual_stages"] > 1 else ""))
    if lay["offload"] != "none":
        parts.append(f"offload={lay['offload']}")
    return " ".join(parts)


def memory_table(mem: dict) -> str:
    d, flight = mem["detail"], mem["microbatches_in_flight"]
    rows = [
        ["weights", fmt_gib(mem["weights"], 2)],
        ["gradients", fmt_gib(mem["gradients"], 2)],
        ["optimizer states", fmt_gib(mem["optimizer"], 2)],
        [f"activations ({flight:g} micro-batch{'' if flight == 1 else 'es'} in flight)",
         fmt_gib(mem["activations"], 2)],
        ["  logits + loss", fmt_gib(d["logits"], 2)],
        ["  communication buffers", fmt_gib(d["comm_buffers"], 2)],
        ["  optimizer-step temporaries", fmt_gib(d["optimizer_step"], 2)],
        ["  CUDA context, cuBLAS, NCCL", fmt_gib(d["runtime"], 2)],
        ["  allocator fragmentation", fmt_gib(d["fragmentation"], 2)],
    ]
    timing = d.get("backward_timing") or 0.0
    if timing > 0:  # one GPU, end of backward: a tied embedding's second gradient and the sum
        rows.append(["  tied embedding's 2nd gradient + sum", fmt_gib(timing, 2)])
    calibration = d.get("calibration") or 0.0
    rows.append([f"other (sum of the {len(rows) - 4} above)",
                 fmt_gib(mem["other"] - min(timing, 0.0) - calibration, 2)])
    if timing < 0:  # one GPU, start of backward: listed at full size, not yet allocated at the peak
        rows.append(["gradients not yet allocated at the peak", fmt_gib(timing, 2)])
    if calibration:  # the user's fitted memory correction, its own line (the JSON's detail.calibration)
        rows.append(["memory correction (memory_factor)", fmt_gib(calibration, 2)])
    rows += [
        ["total per GPU", fmt_gib(mem["total"], 2)],
        ["  of it PyTorch's reserved peak (max_memory_reserved)", fmt_gib(mem["reserved"], 2)],
        ["  of it PyTorch's allocated peak (max_memory_allocated)", fmt_gib(mem["allocated"], 2)],
        ["capacity", fmt_gib(mem["capacity"], 2)],
    ]
    if mem.get("cpu_offload"):
        rows.append(["offloaded to CPU (per GPU)", fmt_gib(mem["cpu_offload"], 2)])
    return table(["memory per GPU", "GiB"], rows)


def assumed_line(items: list[dict]) -> str:
    """The values an answer filled in (spec/defaults.py), on one line; layout defaults are shown by
    the layout line itself, a layout field a rule set (a framework's default, recomputation a layout needs) on a
    line of its own with the rule."""
    shown = [f"{a['field'].split('.', 1)[1]}={_assumed_value(a['field'], a['value'])}" for a in items
             if not a["field"].startswith("layout.") and "given" not in a]
    read = [f"{a['field'].split('.', 1)[1]} {a['given']} → {a['value']}" for a in items if "given" in a]
    ruled = [f"assumed: {a['field']}={a['value']} — {a['rule']}" for a in items if a.get("by_rule")]
    lines = ([f"assumed (not given): {', '.join(shown)}"] if shown else []) + ruled + (
        [f"read as: {', '.join(read)} (the framework's or provider's own meaning; --json gives the cited rule)"]
        if read else [])
    return "\n".join(lines)


def _assumed_value(field: str, value: Any) -> str:
    if field == "training.headroom":
        return f"{value:.0%}"
    if field == "hardware.price_per_gpu_hour":
        return f"${value:.2f}/GPU-h"
    if field == "hardware.host_memory":
        return f"{value / 1e9:,.0f} GB"
    return str(value)


def gpu_label(gpu: object) -> str:
    """The GPU as the scenario names it: a catalogue id, or an inline GPU's own name (its id, else its base)."""
    if isinstance(gpu, dict):
        return str(gpu.get("name") or gpu.get("id") or gpu.get("base") or "inline GPU")
    return str(gpu)


def estimate_text(est: dict) -> str:
    if "error" in est:
        return f"error: {est['error']}"
    sc, mem, model = est["scenario"], est["memory"], est["model"]
    hw = sc["hardware"]
    head = (f"{sc['name'] + ': ' if sc.get('name') else ''}{model['name']} "
            f"({fmt_count(model['params'])} params"
            + (f", {fmt_count(model['params_active'])} active" if model["params_active"] != model["params"] else "")
            + f") on {hw['gpus']}× {gpu_label(hw['gpu'])} ({hw['nodes']} node{'s' if hw['nodes'] > 1 else ''})\n"
            f"layout: {layout_str(sc['layout'])}; seq {sc['training']['seq_len']}, "
            f"{precision_word(sc['training'])} {sc['training']['optimizer']} {sc['training']['method']}")
    host = mem.get("host_memory")
    share = mem.get("headroom_share", 0.0)
    kept = f", {share:.0%} headroom kept" if share else ""
    if mem["fits"]:
        verdict = (f"FITS: {fmt_gib(mem['total'])}{peak_span(mem)} of {fmt_gib(mem['capacity'])} GiB "
                   f"({fmt_gib(mem['headroom'])} GiB free{kept}), peak in the {mem['peak_phase']}")
    elif mem.get("tight") and (host is None or mem["cpu_offload_per_node"] <= host):
        verdict = tight_line(mem)
    elif mem["total"] <= mem["capacity"] and host is not None:  # the GPU holds it; the host does not
        verdict = (f"DOES NOT FIT in host memory: {fmt_gib(mem['cpu_offload_per_node'])} GiB offloaded per node "
                   f"but hardware.host_memory is {fmt_gib(host)} GiB (GPU: {fmt_gib(mem['total'])} of "
                   f"{fmt_gib(mem['capacity'])} GiB)")
    else:
        verdict = (f"DOES NOT FIT: needs {fmt_gib(mem['total'])} of {fmt_gib(mem['capacity'])} GiB "
                   f"({fmt_gib(-mem['headroom'])} GiB over)")
    stage = f" (pipeline stage {mem['stage']}, the most loaded)" if sc["layout"]["pp"] > 1 else ""
    notes = "".join(f"\nassumed: {a}" for a in model.get("assumed", []))
    if est.get("assumed"):
        notes += "\n" + assumed_line(est["assumed"])
    notes += "".join(f"\nnote: {n}" for n in est.get("notes", [])) + alternatives_line(est)
    return f"{head}\n{memory_table(mem)}\n{verdict}{stage}\n{time_table(est)}{basis_line(est['time'])}{notes}"


def time_table(est: dict) -> str:
    t, c = est["time"], est["cost"]
    if t.get("step_s") is None:
        return f"time: {t.get('note', 'not predicted')}"
    d = t["comm_detail"]
    rows = [
        ["step", fmt_duration(t["step_s"]) + span(t, "step_s", fmt_duration)],
        [f"  compute ({t['microbatches']} micro-batches, recompute {fmt_duration(t['recompute_s'])})",
         fmt_duration(t["compute_s"])],
        ["  exposed communication", fmt_duration(t["comm_exposed_s"])],
        ["    " + comm_parts(d), ""],
        ["  pipeline bubble", fmt_duration(t["bubble_s"])],
        ["  optimizer step", fmt_duration(t["optimizer_s"])],
        ["tokens/s", f"{t['tokens_per_s']:,.0f}" + span(t, "tokens_per_s", lambda x: f"{x:,.0f}")],
        ["tokens/s per GPU",
         f"{t['tokens_per_s_per_gpu']:,.0f}" + span(t, "tokens_per_s_per_gpu", lambda x: f"{x:,.0f}")],
        ["MFU / HFU" + peak_of(est), f"{t['mfu']:.1%} / {t['hfu']:.1%}"],
        ["model FLOPs per token (6·N)",
         f"{fmt_count(t['model_flops_per_token'])} ({fmt_count(t['six_n_flops_per_token'])})"],
    ]
    if t["train_s"] is not None:
        rows += [["total FLOPs", f"{t['total_flops']:.3g}"],
                 ["time to train", fmt_duration(t["train_s"]) + span(t, "train_s", fmt_duration)],
                 ["  with failures and restarts", fmt_duration(t["train_s_with_failures"])],
                 ["GPU-hours", f"{t['gpu_hours']:,.0f}" + span(t, "gpu_hours", lambda x: f"{x:,.0f}")],
                 ["energy at TDP", f"{t['energy_kwh']:,.0f} kWh" if t["energy_kwh"] else "-"],
                 [f"cost at {fmt_usd(c['usd_per_gpu_hour'])}/GPU-h" if c["usd_per_gpu_hour"] else "cost",
                  fmt_usd(c["usd"]) + span(c, "usd", fmt_usd)]]
    return table(["time", ""], rows)


def _num(value: float | None, scale: float, digits: int = 0) -> str:
    """A catalogue number in print units, or "-" where the source publishes none (e.g. A10G's TDP)."""
    return f"{value / scale:.{digits}f}" if value else "-"


def gpus_text(rows: list) -> str:
    return table(["id", "memory GiB", "HBM TB/s", "bf16 TFLOPS", "fp8 TFLOPS", "scale-up GB/s", "per node",
                  "TDP W", "USD/GPU-h"],
                 [[g.id, _num(g.usable_memory_bytes, GiB, 1), _num(g.memory_bw_bytes_per_s, 1e12, 2),
                   _num(g.peak_flops.get("bf16"), 1e12), _num(g.peak_flops.get("fp8"), 1e12),
                   _num(g.scale_up_bytes_per_s, 1e9), g.gpus_per_node, _num(g.tdp_w, 1),
                   _num(g.price_usd_per_gpu_hour, 1, 2)] for g in rows])


def fabrics_text(rows: list) -> str:
    """``gpuplan fabrics``: the interconnects a scenario can name as scale_up / scale_out."""
    return table(["id", "kind", "GB/s per GPU (scale-up)", "Gb/s per link", "links per node", "latency µs",
                  "efficiency", "name"],
                 [[f.id, f.kind.replace("_", "-"), _num(f.bytes_per_s_per_gpu, 1e9),
                   _num(f.link_bytes_per_s * 8 if f.link_bytes_per_s else None, 1e9), f.links_per_node or "-",
                   _num(f.latency_s, 1e-6, 1), _num(f.efficiency, 1, 2), f.name] for f in rows])


def prices_text(rows: list[dict]) -> str:
    """``gpuplan prices``: every price row, by GPU type and pricing, cheapest first, with its date."""
    return table(["gpu", "pricing", "USD/GPU-h", "provider", "region", "geo", "date", "instance"],
                 [[r["gpu"], r["pricing"].replace("_", "-"), f"{r['usd_per_gpu_hour']:.2f}", r["provider"],
                   r["region"], r["geo"], r["date"], r["instance"] or "-"] for r in rows])


def models_text(rows: list[dict]) -> str:
    return table(["id", "type", "params", "active"],
                 [[r["id"], r["model_type"], fmt_count(r["params"]), fmt_count(r["params_active"])] for r in rows])


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_default)


def _default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):  # its fields, not the hash it keeps (spec/hardware.py, spec/_value.py)
        return {k: getattr(o, k) for k in o.__dataclass_fields__ if not k.startswith("_")}
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")


def _row(est: dict) -> list[str]:
    t, m, hw = est["time"], est["memory"], est["scenario"]["hardware"]
    return [f"{hw['gpus']}", gpu_label(hw["gpu"]), layout_str(est["scenario"]["layout"]), fmt_duration(t["train_s"]),
            fmt_usd(est["cost"]["usd"]), f"{t['tokens_per_s_per_gpu']:,.0f}", f"{t['mfu']:.0%}",
            f"{fmt_gib(m['total'])}/{fmt_gib(m['capacity'], 0)}"]


PLAN_HEAD = ["GPUs", "type", "layout", "time to train", "cost", "tok/s/GPU", "MFU", "mem GiB"]


def market_line(m: dict) -> str:
    """Where the answer's price is from: provider, region, pricing, the row's date (flagged when old), and on
    spot capacity the preemption allowance included in its time and cost."""
    old = f" — {m['age_days']} days old: check the provider's page" if m["stale"] else ""
    line = (f"priced: {m['pricing'].replace('_', '-')} on {m['provider']} {m['region']} ({m['geo']}) at "
            f"${m['usd_per_gpu_hour']:.2f}/GPU-h, list price of {m['date']}{old}")
    if m.get("preemption_overhead") is not None:
        line += (f"; spot capacity is preemptible: +{m['preemption_overhead']:.1%} wall time for preemptions "
                 "(checkpoints, lost work, restarts) is included in the time and cost")
    return line


def _scaling_lines(res: dict) -> list[str]:
    """The scaling curve of the plan's GPU type as a table, with the compute equilibrium's sentence."""
    if not res["scaling"]:
        return []
    lines: list[str] = []
    eq = res["equilibrium"]
    per_node = res["scaling"][0]["best"]["scenario"]["hardware"]["gpus_per_node"]
    rows = []
    for r in res["scaling"]:
        marks = []
        if r is res["scaling"][0]:
            marks.append("smallest that fits")
        if r["gpus"] > per_node and all(x["gpus"] <= per_node for x in res["scaling"] if x["gpus"] < r["gpus"]):
            marks.append("first multi-node")
        if r["gpus"] == eq.get("gpus"):
            marks.append("equilibrium")
        if not r.get("improves", True):
            marks.append("slower than a smaller count")
        rows.append([*_row(r["best"])[:2], f"{r['speedup']:.2f}×", f"{r['efficiency']:.0%}",
                     fmt_duration(r["best"]["time"]["train_s"]), fmt_usd(r["best"]["cost"]["usd"]),
                     ", ".join(marks)])
    lines.append(f"\nscaling on {eq['gpu']}")
    lines.append(table(["GPUs", "type", "speed-up", "parallel eff.", "time to train", "cost", ""], rows))
    lines.append(f"compute equilibrium: {eq['why']}")
    if res.get("scaling_note"):
        lines.append(f"note: {res['scaling_note']}")
    return lines


def precision_word(tr: dict) -> str:
    """The run's number format as a user names it: a 4-bit recipe (nvfp4, mxfp4 on the low-precision path) by its
    name, fp8 with its recipe where one was given, else the precision."""
    recipe = tr.get("fp8_recipe")
    if tr["precision"] == "fp8" and recipe in FP4_RECIPES:
        return str(recipe)
    return f"fp8 ({recipe})" if tr["precision"] == "fp8" and recipe else str(tr["precision"])


def no_best_line(res: dict) -> str:
    """The headline of a plan with no answer: what kept it from one."""
    gap = res.get("no_split")
    if gap:
        return (f"no layout of {gap['gpus']:,} GPUs splits the global batch of {gap['global_batch']:,} sequences "
                "(see the advice).")
    if not res.get("searched") and res.get("rejected"):  # every GPU type skipped (no compute peak, no price…)
        return f"nothing was searched: {'; '.join(res['rejected'])}."
    rule = (res.get("recommendation") or {}).get("rule")
    if rule in ("deadline", "budget", "pareto"):
        return "no layout meets the deadline or budget."
    if rule == "fixed":
        return "no layout fits on the given GPU count."
    return "no layout fits."


def plan_text(res: dict, explain: bool = False) -> str:
    if "error" in res:
        return f"error: {res['error']}"
    lines: list[str] = []
    best = res["best"]
    pairs = ((best or {}).get("scenario") or {}).get("training", {}).get("preference")
    lines.append(f"searched {res['searched']:,} layouts; global batch {res['global_batch']} sequences"
                 + (f" ({res['global_batch'] // 2} pairs: micro-batches below count pairs)" if pairs else ""))
    if res.get("assumed"):
        lines.append(assumed_line(res["assumed"]))
    if best is None:
        lines.append(no_best_line(res))
    else:
        tr, hw = best["scenario"]["training"], best["scenario"]["hardware"]
        lines.append(f"best: {hw['gpus']}× {gpu_label(hw['gpu'])} — "
                     f"{layout_str(best['scenario']['layout'])}; "
                     f"{fmt_duration(best['time']['train_s'])}{span(best['time'], 'train_s', fmt_duration)} for "
                     f"{fmt_count(tr['tokens'])} tokens, {fmt_usd(best['cost']['usd'])}"
                     f"{span(best['cost'], 'usd', fmt_usd)}, MFU {best['time']['mfu']:.0%}{peak_of(best)}")
    market = (best or {}).get("cost", {}).get("market")
    if market:
        lines.append(market_line(market))
    rec = res.get("recommendation")
    if rec:
        lines.append(f"recommendation: {rec['text']}" + (f" ({rec['space']})" if rec.get("space") else ""))
    if best is not None:
        lines.append("\ntop candidates")
        lines.append(table(PLAN_HEAD, [_row(c) for c in res["candidates"]]))
    skipped = {g for g in res["min_gpus"] for why in res.get("rejected", {}) if why.startswith((f"{g}: ", f"{g} "))}
    mins = ", ".join(f"{g}: {n if n is not None else 'not searched' if g in skipped else 'none'}"
                     for g, n in res["min_gpus"].items())
    fit_words = "whose predicted peak fits (TIGHT: no 80% interval fits)" if res.get("tight") else "that fits"
    lines.append(f"\nsmallest GPU count {fit_words} — {mins}")
    lines += _scaling_lines(res)
    if res.get("pareto"):
        lines.append("\ntime/cost Pareto frontier: " + pareto_words(res))
    for a in res.get("advice", []):
        lines.append(f"advice: {a}")
    if explain:
        lines.append("\nrejected layouts by reason:")
        for reason, n in sorted(res["rejected"].items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n:>8,}  {reason}")
        miss = res.get("closest_miss")
        if miss:
            lay = miss["layout"]
            lines.append(f"closest miss: {miss['gpus']}× {miss['gpu']} tp={lay['tp']} pp={lay['pp']} "
                         f"zero={lay['zero']} mb={lay['micro_batch']} recompute={lay['recompute']} needs "
                         f"{fmt_gib(miss['total'])} of {fmt_gib(miss['capacity'])} GiB — {miss['largest']} "
                         f"{fmt_gib(miss['parts'][miss['largest']])} GiB")
    return "\n".join(lines)


def fit_text(results: list[dict], max_gpus: int | None) -> str:
    """``gpuplan fit`` for people: per GPU type the smallest count and its estimate, or why not."""
    out = []
    for r in results:
        limit = r.get("max_gpus", max_gpus)
        if "error" in r:
            out.append(f"error: {r['error']}")
        elif r.get("no_split"):
            out.append(f"{r['gpu']}: {r['no_split_why']}")
        elif r["min_gpus"] is None and r["closest_total"] is None:
            out.append(f"{r['gpu']}: no valid layout on up to {limit} GPUs keeps the scenario's fixed layout "
                       "fields: check them with `gpuplan evaluate`")
        elif r["min_gpus"] is None:
            cut = (f" of the layouts searched ({r['not_searched']:,} past the work limit were not: a lower "
                   "--max-gpus or a fixed layout.tp / layout.pp searches them)") if r.get("not_searched") else ""
            high = r.get("closest_high")
            upper = f" (80%: up to {fmt_gib(high)})" if high is not None and high > r["closest_total"] else ""
            point = r.get("min_gpus_at_point")
            edge = (f"; on {point} the peak's point estimate fits but its 80% interval does not (TIGHT: runs like "
                    "it have run and have run out of memory)") if point is not None else ""
            out.append(f"{r['gpu']}: does not fit on up to {limit} GPUs{cut}; closest layout needs "
                       f"{fmt_gib(r['closest_total'])}{upper} GiB of {fmt_gib(r['capacity'])} GiB per GPU{edge}")
        else:
            point = r.get("min_gpus_at_point")
            edge = (f"; on {point} the peak's point estimate fits but its 80% interval does not (TIGHT: runs like "
                    "it have run and have run out of memory)") if point is not None and point < r["min_gpus"] else ""
            w = r.get("with_offload")
            if w:
                speed = (f", {w['tokens_per_s'] / r['best']['time']['tokens_per_s']:.0%} of the "
                         f"{r['min_gpus']}-GPU throughput"
                         if w.get("tokens_per_s") and r["best"].get("time") else "")
                edge += (f"; offloading the {'optimizer state' if w['offload'] == 'optimizer' else 'parameters'} "
                         f"to host memory fits it on {w['gpus']} ({layout_str(w['layout'] | {'cp': 1, 'ep': 1})}"
                         f"{speed})")
            moved = r.get("batch_moved")
            edge += (f"; global batch {moved['to']:,} sequences: the default {moved['from']:,} splits over no layout "
                     f"of {r['min_gpus']} GPUs") if moved else ""
            out.append(f"{r['gpu']}: fits on {r['min_gpus']} GPU{'s' if r['min_gpus'] > 1 else ''} "
                       f"({r['tried']} layouts tried){edge}\n{estimate_text(r['best'])}\n")
    return "\n".join(out)
