"""The training frameworks of ``training.framework`` as cited profiles (``frameworks.json``).

Each profile states, as data with a source per fact, what the framework does by default: which
kernels it fuses, its attention kernel, torch.compile, tensor- and data-parallel overlap, FSDP
under pipelines, ZeRO-3 gather granularity, MoE dispatch, the FP8 recipe, the defaults that
matter when a scenario leaves them open, and the layouts it cannot run (``cannot_run``).

A fact whose value is ``None`` was not found in an official source; its note says so. The
``cannot_run`` conditions are a small language over layout and training fields (see
``frameworks.json``'s ``_comment``); ``refusals`` evaluates them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.errors import GpuplanError
from gpuplan.spec import FP8_RECIPES, FRAMEWORKS, ZERO3_GATHERS

# Sections of facts and the keys every profile has (absent in the file = a null fact).
KERNELS = ("norm", "rope", "activation", "cross_entropy", "adam", "bias_dropout_add")
SECTIONS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "fused_kernels": KERNELS,
    "compile": ("supported", "default"),
    "tp_comm_overlap": ("supported", "default", "requires", "layout_copies"),
    "dp_overlap": ("grad_reduce", "param_gather"),
    "moe": ("dispatcher", "a2a_overlap", "grouped_gemm", "dualpipe"),
    "fp8_recipe": ("default", "high_precision", "scope", "input_cast", "weight_cast", "tp_all_gather"),
    "memory": ("grad_dtype", "ddp_bucket_copy", "half_grads", "norm_fp32_copy", "lora_input", "lora_experts",
               "autocast_fp32_weights", "pp_grad_dtype", "sp_saved_input",
               "pp_stage_buffers", "kbit_upcast", "checkpoint_offload", "expandable_segments", "logged_peak"),
    "defaults": (),
})
SINGLE_FACTS = ("attention_kernel", "fsdp_under_pp", "zero3_gather", "pp_comm_overlap", "successor")
_FACT_KEYS = {"value", "source", "note"}
_RULE_KEYS = {"rule", "when", "why", "source"}
_NOT_STATED = "not stated in frameworks.json"


def _equal(actual: Any, expected: Any) -> bool:
    """Equality that keeps booleans apart from numbers (``True`` is not ``1`` here)."""
    if isinstance(actual, bool) != isinstance(expected, bool):
        return False
    return bool(actual == expected)


def _member(actual: Any, choices: Any) -> bool:
    return any(_equal(actual, c) for c in choices)


_OPS: Mapping[str, Callable[[Any, Any], bool]] = MappingProxyType({
    "==": _equal,
    "!=": lambda a, b: not _equal(a, b),
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "in": _member,
    "not_in": lambda a, b: not _member(a, b),
})


@dataclass(frozen=True, slots=True, kw_only=True)
class Fact:
    """One cited fact: ``value`` (``None`` = not found), its ``source`` (URL + file/section) and a note."""

    value: Any
    source: str | None
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A layout the framework cannot run: ``when`` (conditions, all must hold) and the one-line ``why``."""

    rule: str
    when: Mapping[str, Any]
    why: str
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkProfile:
    """The cited behaviour of one ``training.framework``. Mappings are read-only.

    ``fsdp_under_pp.value`` is True when FSDP re-shards (and re-gathers) parameters between
    pipeline micro-batches, False when it keeps them unsharded; ``zero3_gather.value`` is one of
    ``spec.ZERO3_GATHERS`` or None.
    """

    name: str
    summary: str
    scope: str
    fused_kernels: Mapping[str, Fact]
    attention_kernel: Fact
    compile: Mapping[str, Fact]
    tp_comm_overlap: Mapping[str, Fact]
    dp_overlap: Mapping[str, Fact]
    fsdp_under_pp: Fact
    zero3_gather: Fact
    pp_comm_overlap: Fact
    successor: Fact  # the profile that covers the same name's later code (megatron-lm → megatron-core)
    moe: Mapping[str, Fact]
    fp8_recipe: Mapping[str, Fact]
    memory: Mapping[str, Fact]
    cannot_run: tuple[Rule, ...]
    defaults: Mapping[str, Fact]

    def facts(self) -> list[tuple[str, Fact]]:
        """Every fact with its dotted path, e.g. ``("dp_overlap.grad_reduce", Fact(...))``."""
        out = [(name, getattr(self, name)) for name in SINGLE_FACTS]
        for section in SECTIONS:
            out += [(f"{section}.{key}", fact) for key, fact in getattr(self, section).items()]
        return out


