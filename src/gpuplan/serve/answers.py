"""What each endpoint answers: a JSON request body → the answer ``gpuplan COMMAND --json`` prints.

A body is what the command line is given, as JSON:

    {"model": "llama-3.1-70b", "gpu": "h100-sxm", "gpus": 64}         the flags (``--gpus 64``)
    {"model": ..., "hardware": {...}, "training": {...}, "layout": {...}}  a scenario file's sections
    {"scenarios": [{...}, {...}], "seq_len": 8192}                      a list file, flags over each item
    [{...}, {...}]                                                       a list file alone

mixed freely (flags override the sections, as on the command line), plus the command's own
options (``objective``, ``deadline``, ``budget``, ``max_gpus``, ``top``, ``threshold``, ``provider``, ``region``,
``pricing``, ``to``).
Scenarios pass the CLI's parser and the answers are the public API's ``to_json()``, so every
number and every one-line error is the CLI's. No file named in a request is read unless the
server was started with ``--allow-paths``. Plain functions of plain data: the worker pool runs them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.bounds import LongNumber, check_tree, long_number
from gpuplan.errors import GpuplanError, shown
from gpuplan.io.inputs import each
from gpuplan.io.options import plan_options, reading_gpu
from gpuplan.io.scenario import merge_flags, parse_scenario
from gpuplan.io.schema import FLAG_KEYS, TOP_KEYS
from gpuplan.spec import Scenario
from gpuplan.spec.options import PlanOptions

MAX_BODY_BYTES = 256 * 1024  # a scenario is < 2 KiB; a pasted config.json < 10 KiB
# scenarios one request may hold, per endpoint (a list file on the command line is unbounded)
MAX_ITEMS = {"evaluate": 64, "fit": 4, "plan": 4, "export": 1, "report": 4}
MAX_GPU_TYPES = 64  # more than the catalogue holds
OPTIONS = {"evaluate": (), "fit": ("max_gpus",), "export": ("to", "objective", "max_gpus"),
           "plan": ("objective", "deadline", "budget", "max_gpus", "top", "threshold", "provider", "region", "pricing"),
           "report": ("kind", "format", "objective", "deadline", "budget", "max_gpus", "top", "threshold", "provider",
                      "region", "pricing")}
FILE_KEYS = (("hardware", "calibration", "calibration"), ("training", "trace_calibration", "trace_calibration"))
PATHS_REFUSED = "this server does not read files named in a request (start it with `gpuplan serve --allow-paths`)"


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed body: the scenario mappings (flags merged in), the command's options, whether it was a list."""

    raws: tuple[Any, ...]
    options: dict[str, Any]
    is_list: bool


def read_body(data: bytes, kind: str) -> Request:
    """The request body → a Request; malformed JSON, a wrong shape or too many items is one GpuplanError line."""
    if len(data) > MAX_BODY_BYTES:
        raise GpuplanError(f"request body is {len(data):,} bytes: at most {MAX_BODY_BYTES:,}")
    try:  # an integer of more than 40 digits is kept unconverted: its item is refused, not the body
        body = json.loads(data.decode("utf-8-sig"), parse_int=_int) if data.strip() else None
    except UnicodeDecodeError as err:
        raise GpuplanError(f"request body is not UTF-8 text (byte {err.start} cannot be read)") from None
    except json.JSONDecodeError as err:
        raise GpuplanError(f"request body is malformed JSON at line {err.lineno}, column {err.colno}: "
                           f"{err.msg}") from None
    except RecursionError:
        raise GpuplanError("request body is nested too deeply to read: a scenario is a mapping of four sections") \
            from None
    except ValueError as err:  # whatever else the decoder cannot turn into a value
        raise GpuplanError(f"request body cannot be read as JSON ({shown(str(err), 80)})") from None
    if body is None:
        raise GpuplanError("empty request: send a JSON scenario such as "
                           '{"model": "llama-3.1-8b", "gpu": "h100-sxm"}')
    return split(body, kind)


def _int(text: str) -> int | LongNumber:
    return long_number(text) or int(text)


