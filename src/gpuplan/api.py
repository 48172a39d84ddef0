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
from dataclasses import dataclass, replace
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Any

from gpuplan.catalog.hardware import get_gpu as _get_gpu
from gpuplan.catalog.models import load_model as _load_model
from gpuplan.errors import GpuplanError
from gpuplan.io.inputs import model_shorthand
from gpuplan.io.options import plan_options, reading_gpu, targets
from gpuplan.io.scenario import merge_flags, parse_scenario, read_file
from gpuplan.io.schema import FIELD_ALIASES, FLAG_KEYS, own_keys
from gpuplan.model.caches import clear_model_caches
from gpuplan.model.estimate import Estimate as _Estimate
from gpuplan.model.estimate import evaluate as _evaluate
from gpuplan.report.advice import fit_json, plan_json
from gpuplan.report.render import estimate_json
from gpuplan.search.enumerate import Candidate
from gpuplan.search.fit import FitResult
from gpuplan.search.fit import fit as _fit
from gpuplan.search.plan import PlanResult, candidate_estimate
from gpuplan.search.plan import plan as _plan
from gpuplan.search.rank import Equilibrium, ScalingPoint
from gpuplan.spec import GPU, Layout, ModelSpec, Scenario
from gpuplan.spec.options import PlanOptions

__all__ = ["Estimate", "Fit", "Plan", "PlanOptions", "clear_model_caches", "evaluate", "evaluate_scenario", "fit",
           "get_gpu", "load_model", "plan", "plan_scenario", "scenario"]

ScenarioInput = str | Path | Mapping[str, Any] | Scenario | None


def scenario(source: ScenarioInput = None, /, **fields: Any) -> Scenario:
    """A validated scenario from a file path or mapping (optional) and scenario fields as keywords."""
    if isinstance(source, Scenario):
        if fields:
            raise GpuplanError("give scenario fields or a parsed Scenario, not both")
        return source
    fields = own_keys(fields, FIELD_ALIASES, "scenario field {!r}")
    unknown = sorted(set(fields) - set(FLAG_KEYS))
    if unknown:
        raise GpuplanError(f"unknown scenario field {unknown[0]!r}: valid fields are {', '.join(FLAG_KEYS)}")
    base: Path | None = None
    if source is None:
        raw: Any = {}
    elif isinstance(source, str | Path) and (short := model_shorthand(source, fields)) is not None:
        raw = short  # a model name where the scenario goes: gpuplan.plan("llama-3.1-8b")
        fields = {k: v for k, v in fields.items() if k != "model"}
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


class Estimate(_Estimate):
    """Memory, time and cost of one configuration (``gpuplan evaluate``): the model's estimate, and its
    JSON (``to_json()``, what ``--json`` prints)."""

    __slots__ = ()

    @classmethod
    def of(cls, est: _Estimate) -> Estimate:
        return est if isinstance(est, Estimate) else cls(**{f.name: getattr(est, f.name) for f in dc_fields(est)})

    def to_json(self) -> dict[str, Any]:
        return estimate_json(self)


def evaluate(source: ScenarioInput = None, /, **fields: Any) -> Estimate:
    """Memory, step time, time to train and cost of one configuration (``gpuplan evaluate``)."""
    return Estimate.of(_evaluate(scenario(source, **fields)))


def evaluate_scenario(sc: Scenario, layout: Layout | None = None, **overrides: Any) -> Estimate:
    """``evaluate`` on a parsed scenario, with a complete ``layout`` or layout fields as ``overrides``."""
    return Estimate.of(_evaluate(sc, layout, **overrides))


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
        return Estimate.of(candidate_estimate(r.scenario, r.best, r.global_batch)) if r.best is not None else None

    def to_json(self) -> dict[str, Any]:
        return fit_json(self.result, self.best)


def fit(source: ScenarioInput = None, /, *, max_gpus: int | str | None = None, **fields: Any) -> Fit:
    """The smallest count of the scenario's GPU type on which the run fits, and the fastest layout there."""
    return Fit(_fit(scenario(source, **fields), max_gpus=plan_options({"max_gpus": max_gpus}).max_gpus))


