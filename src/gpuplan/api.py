"""The public Python API: the scenario fields as keyword arguments, typed results.

    import gpuplan
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, micro_batch=2)
    est.memory.total, est.time.step_s, est.to_json()
    p = gpuplan.plan(model={"params": 7e9}, gpu=["h100-sxm", "h200"], tokens="1.4T", max_gpus=512)
    p.best, p.equilibrium, p.scaling
    gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm").min_gpus

Keyword arguments are the scenario fields, named as the command-line flags (``gpu``, ``gpus``,
``seq_len``, ``price``, ``zero`` …; see ``gpuplan evaluate --help``); a first positional
argument may be a scenario file path or mapping, which the keywords override. The input passes
the same validation as the CLI and a bad one raises ``GpuplanError`` with the same one-line
message. ``to_json()`` of every result is what ``--json`` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.catalog.hardware import get_gpu as _get_gpu
from gpuplan.catalog.models import load_model as _load_model
from gpuplan.errors import GpuplanError, shown
from gpuplan.io.scenario import merge_flags, parse_scenario, read_file
from gpuplan.io.schema import FLAG_KEYS
from gpuplan.model.estimate import Estimate
from gpuplan.model.estimate import evaluate as _evaluate
from gpuplan.report.advice import plan_json
from gpuplan.search.enumerate import Candidate
from gpuplan.search.fit import FitResult
from gpuplan.search.fit import fit as _fit
from gpuplan.search.plan import PlanResult, candidate_estimate
from gpuplan.search.plan import plan as _plan
from gpuplan.search.rank import Equilibrium, ScalingPoint
from gpuplan.spec import GPU, ModelSpec, Scenario
from gpuplan.units import parse_count

__all__ = ["Fit", "Plan", "evaluate", "fit", "get_gpu", "load_model", "plan", "plan_scenario", "scenario",
           "scenario_gpu"]

ScenarioInput = str | Path | Mapping[str, Any] | Scenario | None


def scenario(source: ScenarioInput = None, /, **fields: Any) -> Scenario:
    """A validated scenario from a file path or mapping (optional) and scenario fields as keywords."""
    if isinstance(source, Scenario):
        if fields:
            raise GpuplanError("give scenario fields or a parsed Scenario, not both")
        return source
    unknown = sorted(set(fields) - set(FLAG_KEYS))
    if unknown:
        raise GpuplanError(f"unknown scenario field {unknown[0]!r}: valid fields are {', '.join(FLAG_KEYS)}")
    base: Path | None = None
    if source is None:
        raw: Any = {}
    elif isinstance(source, str | Path):
        raw = read_file(source)
        base = Path(source).resolve().parent
        if isinstance(raw, list):
            raise GpuplanError(f"{source} holds a list of scenarios: give one scenario")
    elif isinstance(source, Mapping):
        raw = dict(source)
    else:
        raise GpuplanError(f"a scenario is a file path or a mapping, got {type(source).__name__}")
    flags = {FLAG_KEYS[k]: v for k, v in fields.items() if v is not None}
    return parse_scenario(merge_flags(raw, flags), base)


def evaluate(source: ScenarioInput = None, /, **fields: Any) -> Estimate:
    """Memory, step time, time to train and cost of one configuration (``gpuplan evaluate``)."""
    return _evaluate(scenario(source, **fields))


@dataclass(frozen=True, slots=True)
class Fit:
    """The smallest GPU count that fits (``gpuplan fit``): ``min_gpus`` None when nothing does."""

    result: FitResult

    @property
    def min_gpus(self) -> int | None:
        return self.result.min_gpus

    @property
    def best(self) -> Estimate | None:
        """The fastest layout at ``min_gpus``, as a full estimate."""
        r = self.result
        return candidate_estimate(r.scenario, r.best, r.global_batch) if r.best is not None else None

    def to_json(self) -> dict[str, Any]:
        r = self.result
        row: dict[str, Any] = {"gpu": r.scenario.hardware.gpu.id, "min_gpus": r.min_gpus, "tried": r.tried,
                               "max_gpus": r.max_gpus}
        best = self.best
        row["best"] = best.to_json() if best is not None else None
        if r.not_searched:  # the work limit cut the search: "nothing fits" would not be known
            row["not_searched"] = r.not_searched
        if best is None:
            row["closest_total"] = r.closest.memory.total if r.closest else None
            row["capacity"] = r.scenario.hardware.gpu.usable_memory_bytes
        return row


def fit(source: ScenarioInput = None, /, *, max_gpus: int | None = None, **fields: Any) -> Fit:
    """The smallest count of the scenario's GPU type on which the run fits, and the fastest layout there."""
    return Fit(_fit(scenario(source, **fields), max_gpus=_count(max_gpus, "max_gpus", open_ok=True)))


MAX_COUNT = 2**20  # as on the command line (flags.MAX_COUNT): GPUs searched, candidates shown