def split(body: Any, kind: str) -> Request:
    """Separate a body's scenarios, flags and options (see the module's doc)."""
    if isinstance(body, list):
        body = {"scenarios": body}
    if not isinstance(body, dict):
        raise GpuplanError(f"a request body is a JSON object (a scenario) or a list of them, got {_kind(body)}")
    body = dict(body)
    options = {k: body.pop(k) for k in OPTIONS[kind] if k in body}
    for key, value in options.items():  # the scenarios' values are checked when each is read
        check_tree(value, key, max_depth=4, max_nodes=1_000)
    items = body.pop("scenarios", None)
    is_list = items is not None
    if is_list:
        if not isinstance(items, list) or not items:
            raise GpuplanError("scenarios must be a non-empty list of scenario mappings")
        if len(items) > MAX_ITEMS[kind]:
            raise GpuplanError(f"{len(items)} scenarios in one request: /api/{kind} takes at most {MAX_ITEMS[kind]}")
    if is_list:
        flags = _flags(body, beside_list=True)  # the body's own keys are flags over each item
        return Request(raws=tuple(_item(item, flags) for item in items), options=options, is_list=True)
    sections = {k: v for k, v in body.items() if k in TOP_KEYS}
    rest = {k: v for k, v in body.items() if k not in TOP_KEYS}
    return Request(raws=(merge_flags(sections, _flags(rest)),), options=options, is_list=False)


def _kind(value: Any) -> str:
    return {list: "a list", dict: "a mapping", bool: "true/false", str: "text", type(None): "null"}.get(
        type(value), type(value).__name__)


def _flags(keys: dict[str, Any], beside_list: bool = False) -> dict[str, Any]:
    """Flags by their CLI names (``gpu``, ``seq_len``) → by dotted scenario key (``hardware.gpu``)."""
    out: dict[str, Any] = {}
    for key, value in keys.items():
        if key in FLAG_KEYS:
            out[FLAG_KEYS[key]] = value
        elif key in TOP_KEYS and beside_list:
            raise GpuplanError(f"{key!r} beside scenarios: put sections inside each scenario; beside them "
                               "give flags, which apply to every one (gpu, seq_len, ...)")
        else:
            raise GpuplanError(f"unknown scenario field {key!r}: valid fields are the sections "
                               f"{', '.join(TOP_KEYS)} and the flags {', '.join(FLAG_KEYS)}")
    return out


def _item(item: Any, flags: dict[str, Any]) -> Any:
    """One list item with the body's flags over it; a bad item becomes its error (the CLI's list goes on)."""
    if not isinstance(item, dict):
        return item  # parse_scenario says what a scenario must be
    try:
        own = _flags({k: v for k, v in item.items() if k not in TOP_KEYS})
        return merge_flags({k: v for k, v in item.items() if k in TOP_KEYS}, own | flags)
    except GpuplanError as err:
        return err


# ---- files -----------------------------------------------------------------------------------

def _looks_like_path(s: str) -> bool:
    if re.fullmatch(r"[\w.-]+/[\w.-]+", s) and not s.startswith((".", "~")):  # a Hugging Face repo name
        return False
    return "/" in s or "\\" in s or s.startswith((".", "~")) or s.lower().endswith((".json", ".yaml", ".yml"))


def refuse_paths(raw: Any) -> None:
    """A scenario that names a file (a model config path, a calibration store or file) is refused.
    Catalogue names and inline mappings pass; a name that is neither gets the CLI's unknown-model line."""
    from gpuplan.catalog.user_models import catalogue_id
    from gpuplan.io.stores.policy import DEFAULT, choose

    if not isinstance(raw, dict):
        return
    model = raw.get("model")
    if isinstance(model, str) and model.strip() and not model.lstrip().startswith("{"):
        if _looks_like_path(model.strip()):
            raise GpuplanError(f"model {model.strip()!r} is a file path: {PATHS_REFUSED}; give a catalogue id, "
                               "paste the config.json's content as the model, or give {params: N}")
        catalogue_id(model)
    for section, key, _ in FILE_KEYS:
        sec = raw.get(section)
        value = sec.get(key) if isinstance(sec, dict) else None
        if isinstance(value, str) and choose(value, f"{section}.{key}", "a word or a path") not in (None, DEFAULT):
            raise GpuplanError(f"{section}.{key} {value.strip()!r} names a file: {PATHS_REFUSED}; "
                               "give `default` (this server's own calibration) or leave it out")


