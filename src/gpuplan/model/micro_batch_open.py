"""An open ``layout.micro_batch`` where the run's global batch is given.

Megatron-LM and Megatron-Core (``--micro-batch-size`` has no default: the launch script gives it) and nanotron (its
``micro_batch_size``, likewise required) leave the micro-batch to the run's authors, who size it for throughput
within memory — Narayanan et al. 2021 (arXiv:2104.04473, Sec. 3.4 and Fig. 16): the best micro-batch depends on the
model and, under a pipeline, on the bubble the fewer micro-batches leave. So a run described under these stacks
without its micro-batch is read at the fastest power of two that divides its per-replica batch and fits (``fits``:
the peak's interval upper end, the headroom kept), at the ZeRO stage and recomputation read before it
(model/zero_open.py, model/recompute_open.py); a tie goes to the smaller.

Every other stack accumulates no gradients unless told to (DeepSpeed's gradient_accumulation_steps default 1,
frameworks.json ``defaults.gradient_accumulation_steps``, its micro-batch then the train batch over the ranks; the
Hugging Face Trainer's TrainingArguments.gradient_accumulation_steps default 1; torchtitan's local batch is the
per-rank batch, global_batch_size -1; Composer's device_train_microbatch_size None is the device batch): a run given
by its global batch alone ran its per-replica batch as one micro-batch — read so where it fits; where it does not,
the run accumulated, and the micro-batch is read as under the script-sized stacks. Under a pipeline such a stack's
micro-batch count is its own setting (DeepSpeed's PipelineEngine runs gradient_accumulation_steps micro-batches,
torchtitan one per stage by default): not read here, the layout default stays. Both need a given global batch (the
per-replica batch is then the run's); the answer lists the reading under ``assumed``. A given micro-batch, or a
layout that does not fit at one, is never changed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.catalog.frameworks import get_framework
from gpuplan.catalog.refusals import why_not
from gpuplan.model.memory import MemoryBreakdown, memory
from gpuplan.model.runtime import step_time
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario

LARGEST = 128  # the largest micro-batch tried: past it a step's GEMMs are as large as they get


def open_micro_batch(sc: Scenario, lay: Layout, mem: MemoryBreakdown, overrides: dict[str, Any]
                     ) -> tuple[Layout, MemoryBreakdown, str | None]:
    """``lay`` and its memory, or — micro-batch open under a script-sized stack, the global batch given, ``lay``
    fitting — the layout at the fastest power-of-two micro-batch that fits, its memory and the rule (None:
    unchanged)."""
    tr = sc.training
    if "micro_batch" in sc.layout or "micro_batch" in overrides or not mem.fits or tr.global_batch is None \
            or not ({"training.global_batch", "training.global_batch_tokens"} & sc.given):
        return lay, mem, None
    replicas = lay.dp
    if tr.global_batch % (replicas * lay.micro_batch):
        return lay, mem, None
    per = tr.global_batch // replicas
    if not script_sized(tr.framework):
        if lay.pp > 1:  # the stack's own count of pipeline micro-batches: not read here (the layout default)
            return lay, mem, None
        if (whole := _whole(sc, lay, mem, per)) is not None:
            return whole
    best, best_mem = lay, mem
    best_s = step_time(sc.model, sc.hardware, tr, lay, sc.corrections).step_s
    size = lay.micro_batch * 2
    while size <= min(per, LARGEST):
        cand = replace(lay, micro_batch=size)
        if per % size == 0 and not why_not(tr.framework, cand.values(), tr, sc.model):
            m = memory(sc.model, sc.hardware, tr, cand, sc.corrections)
            if not m.fits:  # the peak grows with the micro-batch: no larger one fits
                break
            s = step_time(sc.model, sc.hardware, tr, cand, sc.corrections).step_s
            if s < best_s:
                best, best_mem, best_s = cand, m, s
        size *= 2
    if best is lay:
        return lay, mem, None
    why = (f"{tr.framework}'s launch script gives the micro-batch (no default)" if script_sized(tr.framework) else
           f"the {per:,}-sequence per-replica batch does not fit as one micro-batch, so the run accumulated")
    rule = (f"not given: {why}, and a run sizes it for throughput within memory: {best.micro_batch}, the fastest power "
            f"of two that divides the {per:,}-sequence per-replica batch and fits (model/micro_batch_open.py); give "
            "layout.micro_batch to change it")
    return best, best_mem, rule


def _whole(sc: Scenario, lay: Layout, mem: MemoryBreakdown, per: int
           ) -> tuple[Layout, MemoryBreakdown, str | None] | None:
    """The layout with its per-replica batch as one micro-batch (no accumulation, the stack's default), its memory and
    the rule — where the stack runs it and it fits; else None."""
    if per == lay.micro_batch:
        return lay, mem, None
    cand = replace(lay, micro_batch=per)
    if why_not(sc.training.framework, cand.values(), sc.training, sc.model):
        return None
    m = memory(sc.model, sc.hardware, sc.training, cand, sc.corrections)
    if not m.fits:
        return None
    rule = (f"not given: {sc.training.framework} accumulates no gradients unless told to (gradient accumulation "
            f"steps 1 by default), so the {per:,}-sequence per-replica batch ran as one micro-batch "
            "(model/micro_batch_open.py); give layout.micro_batch to change it")
    return cand, m, rule


def script_sized(framework: str) -> bool:
    """Whether the stack's launch script must give the micro-batch: frameworks.json documents its micro_batch default
    as none (Megatron-LM, Megatron-Core: --micro-batch-size default None; nanotron: micro_batch_size required)."""
    fact = get_framework(framework).defaults.get("micro_batch")
    return fact is not None and fact.value is None and fact.source is not None
