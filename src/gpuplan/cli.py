"""Command line: parse, call, print. Bad input → one line on stderr, exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.io.schema import FLAG_KEYS


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuplan")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise GpuplanError(f"{message} (see `{self.prog} --help`)")


def _scenario_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    p.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON; a list gives a list of results)")
    p.add_argument("--example", action="store_true", help="use the built-in example scenario")
    p.add_argument("--json", action="store_true", help="print JSON (SI units: bytes, seconds, USD)")
    g = p.add_argument_group("scenario fields (override the file)")
    for dest, key in FLAG_KEYS.items():
        if dest in skip:
            continue
        g.add_argument("--" + dest.replace("_", "-"), dest=dest, metavar=key.split(".")[-1].upper(),
                       help=f"scenario {key}")


def _output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="FILE", help="pictures: FILE.png, .svg or .html (needs gpuplan[plot])")
    p.add_argument("--report", metavar="FILE", help="a report for a design doc: FILE.md or .html")


def _whole(value: str, flag: str, least: int = 1) -> int:
    """A count given on the command line (``16384``, ``16k``, ``1e4``): a whole number ≥ ``least``."""
    from gpuplan.units import parse_count

    n = parse_count(value, flag)
    if n != int(n) or n < least:
        raise GpuplanError(f"{flag} must be a whole number of at least {least}, got {value!r}")
    if n > 2**20:  # no count on the command line (GPUs, ranks, steps, candidates) is meaningful beyond this
        raise GpuplanError(f"{flag} {value} is more than {2**20:,}: give a smaller number")
    return int(n)


def _positive(value: float, flag: str) -> float:
    if value <= 0:
        raise GpuplanError(f"{flag} must be positive, got {value:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuplan", description="How many GPUs for a training run: memory, layout, fit.")
    p.add_argument("--version", action="version", version=f"gpuplan {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ev = sub.add_parser("evaluate", help="memory, step time and cost of one configuration")
    _scenario_flags(ev)
    _output_flags(ev)
    ft = sub.add_parser("fit", help="smallest GPU count on which the run fits, and its layout")
    _scenario_flags(ft)
    ft.add_argument("--max-gpus", dest="max_gpus", default="16384", help="largest count to try (default 16384)")
    pl = sub.add_parser("plan", help="search GPU type × count × layout; rank by time or cost")
    _scenario_flags(pl)
    pl.add_argument("--objective", default="time", choices=["time", "cost"], help="rank by time or cost")
    pl.add_argument("--deadline", help="cheapest plan that finishes within this time (e.g. 14d)")
    pl.add_argument("--budget", help="fastest plan within this many USD (e.g. 50000)")
    pl.add_argument("--max-gpus", dest="max_gpus", default="16384", help="largest GPU count (default 16384)")
    pl.add_argument("--top", default="5", help="how many candidates to show (default 5)")
    pl.add_argument("--threshold", default="0.8", help="equilibrium: least share of proportional speed-up")
    pl.add_argument("--explain", action="store_true", help="why layouts were rejected, and the closest miss")
    _output_flags(pl)
    tr = sub.add_parser("trace", help="the real training step on fake tensors: traced vs predicted memory, FLOPs")
    _scenario_flags(tr)
    tr.add_argument("--module", help="your model: package.module:factory returning an nn.Module")
    tr.add_argument("--input-factory", dest="input_factory",
                    help="package.module:function(batch, seq_len) returning forward()'s inputs")
    tr.add_argument("--fidelity", default="cpu", choices=["cpu", "cuda"], help="fake device (cuda falls back)")
    tr.add_argument("--calibrate", action="store_true", help="store traced/predicted ratios per architecture")
    ex = sub.add_parser("export", help="the planned or given layout as a framework's launch config")
    _scenario_flags(ex)
    ex.add_argument("--to", required=True, choices=["torchtitan", "deepspeed", "accelerate", "megatron", "torchrun"],
                    help="target framework")
    ex.add_argument("-o", "--output", metavar="FILE", help="write the config to FILE (default: print it)")
    ex.add_argument("--objective", default="time", choices=["time", "cost"],
                    help="when the layout is open: plan, then export the best by time or cost")
    ex.add_argument("--max-gpus", dest="max_gpus", default="16384", help="when planning: largest GPU count")
    pr = sub.add_parser("profile", help="a short real trial run (torchrun + FSDP2): measured vs predicted")
    _scenario_flags(pr, skip=("steps",))  # --steps here counts the trial's measured steps
    pr.add_argument("--device", default="cuda", help="cuda (default) or cpu (gloo; runs anywhere)")
    pr.add_argument("--nproc", default="1", help="processes (GPUs) per node")
    pr.add_argument("--nnodes", default="1", help="nodes (pass torchrun's rendezvous options after --)")
    pr.add_argument("--steps", default="5", help="measured steps (default 5)")
    pr.add_argument("--warmup", default="2", help="warm-up steps (default 2)")
    pr.add_argument("--timeout", default="600", help="seconds before the trial is stopped (default 600)")
    pr.add_argument("--find-max-batch", dest="find_max_batch", action="store_true",
                    help="bisect the largest micro-batch that fits (each try a fresh run)")
    pr.add_argument("--store", help="SQLite store of runs (default $GPUPLAN_STORE or ~/.cache/gpuplan)")
    pr.add_argument("--no-store", dest="no_store", action="store_true", help="do not record this run")
    pr.set_defaults(torchrun_args=[])  # everything after `--`: torchrun rendezvous options (see main)
    ca = sub.add_parser("calibrate", help="fit correction factors from the stored trial runs")
    ca.add_argument("--store", help="SQLite store of runs (default $GPUPLAN_STORE or ~/.cache/gpuplan)")
    ca.add_argument("--json", action="store_true")
    gp = sub.add_parser("gpus", help="the GPU catalogue")
    gp.add_argument("--json", action="store_true")
    md = sub.add_parser("models", help="the model catalogue")
    md.add_argument("--json", action="store_true")
    va = sub.add_parser("validate", help="prediction error against published, measured results")
    va.add_argument("--json", action="store_true")
    return p


def _raw_scenarios(args: argparse.Namespace) -> tuple[list[Any], Path | None, bool]:
    """The file's scenario(s) with the flags merged in; ``is_list`` says whether to print a list."""
    from gpuplan.io.scenario import merge_flags, read_file

    flags = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()
             if not (dest == "steps" and args.command == "profile") and getattr(args, dest) is not None}
    if args.example:
        if args.scenario:
            raise GpuplanError("give a scenario file or --example, not both")
        path = resources.files("gpuplan").joinpath("examples/llama-3.1-70b.yaml")
        import yaml

        return [merge_flags(yaml.safe_load(path.read_text()), flags)], None, False
    if args.scenario:
        raw = read_file(args.scenario)
        base = Path(args.scenario).resolve().parent
        if isinstance(raw, list):
            return [merge_flags(r, flags) if isinstance(r, dict) else r for r in raw], base, True
        if raw is None:
            raise GpuplanError(f"scenario file {args.scenario!r} is empty: add model, hardware, training")
        return [merge_flags(raw, flags)], base, False
    if not flags:
        raise GpuplanError("give a scenario file, --example, or flags such as --model llama-3.1-8b --gpu h100-sxm")
    return [merge_flags({}, flags)], None, False


