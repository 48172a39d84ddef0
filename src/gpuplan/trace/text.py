"""``gpuplan trace`` for the command line: run a batch of scenarios and render the comparison.
No torch import here (``trace_scenario`` imports it when called)."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.units import GiB


def trace_defaults(args: Any) -> bool:
    """What a bare ``gpuplan trace`` leaves out: with ``--module`` and no model, the prediction is made
    from the traced parameter count (True is returned); with no scenario, the GPU is an H100."""
    bare = args.scenario is None and not args.example
    from_params = bool(args.module) and bare and args.model is None
    if from_params:
        args.model = "{params: 1e9}"  # replaced by the traced parameter count
    if bare and args.gpu is None:
        args.gpu = "h100-sxm"
    return from_params


def trace_all(scenarios: list[Any], is_list: bool, *, module: str | None, input_factory: str | None,
              fidelity: str, calibrate: bool, predicted_from_params: bool, quiet: bool = True) -> list[dict]:
    """One result per scenario; in a list, a bad item becomes ``{"error": ...}``. Unless ``quiet``,
    a progress bar on a terminal shows which scenario is being traced and for how long."""
    from gpuplan.report.progress import Ticker, for_command
    from gpuplan.trace import trace_scenario

    bar = for_command("tracing", json_output=quiet)
    if fidelity not in ("cpu", "cuda"):
        raise GpuplanError(f"--fidelity must be cpu or cuda, got {fidelity!r}")
    out: list[dict] = []
    for sc in scenarios:
        if isinstance(sc, GpuplanError):
            out.append({"error": str(sc), **({"internal": True} if type(sc).__name__ == "InternalError" else {})})
            continue
        try:
            with Ticker(bar, f"{len(out) + 1}/{len(scenarios)} {module or sc.model.name}",
                        fraction=len(out) / len(scenarios)):
                res = trace_scenario(sc, module=module, input_factory=input_factory, fidelity=fidelity,
                                     predicted_from_params=predicted_from_params)
            if calibrate:
                from gpuplan.trace.compare import calibrate as store

                key = f"module:{module}" if module else sc.model.model_type
                path, entry = store(res, key)
                res["calibration"] = {"key": key, "path": str(path), **entry}
        except GpuplanError as err:
            if not is_list:
                raise
            res = {"error": str(err)}
        except Exception as err:  # a bug (or the user's module's): this item says so, the others go on
            if not is_list:
                raise
            from gpuplan.io.inputs import internal_message

            res = {"error": internal_message(err, len(out), sc.name), "internal": True}
        out.append(res)
    bar.close()
    return out


def _fmt(component: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1e9:.3f} GF" if "FLOPs" in component else f"{v / GiB:.3f}"


def trace_text(res: dict) -> str:
    from gpuplan.report.text import table

    if "error" in res:
        return f"error: {res['error']}"
    sc, t = res["scenario"], res["trace"]
    lay = sc["layout"]
    stage = (f"pipeline stage {t['stage']} of {lay['pp']} ({lay['pp_schedule']}, {t['microbatches_traced']} of "
             f"{t['microbatches_per_step']} micro-batches, {t['in_flight_traced']:g} in flight), "
             if t.get("stage") is not None else "")
    head = (f"trace of {res['model']['name']} ({res['model']['params_traced']:,} parameters), seq_len "
            f"{sc['training']['seq_len']}, micro-batch {lay['micro_batch']}, {sc['training']['precision']}, "
            f"{sc['training']['optimizer']}, zero {lay['zero']}, {stage}rank 0 of {t['world']} "
            f"({'FSDP2, ' if t['fsdp'] else ''}{t['device']} fakes, {t['wall_s']:.1f} s)")
    rows = [[r["component"], _fmt(r["component"], r["predicted"]), _fmt(r["component"], r["measured"]),
             f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"] for r in res["compare"]]
    body = table(["component (GiB per GPU; FLOPs per token)", "predicted", "traced", "traced / predicted"], rows)
    tl = res["measured"]["memory"]["timeline"]
    timeline = "timeline (GiB): " + ", ".join(f"{ev} {b / GiB:.2f}" for ev, b in tl)
    why = "\n".join(f"- {line}" for line in res["explanations"] + res["trace"]["notes"])
    cal = ""
    if "calibration" in res:
        c = res["calibration"]
        cal = f"\ncalibration for {c['key']} stored in {c['path']} (n={c['n']})"
    return f"{head}\n{body}\n{timeline}\n{why}{cal}"
