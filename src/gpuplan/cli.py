"""Command line: parse, call, print. Bad input → one line on stderr, exit status 2.

The grammar is flags.py; scenarios come from io/inputs.py; answers from the public API
(api.py) and the side branches (export, trace, profile, validation); words from report/.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpuplan.catalog.user import use_catalog
from gpuplan.catalog.user_models import check_active
from gpuplan.errors import GpuplanError, shown
from gpuplan.flags import build_parser, positive, scenario_values, whole
from gpuplan.io.inputs import Inputs, each, gather, parse_all


def _scenarios(args: argparse.Namespace, gpu: str | None = None) -> tuple[list[Any], bool]:
    """The command's scenarios (a bad list item as its error) and whether the input was a list."""
    inputs = gather(args.scenario, args.example, scenario_values(args))
    return parse_all(inputs, gpu), inputs.is_list


def _states_gpu(inputs: Inputs) -> bool:
    """Whether the scenario (file or flags) names its GPU type."""
    # a hardware section that is not a mapping counts as stated: the scenario parser names what is wrong with it
    return any(not isinstance(r, dict) or (r.get("hardware") is not None and not isinstance(r["hardware"], dict))
               or "gpu" in (r.get("hardware") or {}) for r in inputs.raws)


def _flag(option: str) -> str:
    """A plan option as its flag (``max_gpus`` → ``--max-gpus``), for the messages."""
    return "--" + option.replace("_", "-")


def _gpu_names(args: argparse.Namespace) -> list[str]:
    """``--gpu a,b`` or ``--gpu all``: the GPU types a fit or plan compares."""
    return [g.strip() for g in (args.gpu or "").split(",") if g.strip()]


BATCH_FAILED_EXIT = 1  # a list of scenarios in which some item failed (the others answered)


def _print(args: argparse.Namespace, results: list[dict], as_list: bool, text: Any, batch: bool = False) -> int:
    """Print the answers; the exit status: 3 when an item failed of a bug (it says so), 1 when an item of a
    ``batch`` (a list of scenarios) failed — their numbers on stderr in text mode — else 0."""
    from gpuplan.io.inputs import INTERNAL_EXIT
    from gpuplan.report.text import dumps

    print(dumps(results if as_list else results[0]) if args.json else text(results))
    if any(r.get("internal") for r in results):
        return INTERNAL_EXIT
    failed = [i for i, r in enumerate(results, 1) if "error" in r] if batch else []
    if failed:
        if not args.json:
            print(f"gpuplan: {len(failed)} of {len(results)} items failed: item{'s' if len(failed) > 1 else ''} "
                  f"{', '.join(map(str, failed))} (their errors are above)", file=sys.stderr)
        return BATCH_FAILED_EXIT
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from gpuplan.api import evaluate
    from gpuplan.report.text import estimate_text

    _check_outputs(args, {"--plot": args.plot, "--report": args.report})
    scs, is_list = _scenarios(args)
    results = each(scs, lambda sc: evaluate(sc).to_json(), keep_going=is_list)
    _write_outputs(args, results, "evaluate")
    return _print(args, results, is_list, lambda rs: "\n\n".join(estimate_text(r) for r in rs), batch=is_list)


def _note_work_limit(results: list[dict]) -> None:
    """One stderr note when a search stopped at its work limit (fit and plan)."""
    cut = sum(r.get("not_searched") or 0 for r in results)
    if cut:
        from gpuplan.report.words import work_limit_note

        print(f"gpuplan: note: {work_limit_note(cut)}", file=sys.stderr)