def scenarios(req: Request, allow_paths: bool, gpu: str | None = None) -> list[Scenario | GpuplanError]:
    """Each scenario parsed as the CLI parses it (``hardware.gpu`` set to ``gpu`` when given); in a
    list a bad item becomes its error, a single scenario's error is raised."""
    out: list[Scenario | GpuplanError] = []
    for raw in req.raws:
        try:
            if isinstance(raw, GpuplanError):
                raise raw
            if gpu is not None and isinstance(raw, dict):
                raw = merge_flags(raw, {"hardware.gpu": gpu})
            if not allow_paths:
                refuse_paths(raw)
            out.append(parse_scenario(raw, None))
        except GpuplanError as err:
            if not req.is_list:
                raise
            out.append(err)
    return out


def gpu_names(req: Request) -> list[str]:
    """``gpu: "a,b"``, ``["a", "b"]`` or ``"all"``: the GPU types a fit or plan compares (one: a scenario field)."""
    values = [raw["hardware"].get("gpu") for raw in req.raws
              if isinstance(raw, dict) and isinstance(raw.get("hardware"), dict)]
    value = values[0] if values and all(v == values[0] for v in values) else None
    if isinstance(value, list):
        names = [str(g).strip() for g in value if str(g).strip()]
    elif isinstance(value, str) and not value.lstrip().startswith("{"):
        names = [g.strip() for g in value.split(",") if g.strip()]
    else:
        return []
    if len(names) > MAX_GPU_TYPES:
        raise GpuplanError(f"{len(names)} GPU types: at most {MAX_GPU_TYPES}")
    return names


def with_gpu(req: Request, gpu: str | None) -> Request:
    """The request with ``hardware.gpu`` replaced (a list of types → the one the scenario is read against)."""
    if gpu is None:
        return req
    raws = tuple(merge_flags(r, {"hardware.gpu": gpu}) if isinstance(r, dict) else r
                 for r in req.raws)
    return Request(raws=raws, options=req.options, is_list=req.is_list)


def answer_list(req: Request, results: list[dict]) -> Any:
    return results if req.is_list else results[0]


@functools.cache
def accuracy_scores() -> dict[str, Any]:
    """The model's measured error on the open corpus (the report's accuracy section), computed once."""
    from gpuplan.validation import scores

    return scores()


def evaluate_answer(req: Request, allow_paths: bool) -> Any:
    from gpuplan.api import evaluate

    scs = scenarios(req, allow_paths)
    return answer_list(req, each(scs, lambda sc: evaluate(sc).to_json(), keep_going=req.is_list))


# ---- the commands ----------------------------------------------------------------------------

PLAN_OPTION_KEYS = ("objective", "deadline", "budget", "max_gpus", "top", "threshold", "provider", "region", "pricing")
MAX_TOP = 100          # candidates in one answer (each a full estimate, ~3 KB)
MAX_WEB_GPUS = 65536   # largest count a web plan, fit or export may search
Progress = Callable[[float, str], None] | None


def _capped(options: PlanOptions) -> PlanOptions:
    """This server's bounds on a request's options (a list of candidates is ~3 KB each; a search's count)."""
    if options.top > MAX_TOP:
        raise GpuplanError(f"top {options.top:,} is more than this server lists ({MAX_TOP:,}): give a smaller number")
    if options.max_gpus is not None and options.max_gpus > MAX_WEB_GPUS:
        raise GpuplanError(f"max_gpus {options.max_gpus:,} is more than this server searches ({MAX_WEB_GPUS:,}): "
                           "give a smaller number")
    return options


def request_options(req: Request) -> PlanOptions:
    """The request's plan options and its GPU types (``gpu: "a,b"``, a list, or ``"all"``), parsed as the
    command line and the Python API parse them (io/options.py)."""
    names = gpu_names(req)
    opts = {k: v for k, v in req.options.items() if k in PLAN_OPTION_KEYS}
    return _capped(plan_options({**opts, "gpu": list(names) if names else None}))


def _power_limited(req: Request) -> bool:
    return any(isinstance(r, dict) and isinstance(r.get("hardware"), dict) and r["hardware"].get("power_limit_w")
               for r in req.raws)


