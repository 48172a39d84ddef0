"""An open ``layout.recompute`` on a layout that runs out of memory without recomputation.

A layout the user gives without saying whether activations are recomputed is read as the run it describes: where
its peak does not fit without recomputation even at the low end of its 80 % interval (``DOES NOT FIT``, not
``TIGHT``: a run like that cannot have run without), the run recomputed — Megatron-LM's papers (Korthikanti et al. 2022,
arXiv:2205.05198, Sec. 5) pick selective recomputation where it suffices and full recomputation where it does not,
and torchtune's recipes and Hugging Face fine-tuning examples turn activation checkpointing on to fit one GPU. So,
among the modes the stack offers (its documented one and those costlier: Hugging Face and PyTorch FSDP stacks
checkpoint whole blocks, torchtitan runs per-op selective), the least that fits (``fits``: the peak's interval upper
end, with the headroom kept) is taken — else the least that leaves the peak ``TIGHT``, else, where none is even
TIGHT, the one that leaves the least peak (the answer still says DOES NOT FIT, by how much at best: 1.7 TiB without
recomputation says nothing a user can act on) — and the answer lists it under ``assumed`` with the peak without it.
A layout that fits without recomputation keeps none (the layout default) — except under a stack that recomputes
unless told not to (frameworks.json ``defaults.recompute_on``: Unsloth's get_peft_model checkpoints by default; QLoRA
prepared by PEFT's prepare_model_for_kbit_training, use_gradient_checkpointing=True by default), which keeps its
documented mode — and a given ``layout.recompute`` is never changed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.catalog.frameworks import get_framework
from gpuplan.catalog.refusals import why_not
from gpuplan.catalog.stacks import stack_layout_defaults
from gpuplan.model.kept import kbit_upcast
from gpuplan.model.memory import MemoryBreakdown, memory
from gpuplan.model.recompute_modules import module_sets
from gpuplan.spec import Layout, ModelSpec
from gpuplan.spec.scenario import Scenario

# the modes in the order they cost compute: Megatron's selective (the attention core), per-op selective
# (torchtitan's op-level SAC: every other matmul's output kept), full (each block's input only)
LEAST_FIRST = ("selective", "selective-op", "full")

GIB = 2**30

# QLoRA prepared by PEFT (model/kept.py kbit_upcast: the run whose fp32 norms and stream gpuplan counts)
KBIT_CHECKPOINTS = ("{} prepares a 4-bit model with PEFT's prepare_model_for_kbit_training, whose "
                    "use_gradient_checkpointing defaults to True (peft src/peft/utils/other.py; TRL passes its "
                    "SFTConfig.gradient_checkpointing, also True by default): each decoder layer checkpointed")


def open_recompute(sc: Scenario, lay: Layout, mem: MemoryBreakdown, overrides: dict[str, Any]
                   ) -> tuple[Layout, MemoryBreakdown, str | None]:
    """``lay`` and its memory, or with recompute open and ``lay`` out of memory without it (not even TIGHT), the least
    recomputation that fits (else leaves the peak TIGHT, else leaves the least peak: out of memory either way, by
    the least) and the rule that says so (None: unchanged)."""
    if lay.recompute != "none" or "recompute" in sc.layout or "recompute" in overrides:
        return lay, mem, None
    fw = sc.training.framework
    on = get_framework(fw).defaults.get("recompute_on")
    # a stack's own (stacks.json layout_defaults.recompute_on: TRL's SFTConfig turns gradient checkpointing on)
    word = next((g for f, g, _, _ in sc.read_as if f == "training.framework"), None)
    stack_on = stack_layout_defaults(word).get("recompute_on") if word is not None else None
    # the stack recomputes unless told not to: its documented mode (Unsloth, TRL), or whole blocks where PEFT prepared a
    # 4-bit model (gradient_checkpointing_enable checkpoints each decoder layer)
    why, mode = (f"{fw} recomputes by default ({on.source})", _modes(fw)[0]) if on is not None and on.value is True \
        else (f"{word} recomputes by default ({stack_on[1]})", _modes(fw)[0]) if stack_on and stack_on[0] is True \
        else (KBIT_CHECKPOINTS.format(fw), "full") if kbit_upcast(sc.training, lay.zero) else (None, None)
    if why is not None and mode is not None:
        cand = replace(lay, recompute=mode)
        if not why_not(fw, cand.values(), sc.training):
            rule = f"not given: {why}; give layout.recompute: none to change it"
            return cand, memory(sc.model, sc.hardware, sc.training, cand, sc.corrections), rule
    if mem.fits or mem.tight:
        return lay, mem, None
    tight: tuple[Layout, MemoryBreakdown] | None = None
    least: tuple[Layout, MemoryBreakdown] | None = None
    for mode, modules in _candidates(sc.training.framework, sc.model, lay.ep_overlap):
        cand = replace(lay, recompute=mode, recompute_modules=modules)
        if why_not(sc.training.framework, cand.values(), sc.training):
            continue
        m = memory(sc.model, sc.hardware, sc.training, cand, sc.corrections)
        if m.fits:
            return cand, m, _rule(mode, mem, "fits")
        if tight is None and m.tight:
            tight = (cand, m)
        if m.total < (least[1].total if least is not None else mem.total):
            least = (cand, m)
    if tight is not None:
        return tight[0], tight[1], _rule(tight[0].recompute, mem, "leaves the peak TIGHT")
    if least is not None:  # out of memory whatever it recomputes: the answer says by how much at the nearest
        return least[0], least[1], _rule(least[0].recompute, mem, "comes nearest to fitting (none fits)")
    return lay, mem, None


def _modes(framework: str) -> tuple[str, ...]:
    """The recomputation modes a stack offers, least costly first: from the one its documentation runs
    (frameworks.json ``defaults.recompute``: torchtitan's per-op selective, FSDP stacks' and torchtune's whole-block
    checkpointing), else all of them (Megatron's selective, per-op, full)."""
    documented = get_framework(framework).defaults.get("recompute")
    value = documented.value if documented is not None else None
    return LEAST_FIRST[LEAST_FIRST.index(value):] if value in LEAST_FIRST else LEAST_FIRST


def _candidates(framework: str, model: ModelSpec, ep_overlap: bool) -> list[tuple[str, tuple[str, ...]]]:
    """(mode, modules) to try, least costly first: the stack's modes (``_modes``), and under Megatron-Core for a MoE
    model its selective recomputation by module between selective and full, the narrow boundaries first as Megatron
    Bridge's guidance orders them (docs/training/activation-recomputation.md at commit 34ddd53b: "grouped MoE often
    starts with moe_act or layernorm plus moe_act", "MLA often benefits from mla_up_proj", whole-moe recompute "a
    broader alternative ... incompatible with expert-parallel overlap"; "prefer the narrow boundary that satisfies the
    memory target") — its performance recipes recompute DeepSeek-V3 so (scripts/performance/configs/deepseek:
    mla_up_proj, mlp on H100)."""
    modes = [(mode, ()) for mode in _modes(framework)]
    sets = module_sets(framework, model)
    if not sets or ("selective", ()) not in modes:
        return modes  # type: ignore[return-value]
    if not ep_overlap:
        sets.append((*[m for m in sets[-1] if m != "moe_act"], "moe"))
    at = modes.index(("selective", ())) + 1
    return [*modes[:at], *(("selective", mods) for mods in sets), *modes[at:]]  # type: ignore[list-item]


def _rule(mode: str, plain: MemoryBreakdown, how: str) -> str:
    return open_field_rule(plain, "without recomputation", "recomputes",
                           f"the least recomputation the stack offers that {how}", "recompute_open.py", "recompute")


def open_field_rule(plain: MemoryBreakdown, without: str, does: str, taken: str, module: str, field: str) -> str:
    """The ``assumed`` rule of an open layout field read as the run it describes: the peak ``without`` it (its 80 %
    interval, of the usable memory), what a run of the layout therefore ``does``, what was ``taken`` and where."""
    usable = plain.capacity * (1 - plain.headroom_share)
    return (f"not given, and {without} the peak is {plain.total / GIB:,.1f} GiB (80%: {plain.low / GIB:,.1f}–"
            f"{plain.high / GIB:,.1f}) of {usable / GIB:,.1f} usable: a run of this layout {does} — {taken} "
            f"(model/{module}); give layout.{field} to change it")
