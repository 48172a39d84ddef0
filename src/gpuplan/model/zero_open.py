"""An open ``layout.zero`` on a layout whose replicas run out of memory unsharded.

A layout the user gives without saying how its data-parallel replicas shard the model states is read as the run it
describes, as an open recomputation is (model/recompute_open.py): where the peak, completed with the framework's
documented stage (model/completion.py) and no recomputation, does not fit even at the low end of its 80 % interval
(``DOES NOT FIT``), or is ``TIGHT`` with its point estimate past the GPU (it more likely runs out of memory than not), a
run like it sharded. The stages are tried least first — ZeRO-1 shards the
optimizer states at no extra traffic (its reduce-scatter and all-gather move what the all-reduce moves; Rajbhandari
et al. 2020, ZeRO, Sec. 7), ZeRO-2 the gradients too, ZeRO-3 the parameters, gathered again per layer — among those
the framework runs (its cited refusals): the least that fits without recomputation; else the least with which the
least recomputation fits (recompute_open then sets it); else the least that leaves the peak ``TIGHT`` with its point
estimate within the GPU (a run like it more likely runs than not), else the ``TIGHT`` one with the least peak. Where
none does, the stage with the least peak (the recomputation rule and the answer say how far it is, at best). The
answer lists the stage under ``assumed`` with the peak unsharded; a given ``layout.zero`` is never changed, and one
replica has nothing to shard.
"""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.refusals import why_not
from gpuplan.catalog.stacks import stack_layout_defaults
from gpuplan.model.memory import MemoryBreakdown, memory
from gpuplan.model.recompute_open import open_field_rule, open_recompute
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario

Rules = tuple[tuple[str, str], ...]


def open_zero(sc: Scenario, lay: Layout, mem: MemoryBreakdown, overrides: dict[str, Any]
              ) -> tuple[Layout, MemoryBreakdown, Rules | None]:
    """``lay`` and its memory, or — with ``layout.zero`` open, more than one replica and ``lay`` out of memory (not even
    TIGHT, or TIGHT with its point estimate past the GPU) — the layout completed at the least ZeRO stage above its own
    that fits, its memory and its rules, the stage's saying so last (None: unchanged)."""
    # TIGHT with its point estimate within the GPU: a run like it more likely runs than not, as given; past it, sharded
    if _fixed(sc, overrides) or lay.dp * lay.cp == 1 or mem.fits or (mem.tight and mem.total <= mem.capacity):
        return lay, mem, None
    cands = [(cand, rules, memory(sc.model, sc.hardware, sc.training, cand, sc.corrections))
             for cand, rules in _stages(sc, lay, overrides)]
    for cand, rules, m in cands:  # the states sharded, nothing recomputed
        if m.fits:
            return cand, m, (*rules, ("zero", _rule(lay.zero, cand.zero, mem, "fits")))
    recomputed = [(*c, open_recompute(sc, c[0], c[2], overrides)[1]) for c in cands]
    for cand, rules, m, r in recomputed:  # sharded, and the least recomputation that then fits (recompute_open sets it)
        if r.fits:
            how = "fits with the least recomputation the stack offers"
            return cand, m, (*rules, ("zero", _rule(lay.zero, cand.zero, mem, how)))
    # TIGHT, recomputing or not: the first whose point estimate fits (a run like it more likely runs than not), else
    # the one with the least peak
    tight = [(c, rules, m, (m if m.tight else r)) for c, rules, m, r in recomputed if m.tight or r.tight]
    sure = [t for t in tight if t[3].total <= t[3].capacity]
    pick = sure[0] if sure else min(tight, key=lambda t: t[3].total, default=None)
    if pick is not None:
        cand, rules, m, _ = pick
        how = "leaves the peak TIGHT, its point estimate within the GPU" if sure else "leaves the least peak, TIGHT"
        return cand, m, (*rules, ("zero", _rule(lay.zero, cand.zero, mem, how)))
    # out of memory at every stage: the one with the least peak, so the answer says by how much at best
    least = min(recomputed, key=lambda t: min(t[2].total, t[3].total), default=None)
    if least is not None and min(least[2].total, least[3].total) < mem.total:
        cand, rules, m, _ = least
        how = "leaves the least peak: out of memory at every stage"
        return cand, m, (*rules, ("zero", _rule(lay.zero, cand.zero, mem, how)))
    return lay, mem, None


def _stages(sc: Scenario, lay: Layout, overrides: dict[str, Any]) -> list[tuple[Layout, Rules]]:
    """The layout completed at each ZeRO stage above ``lay``'s that the framework runs, least first, with its rules
    (model/completion.py: the framework's gathers and gradient reduction follow the stage)."""
    from gpuplan.model.completion import completed_layout  # completion imports the framework rules this module uses

    out = []
    for stage in range(lay.zero + 1, 4):
        cand, rules = completed_layout(sc, **{**overrides, "zero": stage})
        if not why_not(sc.training.framework, cand.values(), sc.training, sc.model):
            out.append((cand, rules))
    return out


def _fixed(sc: Scenario, overrides: dict[str, Any]) -> bool:
    """Whether the stage is not open: given, or fixed at 0 by a stack that replicates the model by definition
    (stacks.json ``layout_defaults.zero`` 0: PyTorch DDP, Horovod)."""
    if "zero" in sc.layout or "zero" in overrides:
        return True
    word = next((g for f, g, _, _ in sc.read_as if f == "training.framework"), None)
    return word is not None and stack_layout_defaults(word).get("zero", (None,))[0] == 0


def _rule(start: int, stage: int, plain: MemoryBreakdown, how: str) -> str:
    at = "with the model states unsharded" if start == 0 else f"at ZeRO-{start}"
    return open_field_rule(plain, at, "shards them further" if start else "shards them",
                           f"ZeRO-{stage}, the least sharding the stack runs that {how}", "zero_open.py", "zero")


def runnable_stage(sc: Scenario, lay: Layout, overrides: dict[str, Any], refused: str) -> tuple[Layout, Rules] | None:
    """With ``layout.zero`` open and the completed layout refused by the framework at its stage (``refused``, the
    cited reason — accelerate composes tensor parallelism only with FSDP), the layout completed at the least higher
    stage the framework runs, and its rules; None where no stage helps (the refusal stands)."""
    if _fixed(sc, overrides) or lay.dp * lay.cp == 1:
        return None
    stages = _stages(sc, lay, overrides)
    if not stages:
        return None
    cand, rules = stages[0]
    rule = (f"not given, and at ZeRO-{lay.zero} the run is refused ({refused}): ZeRO-{cand.zero}, the least "
            "sharding the stack runs it with (model/zero_open.py); give layout.zero to change it")
    return cand, (*rules, ("zero", rule))