def _bad(where: str, what: str) -> GpuplanError:
    return GpuplanError(f"frameworks.json: {where}: {what}")


def _fact(raw: Any, where: str) -> Fact:
    if raw is None:
        return Fact(value=None, source=None, note=_NOT_STATED)
    if not isinstance(raw, dict) or not set(raw) <= _FACT_KEYS or "value" not in raw:
        raise _bad(where, f"a fact is an object with keys {sorted(_FACT_KEYS)} (value required), got {raw!r}")
    source = raw.get("source")
    if raw["value"] is not None and not (isinstance(source, str) and source.strip()):
        raise _bad(where, "a fact with a value needs a source (URL + file/section)")
    return Fact(value=raw["value"], source=source, note=raw.get("note"))


def _section(raw: Any, section: str, where: str) -> Mapping[str, Fact]:
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise _bad(where, f"{section} must be an object of facts")
    keys = list(SECTIONS[section]) + [k for k in raw if k not in SECTIONS[section]]
    return MappingProxyType({k: _fact(raw.get(k), f"{where}.{section}.{k}") for k in keys})


def _check_when(when: Any, where: str) -> None:
    if not isinstance(when, dict) or not when:
        raise _bad(where, f"'when' must be a non-empty object of conditions, got {when!r}")
    for field, cond in when.items():
        if field == "any":
            if not isinstance(cond, list) or not cond:
                raise _bad(where, "'any' takes a non-empty list of conditions")
            for sub in cond:
                _check_when(sub, where)
        elif isinstance(cond, dict):
            unknown = set(cond) - set(_OPS)
            if unknown or not cond:
                raise _bad(where, f"condition on {field!r} uses unknown operators {sorted(unknown)}; "
                                  f"known: {sorted(_OPS)}")
            for op in ("in", "not_in"):
                if op in cond and not isinstance(cond[op], list):
                    raise _bad(where, f"{field!r}: {op!r} takes a list")


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict) or set(raw) != _RULE_KEYS:
        raise _bad(where, f"a cannot_run rule has exactly the keys {sorted(_RULE_KEYS)}, got {raw!r}")
    for key in ("rule", "why", "source"):
        if not (isinstance(raw[key], str) and raw[key].strip()):
            raise _bad(where, f"rule {key!r} must be a non-empty string")
    _check_when(raw["when"], f"{where} ({raw['rule']})")
    return Rule(rule=raw["rule"], when=MappingProxyType(raw["when"]), why=raw["why"], source=raw["source"])


def _profile(name: str, raw: dict) -> FrameworkProfile:
    where = f"frameworks.{name}"
    sections = {s: _section(raw.get(s), s, where) for s in SECTIONS}
    singles = {s: _fact(raw.get(s), f"{where}.{s}") for s in SINGLE_FACTS}
    gather = singles["zero3_gather"].value
    if gather is not None and gather not in ZERO3_GATHERS:
        raise _bad(f"{where}.zero3_gather", f"value must be one of {', '.join(ZERO3_GATHERS)} or null")
    rules = raw.get("cannot_run", [])
    if not isinstance(rules, list):
        raise _bad(where, "cannot_run must be a list of rules")
    return FrameworkProfile(
        name=name, summary=str(raw.get("summary", "")), scope=str(raw.get("scope", "")),
        cannot_run=tuple(_rule(r, f"{where}.cannot_run[{i}]") for i, r in enumerate(rules)),
        **singles, **sections,
    )


@cache
def _profiles() -> Mapping[str, FrameworkProfile]:
    raw = load_json("frameworks.json")["frameworks"]
    unknown = sorted(set(raw) - set(FRAMEWORKS))
    if unknown:
        raise _bad("frameworks", f"{', '.join(unknown)} is not a training.framework ({', '.join(FRAMEWORKS)})")
    return MappingProxyType({name: _profile(name, raw[name]) for name in FRAMEWORKS if name in raw})


def get_framework(name: str) -> FrameworkProfile:
    """The profile of one ``training.framework`` value, e.g. ``get_framework("torchtitan")``."""
    profiles = _profiles()
    if name not in profiles:
        raise GpuplanError(f"training.framework {name!r} has no profile: choose one of {', '.join(profiles)}")
    return profiles[name]