def _count(value: Any, name: str, open_ok: bool = False) -> Any:
    """A whole number from 1 to MAX_COUNT given to the API (``max_gpus``, ``top``); None when
    ``open_ok`` and not given (the search's own bound)."""
    if value is None and open_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise GpuplanError(f"{name} must be a whole number, got {shown(value)}")
    n = parse_count(value, name)
    if n != int(n) or not 1 <= n <= MAX_COUNT:
        raise GpuplanError(f"{name} must be a whole number from 1 to {MAX_COUNT:,}, got {shown(value)}")
    return int(n)


def _positive(value: Any, name: str) -> float | None:
    if value is None:
        return None
    n = parse_count(value, name)
    if not n > 0:
        raise GpuplanError(f"{name} must be positive, got {shown(value)}")
    return n


@dataclass(frozen=True, slots=True)
class Plan:
    """A searched plan (``gpuplan plan``): ranked candidates, scaling curve, equilibrium, advice."""

    result: PlanResult

    @property
    def best(self) -> Estimate | None:
        r = self.result
        return r.estimate(r.ranked[0]) if r.ranked else None

    @property
    def candidates(self) -> list[Estimate]:
        r = self.result
        return [r.estimate(c) for c in r.ranked[:r.top_k]]

    @property
    def equilibrium(self) -> Equilibrium:
        return self.result.equilibrium[self.result.main_gpu]

    @property
    def scaling(self) -> tuple[ScalingPoint, ...]:
        return self.result.scaling[self.result.main_gpu]

    @property
    def pareto(self) -> list[Candidate]:
        return self.result.pareto()

    def to_json(self) -> dict[str, Any]:
        return plan_json(self.result)


def plan(source: ScenarioInput = None, /, *, gpu: str | list[str] | None = None, max_gpus: int | None = None,
         objective: str = "time", deadline_s: float | None = None, budget: float | None = None, top: int = 5,
         threshold: float = 0.8, progress: Callable[[float, str], None] | None = None, **fields: Any) -> Plan:
    """Search GPU type × count × layout for what the scenario leaves open; rank by time or cost.
    ``gpu`` may name several types (a list, or ``"all"``); with no GPU anywhere, the whole catalogue."""
    names = [gpu] if isinstance(gpu, str) else list(gpu or [])
    if not names and "gpu" not in fields and not _names_gpu(source):
        names = ["all"]
    if len(names) == 1 and names[0] != "all":
        fields["gpu"] = names[0]
    elif names:
        fields.setdefault("gpu", scenario_gpu(names, power_limited=fields.get("power_limit") is not None))
    if objective not in ("time", "cost"):
        raise GpuplanError(f"objective must be time or cost, got {shown(objective)}")
    if len(names) > 64 or not all(isinstance(n, str) for n in names):
        raise GpuplanError("gpu must be a GPU type, a list of at most 64 of them, or 'all'")
    sc = scenario(source, **fields)
    return plan_scenario(sc, gpu_types=names if len(names) > 1 or names == ["all"] else None,
                         max_gpus=_count(max_gpus, "max_gpus", open_ok=True), objective=objective,
                         deadline_s=_positive(deadline_s, "deadline_s"), budget=_positive(budget, "budget"),
                         top_k=_count(top, "top"), threshold=float(parse_count(threshold, "threshold")),
                         progress=progress)


def _names_gpu(source: ScenarioInput) -> bool:
    """Whether a scenario source states hardware.gpu (a plan without one searches every type)."""
    if isinstance(source, Scenario):
        return True
    raw: Any = read_file(source) if isinstance(source, str | Path) else source
    return isinstance(raw, Mapping) and isinstance(raw.get("hardware"), Mapping) and "gpu" in raw["hardware"]


def scenario_gpu(names: list[str], power_limited: bool = False) -> str:
    """The GPU type a scenario is read against when a plan compares several (``names``, or
    ``["all"]``): the first named — or, under a power cap (checked against the GPU's TDP), the one
    whose TDP allows most."""
    if not power_limited:
        return "h100-sxm" if names == ["all"] else names[0]
    from gpuplan.catalog.hardware import gpus

    listed = gpus() if names == ["all"] else [_get_gpu(n) for n in names]
    return max(listed, key=lambda g: g.tdp_w or 0).id


def plan_scenario(sc: Scenario, **kw: Any) -> Plan:
    """``plan`` on a parsed scenario (``gpu_types``, ``max_gpus``, ``objective``, ``deadline_s``,
    ``budget``, ``top_k``, ``threshold``, ``progress`` as in ``search.plan.plan``)."""
    return Plan(_plan(sc, **kw))


def load_model(ref: str | Path | Mapping[str, Any]) -> ModelSpec:
    """A model from the catalogue (name or alias), a ``config.json`` path or folder, or a mapping."""
    return _load_model(ref if not isinstance(ref, Path) else str(ref))


def get_gpu(name: str) -> GPU:
    """A GPU type from the catalogue, by id or alias (``h100``, ``H100-SXM5-80GB``)."""
    return _get_gpu(name)