def fit_answer(req: Request, allow_paths: bool, progress: Progress = None) -> Any:
    """``gpuplan fit --json``: one answer per GPU type when several are named (``gpu: "a,b"`` or ``"all"``)."""
    from gpuplan.api import fit
    from gpuplan.catalog.hardware import gpus

    max_gpus = request_options(req).max_gpus
    names = gpu_names(req)
    if names == ["all"]:
        names = [g.id for g in gpus()]
    if len(names) > 1:
        scs = [sc for name in names for sc in scenarios(req, allow_paths, gpu=name)]
    else:
        scs = scenarios(with_gpu(req, names[0] if names else None), allow_paths)
    results = []
    for i, sc in enumerate(scs):
        if progress is not None:
            progress(i / len(scs), "fit")
        results += each([sc], lambda s: fit(s, max_gpus=max_gpus).to_json(), keep_going=len(scs) > 1)
    return results if req.is_list or len(results) > 1 else results[0]


def plan_answer(req: Request, allow_paths: bool, progress: Progress = None) -> Any:
    """``gpuplan plan --json``; ``gpu`` may name several types (``"h100-sxm,h200"``, a list, or ``"all"``)."""
    from gpuplan.api import plan_scenario

    options = request_options(req)
    req = with_gpu(req, reading_gpu(options, power_limited=_power_limited(req)))
    results = each(scenarios(req, allow_paths), lambda sc: plan_scenario(sc, options, progress).to_json(),
                   keep_going=req.is_list)
    return answer_list(req, results)


def export_answer(req: Request, allow_paths: bool, progress: Progress = None) -> Any:
    """``gpuplan export --to TARGET --json`` (nothing is written: ``written_to`` is null)."""
    from gpuplan.export import TARGETS, export_scenario

    if req.is_list:
        raise GpuplanError("export takes one scenario: give a single scenario, not a list")
    target = req.options.get("to")
    if not isinstance(target, str) or not target:
        raise GpuplanError(f"give the target framework as to: one of {', '.join(TARGETS)}")
    options = request_options(req)
    sc = scenarios(req, allow_paths)[0]
    assert isinstance(sc, Scenario)  # a single scenario's error was raised
    ex, how = export_scenario(sc, target, objective=options.objective, max_gpus=options.max_gpus)
    return {"target": ex.target, "filename": ex.filename, "config": ex.config, "text": ex.text,
            "notes": list(ex.notes), "layout_from": how, "written_to": None}


REPORT_KINDS = {"evaluate": evaluate_answer, "plan": plan_answer}
REPORT_FORMATS = {"md": "text/markdown; charset=utf-8", "html": "text/html; charset=utf-8"}


def report_answer(req: Request, allow_paths: bool, progress: Progress = None) -> str:
    """The ``--report`` document of an evaluate or plan (``kind``) as Markdown or HTML (``format``)."""
    from gpuplan.report.document import render

    kind, fmt = req.options.get("kind", "evaluate"), req.options.get("format", "md")
    if not isinstance(kind, str) or kind not in REPORT_KINDS:  # a list or mapping is not a key either
        raise GpuplanError(f"kind must be evaluate or plan, got {shown(kind)}")
    if not isinstance(fmt, str) or fmt not in REPORT_FORMATS:
        raise GpuplanError(f"format must be md or html, got {shown(fmt)}")
    options = {k: v for k, v in req.options.items() if k not in ("kind", "format")}
    if kind == "evaluate" and options:
        raise GpuplanError(f"unknown scenario field {sorted(options)[0]!r}: a plan option, for kind plan")
    inner = Request(raws=req.raws, options=options, is_list=req.is_list)
    results = plan_answer(inner, allow_paths, progress) if kind == "plan" else evaluate_answer(inner, allow_paths)
    return render(results if isinstance(results, list) else [results], fmt, kind, accuracy_scores())


ANSWERS: dict[str, Callable[[Request, bool, Progress], Any]] = {
    "evaluate": lambda req, allow, _progress: evaluate_answer(req, allow), "fit": fit_answer,
    "plan": plan_answer, "export": export_answer, "report": report_answer}