def _parse_all(args: argparse.Namespace) -> tuple[list[Any], bool]:
    from gpuplan.io.scenario import parse_scenario

    raws, base, is_list = _raw_scenarios(args)
    out: list[Any] = []
    for raw in raws:
        try:
            out.append(parse_scenario(raw, base))
        except GpuplanError as err:
            if not is_list:
                raise
            out.append(err)
    return out, is_list


def cmd_evaluate(args: argparse.Namespace) -> int:
    from gpuplan.api import evaluate
    from gpuplan.report.text import dumps, estimate_text

    scs, is_list = _parse_all(args)
    results = _each(scs, lambda sc: evaluate(sc).to_json(), keep_going=is_list)
    _write_outputs(args, results, "evaluate")
    if args.json:
        print(dumps(results if is_list else results[0]))
    else:
        print("\n\n".join(estimate_text(r) for r in results))
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from gpuplan.api import fit
    from gpuplan.report.text import dumps, estimate_text

    max_gpus = _whole(args.max_gpus, "--max-gpus")
    gpu_names = [g.strip() for g in (args.gpu or "").split(",") if g.strip()]
    if gpu_names == ["all"]:  # as in `plan --gpu all`: every catalogue type
        from gpuplan.catalog.hardware import gpus

        gpu_names = [g.id for g in gpus()]
    if len(gpu_names) > 1:
        args.gpu = None
    scs, is_list = _parse_all(args) if len(gpu_names) <= 1 else _per_gpu(args, gpu_names)
    # one GPU type of several that cannot be fitted says why; the others go on
    results = _each(scs, lambda sc: fit(sc, max_gpus=max_gpus).to_json(), keep_going=len(scs) > 1)
    if args.json:
        print(dumps(results if (is_list or len(results) > 1) else results[0]))
        return 0
    for r in results:
        if "error" in r:
            print(f"error: {r['error']}")
        elif r["min_gpus"] is None and r["closest_total"] is None:
            print(f"{r['gpu']}: no valid layout on up to {max_gpus} GPUs keeps the scenario's fixed layout fields: "
                  "check them with `gpuplan evaluate`")
        elif r["min_gpus"] is None:
            print(f"{r['gpu']}: does not fit on up to {max_gpus} GPUs; closest layout needs "
                  f"{r['closest_total'] / 2**30:.1f} GiB of {r['capacity'] / 2**30:.1f} GiB per GPU")
        else:
            print(f"{r['gpu']}: fits on {r['min_gpus']} GPU{'s' if r['min_gpus'] > 1 else ''} "
                  f"({r['tried']} layouts tried)\n{estimate_text(r['best'])}\n")
    return 0


