"""The command line's grammar: every command and its flags. The scenario flags are generated
from the scenario's key tables (io/schema.py), so a new scenario key is a new flag."""

from __future__ import annotations

import argparse

from gpuplan.catalog.user import ENV as CATALOG_ENV
from gpuplan.errors import GpuplanError
from gpuplan.export.common import FRAMEWORK_TARGETS, TARGETS
from gpuplan.io.schema import FLAG_KEYS, field_help
from gpuplan.units import parse_count

MAX_COUNT = 2**20  # no count on the command line (GPUs, ranks, steps, candidates) is meaningful beyond this
STORE_HELP = "SQLite store of runs; default: $GPUPLAN_STORE or ~/.cache/gpuplan"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuplan")
    except PackageNotFoundError:
        return "unknown (not installed)"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # one line, exit 2, no usage dump
        raise GpuplanError(f"{message} (see `{self.prog} --help`)")


def scenario_values(args: argparse.Namespace) -> dict[str, object]:
    """The scenario fields given as flags, by dotted key (``hardware.gpu``)."""
    skip = {"steps"} if args.command == "profile" else set()  # profile's --steps counts measured steps
    return {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()
            if dest not in skip and getattr(args, dest, None) is not None}


def whole(value: str, flag: str, least: int = 1) -> int:
    """A count given on the command line (``16384``, ``16k``, ``1e4``): a whole number ≥ ``least``."""
    n = parse_count(value, flag)
    if n != int(n) or n < least:
        raise GpuplanError(f"{flag} must be a whole number of at least {least}, got {value!r}")
    if n > MAX_COUNT:
        raise GpuplanError(f"{flag} {value} is more than {MAX_COUNT:,}: give a smaller number")
    return int(n)


def positive(value: float, flag: str) -> float:
    if value <= 0:
        raise GpuplanError(f"{flag} must be positive, got {value:g}")
    return value


def _scenario_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    p.add_argument("scenario", nargs="?", help="scenario file (YAML or JSON; a list gives a list of results)")
    p.add_argument("--example", action="store_true", help="use the built-in example scenario")
    p.add_argument("--json", action="store_true", help="print JSON (SI units: bytes, seconds, USD)")
    _catalog_flag(p)
    g = p.add_argument_group("scenario fields (override the file)")
    for dest, key in FLAG_KEYS.items():
        if dest in skip:
            continue
        g.add_argument("--" + dest.replace("_", "-"), dest=dest, metavar=key.split(".")[-1].upper(),
                       help=field_help(key).replace("%", "%%"))


def _catalog_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", metavar="FILE", help="your own GPUs, fabrics and models, added to the built-in "
                   f"catalogue (YAML or JSON, gpus.json/fabrics.json keys); default: ${CATALOG_ENV}, else none")


def _output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="FILE",
                   help="pictures: FILE.png, .svg or .html (needs gpuplan[plot]); default: none")
    p.add_argument("--report", metavar="FILE", help="a report for a design doc: FILE.md or .html; default: none")
    _force_flag(p)


def _force_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing output file (a symlink: the link itself, never its target); "
                        "default: off")


