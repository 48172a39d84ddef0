"""What a command was given → parsed scenarios: a scenario file (one or a list), a model name in its place,
the built-in example, or flags alone; flag values override the file's. A list keeps going past a bad item
(its error takes the item's place); a single scenario's error stands."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.bounds import is_path
from gpuplan.errors import GpuplanError, plain, shown
from gpuplan.io.scenario import merge_flags, parse_scenario, read_file
from gpuplan.spec import Scenario

EXAMPLE = "examples/llama-3.1-70b.yaml"


@dataclass(frozen=True, slots=True)
class Inputs:
    """The raw scenario mappings a command was given, before parsing."""

    raws: tuple[Any, ...]
    base: Path | None   # the scenario file's folder (a relative model path is read from there)
    is_list: bool       # the file held a list: the answer is a list too


def gather(path: str | None, example: bool, flags: dict[str, Any]) -> Inputs:
    """``flags`` maps dotted scenario keys (``hardware.gpu``) to the values given on the command line."""
    flags = {k: v for k, v in flags.items() if v is not None}
    if example:
        if path:
            raise GpuplanError("give a scenario file or --example, not both")
        import yaml

        text = resources.files("gpuplan").joinpath(EXAMPLE).read_text(encoding="utf-8")
        return Inputs((merge_flags(yaml.safe_load(text), flags),), None, False)
    if path and (short := model_shorthand(path, flags)) is not None:
        return Inputs((merge_flags(short, flags),), None, False)
    if path:
        raw = read_file(path)
        base = Path(path).resolve().parent
        if isinstance(raw, list):
            return Inputs(tuple(merge_flags(r, flags) if isinstance(r, dict) else r for r in raw), base, True)
        if raw is None:
            raise GpuplanError(f"scenario file {path!r} is empty: add model, hardware, training")
        return Inputs((merge_flags(raw, flags),), base, False)
    if not flags:
        raise GpuplanError("give a scenario file, --example, or flags such as --model llama-3.1-8b --gpu h100-sxm")
    return Inputs((merge_flags({}, flags),), None, False)


def model_shorthand(source: str | Path, given: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``{"model": source}`` when the scenario argument is no file but a model the catalogue knows
    (``gpuplan evaluate llama-3.1-8b --gpu h100-sxm``, ``gpuplan.plan("llama-3.1-8b")``), else None; a model also
    given by name (``--model``, ``model=``) beside it is refused."""
    text = str(source)
    if is_path(text) or text.lower().endswith((".yaml", ".yml", ".json")):
        return None
    from gpuplan.catalog.models import load_model

    try:
        load_model(text)
    except GpuplanError:
        return None
    other = (given or {}).get("model")
    if other is not None and other != text:
        raise GpuplanError(f"{shown(text)} names a model and the model is also given as {shown(str(other))}: "
                           "give the model once")
    return {"model": text}


def parse_all(inputs: Inputs, gpu: str | None = None) -> list[Scenario | GpuplanError]:
    """Each raw scenario parsed (with ``hardware.gpu`` set to ``gpu`` when given); in a list a bad
    item becomes its error, a single scenario's error is raised."""
    out: list[Scenario | GpuplanError] = []
    for i, raw in enumerate(inputs.raws):
        try:
            if gpu is not None and isinstance(raw, dict):
                raw = merge_flags(raw, {"hardware.gpu": gpu})
            out.append(parse_scenario(raw, inputs.base))
        except GpuplanError as err:
            if not inputs.is_list:
                raise
            out.append(err)
        except Exception as err:  # a bug: this item says so, the others are still answered
            if not inputs.is_list:
                raise
            out.append(InternalError(internal_message(err, i, raw.get("name") if isinstance(raw, dict) else None)))
    return out


class InternalError(GpuplanError):
    """An unexpected exception in one item of a batch, as that item's error (the run exits 3)."""


INTERNAL_EXIT = 3  # exit status when an item failed of a bug, not of its input (bad input: 2)


def internal_message(err: BaseException, index: int | None = None, name: object = None) -> str:
    """One line for an unexpected exception: it is a bug, which item, the exception's kind."""
    where = "" if index is None else f" in item {index + 1}" + (f" ({shown(name, 60)})" if name else "")
    return (f"internal error{where}: {type(err).__name__}: {plain(str(err), 160)} — a bug in gpuplan, "
            "please report it with the input")


def each(items: list[Scenario | GpuplanError], run: Any, keep_going: bool) -> list[dict]:
    """``run`` on each scenario, in order. An item that did not parse is its error entry; one that
    fails is too when ``keep_going`` (a list of scenarios, several GPU types), else the error stands."""
    results: list[dict] = []
    for i, sc in enumerate(items):
        if not isinstance(sc, Scenario):
            results.append({"error": str(sc), **({"internal": True} if isinstance(sc, InternalError) else {})})
            continue
        try:
            results.append(run(sc))
        except GpuplanError as err:
            if not keep_going:
                raise
            results.append({"error": str(err)})
        except Exception as err:  # a bug: this item says so (exit status 3), the others are answered
            if not keep_going:
                raise
            results.append({"error": internal_message(err, i, sc.name), "internal": True})
    return results