def _each(scs: list[Any], run: Any, keep_going: bool) -> list[dict]:
    """``run`` on each scenario, in order. An item that did not parse is its error entry; one that
    fails is too when ``keep_going`` (a list of scenarios, several GPU types), else the error stands."""
    from gpuplan.spec import Scenario

    results: list[dict] = []
    for sc in scs:
        if not isinstance(sc, Scenario):
            results.append({"error": str(sc)})
            continue
        try:
            results.append(run(sc))
        except GpuplanError as err:
            if not keep_going:
                raise
            results.append({"error": str(err)})
    return results


def _per_gpu(args: argparse.Namespace, names: list[str]) -> tuple[list[Any], bool]:
    out: list[Any] = []
    for name in names:
        args.gpu = name
        scs, _ = _parse_all(args)
        out.extend(scs)
    return out, True


def cmd_plan(args: argparse.Namespace) -> int:
    from gpuplan.api import plan_scenario
    from gpuplan.report.text import dumps, plan_text
    from gpuplan.units import parse_count, parse_duration, parse_money

    max_gpus, top_k = _whole(args.max_gpus, "--max-gpus"), _whole(args.top, "--top")

    names = [g.strip() for g in (args.gpu or "").split(",") if g.strip()]
    if len(names) > 1 or names == ["all"]:
        args.gpu = "h100-sxm" if names == ["all"] else names[0]
        if getattr(args, "power_limit", None):  # checked against the scenario's GPU: take the one that allows most
            from gpuplan.catalog.hardware import get_gpu, gpus

            listed = gpus() if names == ["all"] else [get_gpu(n) for n in names]
            args.gpu = max(listed, key=lambda g: g.tdp_w or 0).id
    scs, is_list = _parse_all(args)
    kwargs = {
        "gpu_types": names if (len(names) > 1 or names == ["all"]) else None,
        "max_gpus": max_gpus,
        "objective": args.objective,
        "deadline_s": _positive(parse_duration(args.deadline, "--deadline"), "--deadline") if args.deadline else None,
        "budget": _positive(parse_money(args.budget, "--budget"), "--budget") if args.budget else None,
        "top_k": top_k,
        "threshold": float(parse_count(args.threshold, "--threshold")),
    }
    from gpuplan.report.progress import for_command

    kwargs["progress"] = bar = for_command("planning", args.json)
    results = _each(scs, lambda sc: plan_scenario(sc, **kwargs).to_json(), keep_going=is_list)
    bar.close()
    _write_outputs(args, results, "plan")
    if args.json:
        print(dumps(results if is_list else results[0]))
    else:
        print("\n\n".join(plan_text(r, explain=args.explain) for r in results))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from gpuplan.profile.run import profile
    from gpuplan.profile.store import Store
    from gpuplan.report.text import dumps, profile_text
    from gpuplan.units import parse_duration

    scs, is_list = _parse_all(args)
    if is_list:
        raise GpuplanError("profile runs one scenario at a time: give a file with a single scenario")
    n = {k: _whole(getattr(args, k), f"--{k}", least=0 if k == "warmup" else 1)
         for k in ("nproc", "nnodes", "steps", "warmup")}
    timeout_s = _positive(parse_duration(args.timeout, "--timeout", bare="s"), "--timeout")  # help: seconds
    store = None if args.no_store else Store(args.store, create=True)  # made before the trial, not after
    from gpuplan.report.progress import for_command

    with for_command("profiling", args.json) as bar:  # a TTY-only line while torchrun runs
        rep = profile(scs[0], device=args.device, nproc=n["nproc"], nnodes=n["nnodes"], steps=n["steps"],
                      warmup=n["warmup"], timeout_s=timeout_s,
                      find_max_batch=args.find_max_batch, extra_args=args.torchrun_args or None, progress=bar)
    if store is not None and not rep["oom"]:
        rep["stored"] = store.add_run(kind="profile", gpu=rep["gpu"], model=rep["scenario"]["model"],
                                      layout=rep["scenario"]["layout"], scenario=rep["scenario"],
                                      measured=rep["measured"], predicted=rep["predicted"])
        rep["store"] = str(store.path)
    print(dumps(rep) if args.json else profile_text(rep))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from gpuplan.profile.calibrate import calibrate
    from gpuplan.profile.store import Store
    from gpuplan.report.text import dumps

    res = calibrate(Store(args.store))
    if args.json:
        print(dumps(res))
        return 0
    if not res["gpus"]:
        print(f"no GPU trial runs in {res['store']}: run `gpuplan profile --device cuda` first")
        return 0
    for gpu, r in res["gpus"].items():
        def pct(x: float | None) -> str:
            return "-" if x is None else f"{x:.1%}"
        print(f"{gpu}: {r['runs']} runs; memory ×{r['memory_factor']:.3f} (error {pct(r['memory_error_before'])} → "
              f"{pct(r['memory_error_after'])}), throughput ×{r['compute_factor']:.3f} (error "
              f"{pct(r['throughput_error_before'])} → {pct(r['throughput_error_after'])}); published "
              f"validation error {pct(r['validation_error_before'])} → {pct(r['validation_error_after'])}")
    print(f"applied when a scenario sets hardware.calibration: default (store {res['store']})")
    return 0