def _planning(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("evaluate", help="memory, step time and cost of one configuration")
    _scenario_flags(ev)
    _output_flags(ev)
    ft = sub.add_parser("fit", help="smallest GPU count on which the run fits, and its layout")
    _scenario_flags(ft)
    ft.add_argument("--max-gpus", dest="max_gpus", default=None,
                    help="largest count to try when hardware.gpus is open (a given --gpus is the answer's count); "
                         "default: 16384; unit: GPUs")
    pl = sub.add_parser("plan", help="search GPU type × count × layout; rank by time or cost")
    _scenario_flags(pl)
    pl.add_argument("--objective", default="time", choices=["time", "cost"],
                    help="rank by time to train or by cost; default: time")
    pl.add_argument("--deadline", help="cheapest plan that finishes within this time; default: none; "
                    "unit: a duration (14d, 36h, 90m)")
    pl.add_argument("--budget", help="fastest plan within this cost; default: none; unit: USD (e.g. 50000, 1.2M)")
    pl.add_argument("--max-gpus", dest="max_gpus", default=None,
                    help="largest GPU count to search (an open count only); default: 16384; unit: GPUs")
    pl.add_argument("--top", default="5", help="how many candidates to show; default: 5")
    pl.add_argument("--threshold", default="0.8",
                    help="compute equilibrium: the least parallel efficiency (throughput per GPU against the "
                    "smallest count that fits) the equilibrium keeps; values: (0, 1]; default: 0.8")
    pl.add_argument("--provider", help="price each GPU type at this provider's list price (the price catalogue, "
                    "`gpuplan prices`); several comma-separated; default: any")
    pl.add_argument("--region", help="price in this region: a provider's region code (europe-west4) or a "
                    "geography (eu, us, asia); default: any")
    pl.add_argument("--pricing", help="on-demand, spot (preemptible: the answer adds the goodput lost to "
                    "preemptions) or reserved (1-year); default: on-demand when --provider or --region is given")
    pl.add_argument("--explain", action="store_true", help="why layouts were rejected, and the closest miss")
    _output_flags(pl)


def _measuring(sub: argparse._SubParsersAction) -> None:
    tr = sub.add_parser("trace", help="the real training step on fake tensors: traced vs predicted memory, FLOPs")
    _scenario_flags(tr)
    tr.add_argument("--module", help="your model: package.module:factory returning an nn.Module; "
                    "default: the scenario's model")
    tr.add_argument("--input-factory", dest="input_factory",
                    help="package.module:function(batch, seq_len) returning forward()'s inputs; "
                    "default: input ids of the scenario's batch and sequence length")
    tr.add_argument("--fidelity", default="cpu", choices=["cpu", "cuda"],
                    help="fake device (cuda falls back to cpu); default: cpu")
    tr.add_argument("--calibrate", action="store_true", help="store traced/predicted ratios per architecture")
    ex = sub.add_parser("export", help="the planned or given layout as a framework's launch config")
    _scenario_flags(ex)
    ex.add_argument("--to", required=True, choices=TARGETS,
                    help="what to write: a framework's config (torchtitan ... torchrun), or a scheduler's job that "
                    "starts one on the planned nodes (slurm: an sbatch script, kubernetes: a Kubeflow PyTorchJob, "
                    "skypilot: a task YAML); required")
    ex.add_argument("--via", choices=FRAMEWORK_TARGETS,
                    help="with a scheduler target: the framework it starts; default: the one training.framework "
                    "names (torchtitan, deepspeed, pytorch-fsdp: accelerate, megatron-core: megatron), else torchrun")
    ex.add_argument("--device", default="gpu", choices=["gpu", "cpu"],
                    help="with a scheduler target: cpu requests no GPUs and runs the planned processes on CPUs "
                    "(a dry run of the launch with --via torchrun and a gloo script); default: gpu")
    ex.add_argument("-o", "--output", metavar="FILE", help="write the config to FILE (default: print it)")
    _force_flag(ex)
    ex.add_argument("--objective", default="time", choices=["time", "cost"],
                    help="when the layout is open: plan, then export the best by time or cost; default: time")
    ex.add_argument("--max-gpus", dest="max_gpus", default=None,
                    help="when planning an open count: the largest; default: 16384; unit: GPUs")
    pr = sub.add_parser("profile", help="a short real trial run (torchrun + FSDP2): measured vs predicted")
    _scenario_flags(pr, skip=("steps",))  # --steps here counts the trial's measured steps
    pr.add_argument("--device", default="cuda", help="values: cuda | cpu (gloo; runs anywhere); default: cuda")
    pr.add_argument("--nproc", default="1", help="processes (GPUs) per node; default: 1")
    pr.add_argument("--nnodes", default="1", help="nodes (pass torchrun's rendezvous options after --); default: 1")
    pr.add_argument("--steps", default="5", help="measured steps; default: 5")
    pr.add_argument("--warmup", default="2", help="warm-up steps; default: 2")
    pr.add_argument("--timeout", default="600", help="time before the trial is stopped; default: 600; unit: s")
    pr.add_argument("--find-max-batch", dest="find_max_batch", action="store_true",
                    help="bisect the largest micro-batch that fits (each try a fresh run)")
    pr.add_argument("--store", help=STORE_HELP)
    pr.add_argument("--no-store", dest="no_store", action="store_true", help="do not record this run")
    pr.set_defaults(torchrun_args=[])  # everything after `--`: torchrun rendezvous options (see cli.main)


def _catalogues(sub: argparse._SubParsersAction) -> None:
    ca = sub.add_parser("calibrate", help="fit correction factors from the stored trial runs")
    ca.add_argument("--store", help=STORE_HELP)
    ca.add_argument("--json", action="store_true")
    gp = sub.add_parser("gpus", help="the GPU catalogue")
    gp.add_argument("--json", action="store_true")
    _catalog_flag(gp)
    md = sub.add_parser("models", help="the model catalogue")
    md.add_argument("--json", action="store_true")
    _catalog_flag(md)
    fb = sub.add_parser("fabrics", help="the interconnect catalogue (hardware.scale_up / scale_out)")
    fb.add_argument("--json", action="store_true")
    _catalog_flag(fb)
    pr = sub.add_parser("prices", help="the price catalogue: provider × region × GPU × pricing, dated and sourced "
                        "(plan --provider / --region / --pricing)")
    pr.add_argument("--json", action="store_true")
    _catalog_flag(pr)
    va = sub.add_parser("validate", help="prediction error on the open corpus of published runs (cross-validated)")
    va.add_argument("--json", action="store_true")
    va.add_argument("--constants", action="store_true",
                    help="list every modelling constant: value, how it was set (cited, fitted, estimate), source")
    va.add_argument("--components", action="store_true",
                    help="the model's components (GEMM, attention, memory-bound kernels, collectives, chunked "
                         "scans) against "
                         "published microbenchmarks: modelled vs measured per point, error per component")


def _serving(sub: argparse._SubParsersAction) -> None:
    sv = sub.add_parser("serve", help="the planner as a local web page and JSON API (needs gpuplan[serve])")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes it)")
    sv.add_argument("--port", default="8000", help="port (default 8000; 0: any free one)")
    sv.add_argument("--workers", help="processes that run searches (default: one per core, at most 4)")
    sv.add_argument("--time-limit", dest="time_limit", default="60s",
                    help="longest a fit, plan or export may run (default 60s)")
    sv.add_argument("--allow-paths", dest="allow_paths", action="store_true",
                    help="let requests name files on this machine (model config.json, calibration)")
    sv.add_argument("--quiet", action="store_true", help="no access log")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="gpuplan", description="How many GPUs for a training run: memory, layout, fit.")
    p.add_argument("--version", action="version", version=f"gpuplan {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    _planning(sub)
    _measuring(sub)
    _catalogues(sub)
    _serving(sub)
    return p