@dataclass(frozen=True, slots=True)
class Plan:
    """A searched plan (``gpuplan plan``): ranked candidates, scaling curve, equilibrium, advice."""

    result: PlanResult

    @property
    def best(self) -> Estimate | None:
        r = self.result
        return Estimate.of(r.estimate(r.ranked[0])) if r.ranked else None

    @property
    def candidates(self) -> list[Estimate]:
        r = self.result
        return [Estimate.of(r.estimate(c)) for c in r.ranked[:r.top_k]]

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


def plan(source: ScenarioInput = None, /, *, gpu: str | list[str] | None = None, max_gpus: int | str | None = None,
         objective: str = "time", deadline_s: float | str | None = None, budget: float | str | None = None,
         top: int | str = 5, threshold: float | str = 0.8, provider: str | list[str] | None = None,
         region: str | None = None, pricing: str | None = None,
         progress: Callable[[float, str], None] | None = None, **fields: Any) -> Plan:
    """Search GPU type × count × layout for what the scenario leaves open; rank by time or cost.
    ``gpu`` may name several types (a list, ``"a,b"``, or ``"all"``); with no GPU anywhere, the whole
    catalogue. The options take units as the command line does: ``deadline_s="14d"``, ``budget="$50k"``,
    ``max_gpus="16k"``. ``provider`` (``"aws,gcp"``), ``region`` (``"eu"``, ``"us-east-1"``) and ``pricing``
    (``"spot"``) price each GPU type from the dated price catalogue."""
    options = plan_options({"gpu": gpu, "max_gpus": max_gpus, "objective": objective, "deadline": deadline_s,
                            "budget": budget, "top": top, "threshold": threshold, "provider": provider,
                            "region": region, "pricing": pricing})
    if not options.gpu_types and "gpu" not in fields and not _names_gpu(source):
        options = replace(options, gpu_types=("all",))
    read = reading_gpu(options, power_limited=fields.get("power_limit") is not None)
    if read is not None:
        fields = {**fields, "gpu": read} if not options.several else {"gpu": read, **fields}
    return plan_scenario(scenario(source, **fields), options, progress)


def _names_gpu(source: ScenarioInput) -> bool:
    """Whether a scenario source states hardware.gpu (a plan without one searches every type)."""
    if isinstance(source, Scenario):
        return True
    if isinstance(source, str | Path) and model_shorthand(source) is not None:
        return False  # a model name: the whole catalogue unless ``gpu`` says
    raw: Any = read_file(source) if isinstance(source, str | Path) else source
    return isinstance(raw, Mapping) and isinstance(raw.get("hardware"), Mapping) and "gpu" in raw["hardware"]


def plan_scenario(sc: Scenario, options: PlanOptions | None = None,
                  progress: Callable[[float, str], None] | None = None, **option_values: Any) -> Plan:
    """``plan`` on a parsed scenario, with a ``PlanOptions`` or its fields as keywords (``max_gpus=64``,
    ``deadline_s="14d"``, ``gpu_types=["h100-sxm", "h200"]``): the GPU types it names are resolved here
    (the catalogue is read at the edge), then searched."""
    if option_values:
        if options is not None:
            raise GpuplanError("give plan options as a PlanOptions or as keywords, not both")
        options = plan_options(option_values)
    options = options or PlanOptions()
    return Plan(_plan(sc, options, targets(sc, options), progress))


def load_model(ref: str | Path | Mapping[str, Any]) -> ModelSpec:
    """A model from the catalogue (name or alias), a ``config.json`` path or folder, or a mapping."""
    return _load_model(ref if not isinstance(ref, Path) else str(ref))


def get_gpu(name: str) -> GPU:
    """A GPU type from the catalogue, by id or alias (``h100``, ``H100-SXM5-80GB``)."""
    return _get_gpu(name)
