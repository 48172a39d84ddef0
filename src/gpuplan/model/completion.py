"""A scenario's layout completed where the input leaves it open (``completed_layout``): the layout defaults, or what
the framework the user names documents — its ZeRO stage over data-parallel replicas (frameworks.json
``defaults.zero``) and how its ZeRO-3 gathers parameters (``zero3_gather``: DeepSpeed module by module, FSDP block by
block) — and whether its data-parallel gradient reduction runs under the backward (``dp_overlap``). ``evaluate``
completes a layout this way; the planner keeps the same gathers (search/book.py)."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from gpuplan.catalog.framework_comm import dp_overlap_of, zero3_gather_of
from gpuplan.catalog.frameworks import documented_defaults, get_framework
from gpuplan.catalog.refusals import why_not
from gpuplan.catalog.stacks import runs_profile_defaults, stack_layout_defaults
from gpuplan.errors import GpuplanError
from gpuplan.spec import Layout, Training
from gpuplan.spec.scenario import Scenario, complete_layout

# the layout fields a framework the user names fills from its documented defaults when the input leaves them open:
# the ZeRO stage (FSDP stacks shard fully by default); recompute stays off — the frameworks' code defaults are off,
# their example configs differ by model (frameworks.json notes)
DOCUMENTED_LAYOUT = ("zero",)


def replicas_of(sc: Scenario, overrides: dict[str, Any]) -> int:
    """dp × micro-batch of the layout the scenario's fields make (1 where they make none: its check says why)."""
    try:
        lay = Layout.for_world(sc.hardware.gpus, **{**sc.layout, **overrides, **open_split(sc, overrides)[0]})
    except GpuplanError:
        return 1
    return lay.dp * lay.micro_batch


def completed_layout(sc: Scenario, **overrides: Any) -> tuple[Layout, tuple[tuple[str, str], ...]]:
    """``_gathered``'s layout, its data-parallel gradient reduction under the backward or after it as the framework
    does it where the input leaves ``dp_overlap`` open (``framework_comm.dp_overlap_of``: DeepSpeed below ZeRO-3 and
    under its pipeline engine, Megatron-LM of 2021-22 reduce after the backward; listed under ``assumed``)."""
    split, split_rules = open_split(sc, overrides)
    lay, rules = _gathered(sc, {**overrides, **split})
    rules = (*split_rules, *rules)
    if "dp_overlap" in sc.layout or "dp_overlap" in overrides:
        return lay, rules
    fw = sc.training.framework
    does, _ = dp_overlap_of(fw, lay.zero, lay.pp)
    if does == lay.dp_overlap:
        return lay, rules
    return replace(lay, dp_overlap=does), (*rules, ("dp_overlap", f"{fw} reduces the data-parallel gradients after the "
                                                    "backward (frameworks.json dp_overlap)"))


