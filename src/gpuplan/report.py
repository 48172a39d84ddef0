"""Human-readable output: plain tables with units in the headers. Numbers arrive in SI."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.units import fmt_count, fmt_gib


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
    parts.append(f"recompute={lay['recompute']}")
    if lay.get("sequence_parallel"):
        parts.append("sp")
    if lay["pp"] > 1:
        parts.append(lay["pp_schedule"] + (f"×{lay['virtual_stages']}" if lay["virtual_stages"] > 1 else ""))
    if lay["offload"] != "none":
        parts.append(f"offload={lay['offload']}")
    return " ".join(parts)


def memory_table(mem: dict) -> str:
    d = mem["detail"]
    rows = [
        ["weights", fmt_gib(mem["weights"], 2)],
        ["gradients", fmt_gib(mem["gradients"], 2)],
        ["optimizer states", fmt_gib(mem["optimizer"], 2)],
        [f"activations ({mem['microbatches_in_flight']:g} micro-batch in flight)", fmt_gib(mem["activations"], 2)],
        ["  logits + loss", fmt_gib(d["logits"], 2)],
        ["  communication buffers", fmt_gib(d["comm_buffers"], 2)],
        ["  optimizer-step temporaries", fmt_gib(d["optimizer_step"], 2)],
        ["  CUDA context, cuBLAS, NCCL", fmt_gib(d["runtime"], 2)],
        ["  allocator fragmentation", fmt_gib(d["fragmentation"], 2)],
        ["other (sum of the five above)", fmt_gib(mem["other"], 2)],
        ["total per GPU", fmt_gib(mem["total"], 2)],
        ["capacity", fmt_gib(mem["capacity"], 2)],
    ]
    if mem.get("cpu_offload"):
        rows.append(["offloaded to CPU (per GPU)", fmt_gib(mem["cpu_offload"], 2)])
    return table(["memory per GPU", "GiB"], rows)


def estimate_text(est: dict) -> str:
    if "error" in est:
        return f"error: {est['error']}"
    sc, mem, model = est["scenario"], est["memory"], est["model"]
    hw = sc["hardware"]
    head = (f"{sc['name'] + ': ' if sc.get('name') else ''}{model['name']} "
            f"({fmt_count(model['params'])} params"
            + (f", {fmt_count(model['params_active'])} active" if model["params_active"] != model["params"] else "")
            + f") on {hw['gpus']}× {hw['gpu']} ({hw['nodes']} node{'s' if hw['nodes'] > 1 else ''})\n"
            f"layout: {layout_str(sc['layout'])}; seq {sc['training']['seq_len']}, "
            f"{sc['training']['precision']} {sc['training']['optimizer']} {sc['training']['method']}")
    verdict = (f"FITS: {fmt_gib(mem['total'])} of {fmt_gib(mem['capacity'])} GiB "
               f"({fmt_gib(mem['headroom'])} GiB free), peak in the {mem['peak_phase']}"
               if mem["fits"] else
               f"DOES NOT FIT: needs {fmt_gib(mem['total'])} of {fmt_gib(mem['capacity'])} GiB "
               f"({fmt_gib(-mem['headroom'])} GiB over)")
    stage = f" (pipeline stage {mem['stage']}, the most loaded)" if sc["layout"]["pp"] > 1 else ""
    notes = "".join(f"\nassumed: {a}" for a in model.get("assumed", []))
    return f"{head}\n{memory_table(mem)}\n{verdict}{stage}{notes}"


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=_default)


def _default(o: Any) -> Any:
    if hasattr(o, "__dataclass_fields__"):
        return {k: getattr(o, k) for k in o.__dataclass_fields__}
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")