def _write_outputs(args: argparse.Namespace, results: list[dict], kind: str) -> None:
    """--plot and --report: files beside the printed result; a line on stderr names each."""
    if getattr(args, "plot", None):
        from gpuplan.report import plots

        with _writing("--plot", args.plot):
            written = plots.write(results, args.plot, kind)
        for path in written:
            print(f"gpuplan: wrote {path}", file=sys.stderr)
    if getattr(args, "report", None):
        from gpuplan.report import document as report_doc

        with _writing("--report", args.report):
            written = report_doc.write(results, args.report, kind)
        print(f"gpuplan: wrote {written}", file=sys.stderr)


@contextmanager
def _writing(flag: str, path: str) -> Iterator[None]:
    """An output file that cannot be written (no such folder, a folder, no permission) is one error line."""
    try:
        yield
    except OSError as err:
        raise GpuplanError(f"{flag} {path!r}: cannot write it ({err.strerror or err})") from None


def cmd_export(args: argparse.Namespace) -> int:
    from gpuplan.export import export_scenario
    from gpuplan.report.text import dumps

    max_gpus = _whole(args.max_gpus, "--max-gpus")
    scs, is_list = _parse_all(args)
    if is_list:
        raise GpuplanError("export takes one scenario: give a file with a single scenario")
    ex, how = export_scenario(scs[0], args.to, objective=args.objective, max_gpus=max_gpus)
    if args.output:  # written first: a bad path is the one error line, before anything else is said
        with _writing("--output", args.output):
            Path(args.output).write_text(ex.text, encoding="utf-8")
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
    from gpuplan.report.text import dumps
    from gpuplan.trace.text import trace_all, trace_text

    bare = args.scenario is None and not args.example
    from_params = bool(args.module) and bare and args.model is None
    if from_params:
        args.model = "{params: 1e9}"  # replaced by the traced parameter count
    if bare and args.gpu is None:
        args.gpu = "h100-sxm"
    scs, is_list = _parse_all(args)
    results = trace_all(scs, is_list, module=args.module, input_factory=args.input_factory,
                        fidelity=args.fidelity, calibrate=args.calibrate, predicted_from_params=from_params,
                        quiet=args.json)
    if args.json:
        print(dumps(results if is_list else results[0]))
    else:
        print("\n\n".join(trace_text(r) for r in results))
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from gpuplan.catalog.hardware import gpus
    from gpuplan.report.text import dumps, gpus_text

    rows = gpus()
    if args.json:
        print(dumps(rows))
        return 0
    print(gpus_text(rows))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from gpuplan.catalog.models import list_models
    from gpuplan.report.text import dumps, models_text

    rows = list_models()
    if args.json:
        print(dumps(rows))
        return 0
    print(models_text(rows))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from gpuplan.report.text import dumps, validate_text
    from gpuplan.validation.memory_check import score_memory_runs
    from gpuplan.validation.runtime_check import score_runs

    mem = score_memory_runs()
    run = score_runs()
    if args.json:
        print(dumps({"runtime": run, "memory": mem}))
        return 0
    print(validate_text(run, mem))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
        tail = None
        if "--" in argv:  # `gpuplan profile ... -- --rdzv-endpoint host:29400`: the rest goes to torchrun
            i = argv.index("--")
            argv, tail = argv[:i], argv[i + 1:]
        args, extra = parser.parse_known_args(argv)
        if tail is not None:
            if args.command != "profile":
                raise GpuplanError("`--` passes options to torchrun: only `gpuplan profile` takes them")
            args.torchrun_args = tail
        if extra:  # name the command whose help lists the options, not the top level
            raise GpuplanError(f"unrecognized arguments: {' '.join(extra)} (see `gpuplan {args.command} --help`)")
        handler = {"evaluate": cmd_evaluate, "fit": cmd_fit, "plan": cmd_plan, "gpus": cmd_gpus, "models": cmd_models,
                   "validate": cmd_validate, "export": cmd_export,
                   "profile": cmd_profile, "calibrate": cmd_calibrate, "trace": cmd_trace}
        return handler[args.command](args)
    except GpuplanError as err:
        print(f"gpuplan: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