def open_split(sc: Scenario, overrides: dict[str, Any]) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """With dp given and tp and pp open, the model-parallel GPUs (the count over dp × cp) split as Megatron's papers
    split them — tensor parallelism up to the GPUs of a node, pipeline parallelism across nodes (Narayanan et al. 2021,
    arXiv:2104.04473, Takeaway #1) —: the largest power-of-two tp within the node that divides them and the heads,
    the rest pipeline stages; the fields and their rules (none where the fields leave nothing to split)."""
    given = {**sc.layout, **overrides}
    if "dp" not in given:
        return {}, ()
    if "tp" in given or "pp" in given:
        return _left_by_count(sc, given)
    n, dp, cp = sc.hardware.gpus, given["dp"], given.get("cp", 1)
    if not isinstance(dp, int) or not isinstance(cp, int) or dp < 1 or cp < 1 or n % (dp * cp) or n == dp * cp:
        return {}, ()
    rest = n // (dp * cp)
    tp = max(node_tp_degrees(sc, rest), default=1)
    if rest // tp > sc.model.n_layers:
        return {}, ()
    why = (f"dp {dp} given, tp and pp open: the other {rest} GPUs per replica split as Megatron's papers split them — "
           "tensor parallelism within the node, pipeline across nodes (Narayanan et al. 2021, Takeaway #1)")
    return {"tp": tp, "pp": rest // tp}, (("tp", why), ("pp", why))


def _left_by_count(sc: Scenario, given: dict[str, Any]) -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """dp given with tp or pp, and one model degree open — the other of tp and pp (cp open counting 1), else cp: it is
    what the GPU count leaves, n / the given degrees' product, where that is a whole degree the model takes (tp
    dividing the attention and key-value heads, pp at most the layers, cp dividing the sequence: spec/rules.py) —
    a table without that column."""
    key = next((k for k in ("tp", "pp") if k not in given), "cp")
    if key in given:
        return {}, ()
    degrees = {k: given.get(k, 1) for k in ("dp", "tp", "pp", "cp") if k != key}
    if not all(isinstance(d, int) and d >= 1 for d in degrees.values()):
        return {}, ()
    n, used = sc.hardware.gpus, math.prod(degrees.values())
    if n % used:
        return {}, ()
    value, m = n // used, sc.model
    takes = {"tp": m.n_heads % value == 0 and m.n_kv_heads % value == 0, "pp": value <= m.n_layers,
             "cp": sc.training.seq_len % value == 0}
    if value == 1 or not takes[key]:
        return {}, ()
    said = ", ".join(f"{k} {v}" for k, v in degrees.items() if k in given)
    return {key: value}, ((key, f"{said} given, {key} open: the {n} GPUs leave {key} = {n} / {used}"),)


def node_tp_degrees(sc: Scenario, gpus: int) -> list[int]:
    """The tensor-parallel degrees inside a node for ``gpus`` model-parallel GPUs: the powers of two from 2 up to the
    node's GPUs that divide them and the attention and key-value heads."""
    m, out, tp = sc.model, [], 2
    while tp <= min(gpus, sc.hardware.gpus_per_node) and gpus % tp == 0 and m.n_heads % tp == 0 \
            and m.n_kv_heads % tp == 0:
        out.append(tp)
        tp *= 2
    return out


def _gathered(sc: Scenario, overrides: dict[str, Any]) -> tuple[Layout, tuple[tuple[str, str], ...]]:
    """``_documented``'s layout, its ZeRO-3 gathers the framework's own where the input leaves them open
    (frameworks.json ``zero3_gather``: DeepSpeed's per submodule; listed under ``assumed`` where they are not the
    layout default)."""
    gather = zero3_gather_of(sc.training.framework)
    if "zero3_gather" in sc.layout or "zero3_gather" in overrides or gather == _LAYOUT_DEFAULTS["zero3_gather"]:
        return _documented(sc, overrides)
    lay, rules = _documented(sc, {**overrides, "zero3_gather": gather})
    fw = sc.training.framework
    return lay, (*rules, ("zero3_gather", f"{fw}'s documented gathers (frameworks.json zero3_gather)"))


def _documented(sc: Scenario, overrides: dict[str, Any]) -> tuple[Layout, tuple[tuple[str, str], ...]]:
    """The scenario's layout completed by the one rule: over data-parallel replicas, the ZeRO stage the framework the
    user named documents (frameworks.json ``defaults.zero``: torchtitan, torchtune and PyTorch FSDP shard fully, as
    ``gpuplan validate`` evaluates the corpus), else the layout defaults (spec/scenario.py ``complete_layout``: zero 0;
    one replica has nothing to shard over). A stack read as a profile takes its own documented stage where it has one
    (stacks.json ``layout_defaults``: NeMo's distributed optimizer, ZeRO 1), else the profile's where it runs it
    (``profile_defaults``: Composer, verl); others (HF Trainer, DDP) keep the layout defaults. Where one
    completion is not a valid layout the framework runs, the other; where neither is, the documented one's error.
    Returns the layout and the rule of each field the framework's default set (listed under ``assumed``)."""
    fw = sc.training.framework
    word = next((g for f, g, _, _ in sc.read_as if f == "training.framework"), None)
    own = stack_layout_defaults(word) if word is not None else {}
    if own:  # the stack's own documented defaults
        facts = {k: v for k, (v, _) in own.items()}
    elif word is not None and not runs_profile_defaults(word):  # a stack that keeps the layout defaults
        facts = {}
    else:  # the profile's
        facts = {k: f.value for k, f in get_framework(fw).defaults.items()}
    plain = {k: facts[k] for k in DOCUMENTED_LAYOUT if facts.get(k) is not None
             and facts[k] != _LAYOUT_DEFAULTS[k] and k not in sc.layout and k not in overrides}
    if not plain:  # the layout defaults: evaluate checks the framework's refusals itself
        return complete_layout(sc, **overrides), ()
    base, base_error = _completion(sc, fw, overrides)
    if base is not None and base_error is None and base.dp * base.cp == 1:
        return base, ()
    lay, error = _completion(sc, fw, {**overrides, **plain})
    rules = tuple((k, f"{word}'s documented default: {own[k][1]} (stacks.json layout_defaults.{k})" if k in own else
                   f"{fw}'s documented default (frameworks.json defaults.{k})") for k in plain)
    if error is None or (base is not None and base_error is not None and lay is not None):
        return lay, rules  # valid — or refused as the default is too: its refusal names what still stands in the way
    if base is not None and base_error is None:
        return base, ()
    if lay is None:
        raise GpuplanError(error)
    return lay, rules


def _completion(sc: Scenario, fw: str, fixed: dict[str, Any]) -> tuple[Layout | None, str | None]:
    """The layout completed with ``fixed``, and why it is not one the framework runs (None: it is): no layout where
    the fields make none (the error)."""
    try:
        lay = complete_layout(sc, **fixed)
    except GpuplanError as err:
        return None, str(err)
    return lay, why_not(fw, lay.values(), sc.training)


_LAYOUT_DEFAULTS = {f.name: f.default for f in fields(Layout)}


def as_framework(sc: Scenario, framework: str) -> Training:
    """The scenario's training as ``framework`` runs it: what the generic stack filled in from its own documented
    defaults (gradient dtype, expandable segments, fp8 recipe) and the scenario did not give, filled from
    ``framework``'s instead (catalog/frameworks.py ``documented_defaults``) — what ``export`` plans a generic scenario
    as, and what ``estimate.named_alternatives`` times each named framework with."""
    open_ = {k: None for k in ("grad_dtype", "expandable_segments", "fp8_recipe") if f"training.{k}" not in sc.given}
    arch = sc.hardware.gpu.architecture if "training.attention" not in sc.given else None
    return documented_defaults(replace(sc.training, framework=framework, **open_), arch)