def frameworks() -> list[FrameworkProfile]:
    """Every profile, in the order of ``spec.FRAMEWORKS``."""
    return list(_profiles().values())


def _holds(actual: Any, cond: Any) -> bool:
    if actual is None:
        return False
    if not isinstance(cond, dict):
        return _equal(actual, cond)
    try:
        return all(_OPS[op](actual, ref) for op, ref in cond.items())
    except TypeError:  # an ordering test on a value of another type is simply not met
        return False


def _met(when: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    for field, cond in when.items():
        if field == "any":
            if not any(_met(sub, fields) for sub in cond):
                return False
        elif field not in fields or not _holds(fields[field], cond):
            return False
    return True


def refused_rules(profile: FrameworkProfile, layout_fields: Mapping[str, Any],
                  training_fields: Mapping[str, Any]) -> list[Rule]:
    """The ``cannot_run`` rules of ``profile`` whose conditions all hold. A layout field wins over a
    training field of the same name; a condition on a field absent from both (or None) is not met."""
    fields = {**training_fields, **layout_fields}
    return [r for r in profile.cannot_run if _met(r.when, fields)]


def refusals(profile: FrameworkProfile, layout_fields: Mapping[str, Any],
             training_fields: Mapping[str, Any]) -> list[str]:
    """The one-line reasons ``profile`` cannot run this layout and training job (empty: it can)."""
    return [r.why for r in refused_rules(profile, layout_fields, training_fields)]


def training_fields(training: Any) -> dict[str, Any]:
    """The training-job fields the ``cannot_run`` rules read, from a ``spec.Training``."""
    return {"method": training.method, "precision": training.precision, "compile": training.compile,
            "optimizer": training.optimizer, "attention": training.attention,
            "activation_offloading": training.activation_offloading,
            "fp8_recipe": fp8_recipe_of(training) if training.precision == "fp8" else None}


def first_refusal(framework: str, layout_fields: Mapping[str, Any], training: Any) -> Rule | None:
    """The first of ``framework``'s cited ``cannot_run`` rules this layout and job meet, or None."""
    profile = get_framework(framework)
    if not profile.cannot_run:
        return None
    rules = refused_rules(profile, layout_fields, training_fields(training))
    return rules[0] if rules else None


def _reads(when: Mapping[str, Any]) -> set[str]:
    """The fields a rule's condition reads."""
    out: set[str] = set()
    for key, cond in when.items():
        out |= set().union(*(_reads(sub) for sub in cond)) if key == "any" else {key}
    return out


def rule_fields(framework: str, training: Any = None) -> frozenset[str]:
    """The fields ``framework``'s ``cannot_run`` rules read (a refusal depends on nothing else); with ``training``,
    of the rules this job can meet (a rule whose condition on a job field fails never refuses one of its layouts)."""
    job = training_fields(training) if training is not None else {}
    live = [r for r in get_framework(framework).cannot_run if all(_holds(job[k], c) for k, c in r.when.items()
                                                                  if job.get(k) is not None)]
    return frozenset(set().union(*(_reads(r.when) for r in live)))


def refuses_degrees(framework: str, degrees: Mapping[str, int], training: Any) -> bool:
    """Whether a ``cannot_run`` rule of ``framework`` that reads these parallel degrees, and nothing but them and
    the job, refuses them — no layout of these degrees runs (PyTorch FSDP via accelerate: no pipeline)."""
    rules = get_framework(framework).cannot_run
    if not rules:
        return False
    fields = {**training_fields(training), **degrees}
    return any(_reads(r.when) & degrees.keys() and _met(r.when, fields) for r in rules)


@cache
def keeps_unsharded_under_pp(framework: str) -> bool:
    """Whether the framework's FSDP keeps a pipeline stage's parameters gathered and its gradients
    unsharded between micro-batches (catalog/frameworks.json ``fsdp_under_pp`` False: torchtitan sets
    reshard_after_forward = not pp_enabled, and torch.distributed.pipelining's
    backward_maybe_with_nosync calls set_requires_gradient_sync(last_backward) on FSDP modules)."""
    return get_framework(framework).fsdp_under_pp.value is False


def _fp8_fact(framework: str, key: str) -> Any:
    fact = get_framework(framework).fp8_recipe.get(key)
    return fact.value if fact is not None else None


@cache
def converts_every_block_linear(framework: str) -> bool:
    """Whether the framework runs every linear of the transformer blocks in fp8 under precision fp8,
    paying or not (frameworks.json ``fp8_recipe.scope`` 'block-linears': torchtitan's float8
    converter, Megatron-Core's TE layers)."""
    return _fp8_fact(framework, "scope") == "block-linears"


@cache
def fp8_input_cast_shared(framework: str, tp_gathered: bool) -> bool:
    """Whether linears that read the same input (q/k/v, gate/up) share one cast of it
    (frameworks.json ``fp8_recipe.input_cast``: 'shared' — Megatron-Core's fused TE linears;
    'shared-under-tp' — torchtitan's PrepareFloat8ModuleInput, with fp8 tensor parallelism only)."""
    value = _fp8_fact(framework, "input_cast")
    return value == "shared" or (value == "shared-under-tp" and tp_gathered)


@cache
def fp8_weight_cast_per_step(framework: str) -> bool:
    """Whether fp8 weights are cast once per optimizer step and cached across micro-batches
    (frameworks.json ``fp8_recipe.weight_cast`` 'per-step': Transformer Engine's is_first_microbatch)."""
    return _fp8_fact(framework, "weight_cast") == "per-step"


@cache
def fp8_gathers_tp(framework: str, recipe: str) -> bool:
    """Whether the framework's sequence-parallel all-gathers carry fp8 under ``recipe`` (cast on the
    shard, then gathered; frameworks.json ``fp8_recipe.tp_all_gather``: the recipes that do)."""
    value = _fp8_fact(framework, "tp_all_gather")
    return isinstance(value, list) and recipe in value


FP8_RECIPE_FALLBACK = "tensorwise"  # dynamic per-tensor scaling: torchao's default Float8Linear recipe


def fp8_recipe_of(training: Any) -> str:
    """The fp8 recipe a run uses: as given, else its framework's documented default (``default_fp8_recipe``)."""
    return training.fp8_recipe if training.fp8_recipe is not None else default_fp8_recipe(training.framework)


def default_fp8_recipe(framework: str) -> str:
    """A framework's documented fp8 recipe (frameworks.json ``fp8_recipe.default``: torchtitan tensorwise,
    Megatron-Core delayed), else tensorwise."""
    default = get_framework(framework).fp8_recipe.get("default")
    value = default.value if default is not None else None
    return value if value in FP8_RECIPES else FP8_RECIPE_FALLBACK


GRAD_DTYPES = ("fp32", "param")


MIXED = ("bf16", "fp8")  # the precisions whose gradient dtype is a choice (training.grad_dtype)


def documented_defaults(training: Any, attention_on: str | None = None) -> Any:
    """``training`` with what it leaves open and its framework documents: the fp8 recipe under fp8, the
    gradient dtype under bf16/fp8 mixed precision, whether the allocator maps expandable segments; with
    ``attention_on`` (the GPU architecture, where the input names no attention), the attention the framework runs
    there (``attention_of``)."""
    if attention_on is not None:
        from gpuplan.catalog.framework_era import attention_of  # it imports this module

        training = replace(training, attention=attention_of(training.framework, attention_on))
    if training.precision == "fp8" and training.fp8_recipe is None:
        training = replace(training, fp8_recipe=fp8_recipe_of(training))
    if training.precision in MIXED and training.grad_dtype is None:
        training = replace(training, grad_dtype=grad_dtype_of(training))
    if training.expandable_segments is None:
        from gpuplan.catalog.framework_memory import sets_expandable_segments as sets  # it imports this module
        training = replace(training, expandable_segments=sets(training.framework))
    return training


def grad_dtype_of(training: Any) -> str:
    """The dtype a run keeps its gradients in under mixed precision: as given (training.grad_dtype), else its
    framework's documented choice (frameworks.json ``memory.grad_dtype``: fp32 main-grad buffers in Megatron,
    the parameters' dtype in FSDP/ZeRO accounting), else fp32."""
    if getattr(training, "grad_dtype", None) is not None:
        return str(training.grad_dtype)
    fact = get_framework(training.framework).memory.get("grad_dtype")
    value = fact.value if fact is not None else None
    return value if value in GRAD_DTYPES else "fp32"