def cmd_fit(args: argparse.Namespace) -> int:
    from gpuplan.api import fit
    from gpuplan.catalog.hardware import gpus
    from gpuplan.io.options import plan_options
    from gpuplan.report.text import fit_text

    max_gpus = plan_options({"max_gpus": args.max_gpus}, named=_flag).max_gpus
    names = _gpu_names(args)
    if names == ["all"]:  # as in `plan --gpu all`: every catalogue type
        names = [g.id for g in gpus()]
    batch = False
    if len(names) > 1:  # one scenario per GPU type
        scs = [sc for name in names for sc in _scenarios(args, gpu=name)[0]]
        is_list = True
    else:
        scs, is_list = _scenarios(args)
        batch = is_list
    # one GPU type of several that cannot be fitted says why; the others go on
    results = each(scs, lambda sc: fit(sc, max_gpus=max_gpus).to_json(), keep_going=len(scs) > 1)
    _note_work_limit(results)
    return _print(args, results, is_list or len(results) > 1, lambda rs: fit_text(rs, max_gpus), batch=batch)


def cmd_plan(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from gpuplan.api import plan_scenario
    from gpuplan.io.options import plan_options, reading_gpu
    from gpuplan.report.progress import for_command
    from gpuplan.report.text import plan_text

    _check_outputs(args, {"--plot": args.plot, "--report": args.report})
    options = plan_options({"objective": args.objective, "deadline": args.deadline, "budget": args.budget,
                            "max_gpus": args.max_gpus, "top": args.top, "threshold": args.threshold,
                            "gpu": args.gpu, "provider": args.provider, "region": args.region,
                            "pricing": args.pricing}, named=_flag)
    inputs = gather(args.scenario, args.example, scenario_values(args))  # the file is read once
    if not options.gpu_types and not _states_gpu(inputs):  # no GPU anywhere: search the whole catalogue
        options = replace(options, gpu_types=("all",))
    # several types: the scenario is read against one of them (the one whose TDP allows most under a power cap)
    read = reading_gpu(options, power_limited=bool(getattr(args, "power_limit", None))) if options.several else None
    scs, is_list = parse_all(inputs, read), inputs.is_list
    bar = for_command("planning", args.json)
    results = each(scs, lambda sc: plan_scenario(sc, options, bar).to_json(), keep_going=is_list)
    bar.close()
    _note_work_limit(results)
    _write_outputs(args, results, "plan")
    return _print(args, results, is_list, lambda rs: "\n\n".join(plan_text(r, explain=args.explain) for r in rs),
                  batch=is_list)


def cmd_profile(args: argparse.Namespace) -> int:
    from gpuplan.profile.run import profile
    from gpuplan.profile.store import Store
    from gpuplan.report.measured import profile_text
    from gpuplan.report.progress import for_command
    from gpuplan.report.text import dumps
    from gpuplan.units import parse_duration

    scs, is_list = _scenarios(args)
    if is_list:
        raise GpuplanError("profile runs one scenario at a time: give a file with a single scenario")
    n = {k: whole(getattr(args, k), f"--{k}", least=0 if k == "warmup" else 1)
         for k in ("nproc", "nnodes", "steps", "warmup")}
    timeout_s = positive(parse_duration(args.timeout, "--timeout", bare="s"), "--timeout")  # help: seconds
    store = None if args.no_store else Store(args.store, create=True)  # made before the trial, not after
    with for_command("profiling", args.json) as bar:  # a TTY-only line while torchrun runs
        rep = profile(scs[0], device=args.device, nproc=n["nproc"], nnodes=n["nnodes"], steps=n["steps"],
                      warmup=n["warmup"], timeout_s=timeout_s,
                      find_max_batch=args.find_max_batch, extra_args=args.torchrun_args or None, progress=bar)
    if store is not None and not rep["oom"]:
        model = rep["scenario"]["model"]  # a name, a path or an inline mapping (the scenario as given)
        rep["stored"] = store.add_run(kind="profile", gpu=rep["gpu"],
                                      model=model if isinstance(model, str) else json.dumps(model, sort_keys=True),
                                      layout=rep["scenario"]["layout"], scenario=rep["scenario"],
                                      measured=rep["measured"], predicted=rep["predicted"])
        rep["store"] = str(store.path)
    print(dumps(rep) if args.json else profile_text(rep))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from gpuplan.profile.calibrate import calibrate
    from gpuplan.profile.store import Store
    from gpuplan.report.measured import calibrate_text
    from gpuplan.report.text import dumps

    res = calibrate(Store(args.store))
    print(dumps(res) if args.json else calibrate_text(res))
    return 0


def _write_outputs(args: argparse.Namespace, results: list[dict], kind: str) -> None:
    """--plot and --report: files beside the printed result; a line on stderr names each."""
    if getattr(args, "plot", None):
        from gpuplan.report import plots

        with _writing("--plot", args.plot):
            written = plots.write(results, args.plot, kind, force=args.force)
        for path in written:
            print(f"gpuplan: wrote {path}", file=sys.stderr)
    if getattr(args, "report", None):
        from gpuplan.report import document
        from gpuplan.validation import scores

        with _writing("--report", args.report):
            out = document.write(results, args.report, kind, scores(), force=args.force)
        print(f"gpuplan: wrote {out}", file=sys.stderr)


@contextmanager
def _writing(flag: str, path: str) -> Iterator[None]:
    """An output file that cannot be written (no such folder, a folder, no permission) is one error line."""
    try:
        yield
    except OSError as err:
        raise GpuplanError(f"{flag} {shown(path)}: cannot write it ({err.strerror or 'error'})") from None


def _check_outputs(args: argparse.Namespace, targets: dict[str, str | None]) -> None:
    """Before any work: each output file may be written (see gpuplan.outfiles), none is an input
    of this command (the scenario file, a model, calibration or store path given as a flag)."""
    from gpuplan.outfiles import check_targets

    inputs = [getattr(args, "scenario", None), *(v for v in scenario_values(args).values() if isinstance(v, str))]
    check_targets(targets, inputs, force=args.force)


def cmd_export(args: argparse.Namespace) -> int:
    from gpuplan.export import export_scenario
    from gpuplan.report.text import dumps

    _check_outputs(args, {"--output": args.output})
    max_gpus = whole(args.max_gpus, "--max-gpus") if args.max_gpus is not None else None
    scs, is_list = _scenarios(args)
    if is_list:
        raise GpuplanError("export takes one scenario: give a file with a single scenario")
    ex, how = export_scenario(scs[0], args.to, objective=args.objective, max_gpus=max_gpus, via=args.via,
                              device=args.device)
    if args.output:  # written first: a bad path is the one error line, before anything else is said
        from gpuplan.outfiles import write_atomic

        write_atomic("--output", args.output, ex.text, args.force)
    if args.json:
        print(dumps({"target": ex.target, "filename": ex.filename, "config": ex.config, "text": ex.text,
                     "notes": list(ex.notes), "layout_from": how, "written_to": args.output or None}))
        return 0
    print(f"gpuplan: {how}", file=sys.stderr)
    if ex.filename.endswith(".json"):  # JSON has no comments: the notes go to stderr
        for n in ex.notes:
            print(f"gpuplan: note: {n}", file=sys.stderr)
    if args.output:
        print(f"gpuplan: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(ex.text)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from gpuplan.trace.text import trace_all, trace_defaults, trace_text

    # bare --module (no scenario, no model): predicted from the traced parameter count
    from_params = trace_defaults(args)
    scs, is_list = _scenarios(args)
    results = trace_all(scs, is_list, module=args.module, input_factory=args.input_factory,
                        fidelity=args.fidelity, calibrate=args.calibrate, predicted_from_params=from_params,
                        quiet=args.json)
    return _print(args, results, is_list, lambda rs: "\n\n".join(trace_text(r) for r in rs), batch=is_list)


def cmd_catalogue(args: argparse.Namespace) -> int:
    from gpuplan.catalog.hardware import fabrics, gpus
    from gpuplan.catalog.models import list_models
    from gpuplan.catalog.prices import prices
    from gpuplan.report.text import dumps, fabrics_text, gpus_text, models_text, prices_text

    rows, text = {"gpus": (gpus, gpus_text), "fabrics": (fabrics, fabrics_text),
                  "models": (list_models, models_text),
                  "prices": (lambda: [p.to_json() for p in sorted(prices(), key=lambda p: (
                      p.gpu, p.pricing, p.usd_per_gpu_hour))], prices_text)}[args.command]
    rows = rows()
    print(dumps(rows) if args.json else text(rows))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from gpuplan.report.measured import components_text, constants_text, validate_text
    from gpuplan.report.text import dumps

    if args.components:
        from gpuplan.validation.components import report

        res = report()
        print(dumps(res) if args.json else components_text(res))
        return 0
    if args.constants:
        from gpuplan.catalog.constants import entries

        rows = [{"name": k, "value": v.get("value"), "status": v.get("status", "?"), "source": v.get("source", ""),
                 "fitted_by": v.get("fitted_by")} for k, v in entries().items()]
        print(dumps(rows) if args.json else constants_text(rows))
        return 0
    from gpuplan.validation import scores

    s = scores()
    print(dumps(s) if args.json else validate_text(s))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from gpuplan.serve import serve
    from gpuplan.units import parse_duration

    port = whole(args.port, "--port", least=0)
    if port > 65535:
        raise GpuplanError(f"--port {args.port}: a port is at most 65535")
    workers = whole(args.workers, "--workers") if args.workers is not None else None
    if workers is not None and workers > 64:
        raise GpuplanError(f"--workers {args.workers}: at most 64")
    limit_s = positive(parse_duration(args.time_limit, "--time-limit", bare="s"), "--time-limit")
    serve(host=args.host, port=port, workers=workers, limit_s=limit_s, allow_paths=args.allow_paths,
          quiet=args.quiet)
    return 0


HANDLERS = {"evaluate": cmd_evaluate, "fit": cmd_fit, "plan": cmd_plan, "gpus": cmd_catalogue,
            "models": cmd_catalogue, "fabrics": cmd_catalogue, "prices": cmd_catalogue, "validate": cmd_validate,
            "export": cmd_export,
            "profile": cmd_profile, "calibrate": cmd_calibrate, "trace": cmd_trace,
            "serve": cmd_serve}


def _negative_values(argv: list[str]) -> list[str]:
    """``--tokens -1T`` as ``--tokens=-1T``: argparse reads a value that starts with '-' (not a plain number) as an
    option and says only "expected one argument", where the value's own check names the problem."""
    out: list[str] = []
    for tok in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"-[\d.$]", tok):
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
        tail = None
        if "--" in argv:  # `gpuplan profile ... -- --rdzv-endpoint host:29400`: the rest goes to torchrun
            i = argv.index("--")
            argv, tail = argv[:i], argv[i + 1:]
        args, extra = parser.parse_known_args(_negative_values(argv))
        if tail is not None:
            if args.command != "profile":
                raise GpuplanError("`--` passes options to torchrun: only `gpuplan profile` takes them")
            args.torchrun_args = tail
        if extra:  # name the command whose help lists the options, not the top level
            raise GpuplanError(f"unrecognized arguments: {' '.join(extra)} (see `gpuplan {args.command} --help`)")
        use_catalog(getattr(args, "catalog", None))  # --catalog FILE, for this command only
        check_active()
        return HANDLERS[args.command](args)
    except GpuplanError as err:
        print(f"gpuplan: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug, not bad input: one line that says so, never a traceback
        from gpuplan.io.inputs import INTERNAL_EXIT, internal_message

        print(f"gpuplan: error: {internal_message(err)}", file=sys.stderr)
        return INTERNAL_EXIT
    finally:
        use_catalog(None)


if __name__ == "__main__":
    sys.exit(main())
