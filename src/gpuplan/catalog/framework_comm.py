"""The communication facts of a framework profile (frameworks.json), one question each, for the step's time: whether
an interleaved pipeline hides its send/recv, whether sequence-parallel collectives copy their tensors' layout, how
ZeRO-3 gathers the parameters. catalog/frameworks.py reads the file."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuplan.catalog.frameworks import get_framework


@cache
def overlaps_pp_comm(framework: str) -> bool:
    """Whether the framework's interleaved pipeline schedule overlaps its send/recv with the chunks' compute
    (catalog/frameworks.json ``pp_comm_overlap``; an unstated fact is no overlap)."""
    return get_framework(framework).pp_comm_overlap.value is True


@cache
def sp_layout_copies(framework: str) -> bool:
    """Whether the framework's sequence-parallel collectives gather and scatter along a dimension other than the
    first, so each copies its tensor into or out of NCCL's contiguous layout (frameworks.json
    ``tp_comm_overlap.layout_copies``: torchtitan's DTensor plan shards [batch, sequence, hidden] activations on the
    sequence); Megatron's [sequence, batch, hidden] activations gather and scatter in place."""
    return get_framework(framework).tp_comm_overlap["layout_copies"].value is True


@cache
def dp_overlap_of(framework: str, zero: int, pp: int) -> tuple[bool, bool]:
    """(what the framework does, what it can be set to do): whether its data-parallel gradient reduction runs under
    the backward (frameworks.json ``dp_overlap``). ``grad_reduce`` is what it does (unstated: under the backward, as
    PyTorch DDP's and FSDP's hooks do), ``grad_reduce_zero3`` under ZeRO-3 where that differs (DeepSpeed's
    ``overlap_comm`` defaults to stage == 3), ``grad_reduce_option`` whether an option turns it on where it is off;
    a pipeline whose engine reduces after the last micro-batch (``pipeline_grad_reduce``: DeepSpeed's TrainSchedule)
    never overlaps it. Megatron-LM of 2021-22 all-reduced after forward_backward_func returned."""
    dpo = get_framework(framework).dp_overlap

    def fact(key: str) -> object:
        f = dpo.get(key)
        return None if f is None else f.value

    if pp > 1 and fact("pipeline_grad_reduce") == "after the last micro-batch":
        return False, False
    does = fact("grad_reduce_zero3") if zero >= 3 and fact("grad_reduce_zero3") is not None else fact("grad_reduce")
    done = does is not False
    return done, done or fact("grad_reduce_option") is True


@cache
def _grad_bucket(framework: str) -> dict[str, Any] | None:
    fact = get_framework(framework).dp_overlap.get("grad_bucket")
    return None if fact is None or fact.value is None else dict(fact.value)


def grad_bucket_params(framework: str, zero: int, pp: int, overlapped: bool, group: int,
                       bytes_per_param: float) -> float | None:
    """The parameters one collective of the data-parallel gradient reduction carries where the framework reduces in
    buckets (frameworks.json ``dp_overlap.grad_bucket``: PyTorch DDP's 25 MiB at ZeRO-0, Megatron-Core's
    max(40M, 1M × dp) parameters under overlap_grad_reduce without a pipeline, DeepSpeed's 5e8 elements), for a
    ``group``-rank reduction of ``bytes_per_param`` per gradient; None where it reduces its whole buffer at once or
    states nothing."""
    b = _grad_bucket(framework)
    if b is None or zero not in b["zero"] or pp > b.get("pp", pp) or (b.get("overlapped") and not overlapped):
        return None
    if "bytes" in b:  # of the parameters' gradients, or where stated, of the parameter dtype's (nanotron's bf16)
        return float(b["bytes"]) / b.get("param_bytes", bytes_per_param)
    if "elements" in b:
        return float(b["elements"])
    return float(max(b["params"], b["params_per_dp"] * group))


@cache
def param_gather_hidden(framework: str) -> bool:
    """Whether ZeRO-1/2's all-gather of the updated parameters can run under the next forward (frameworks.json
    ``dp_overlap.param_gather``: Megatron-Core's ``overlap_param_gather``); False where the framework states it
    gathers after the optimizer step (nanotron's ZeroDistributedOptimizer.step), unstated read as under it."""
    fact = get_framework(framework).dp_overlap.get("param_gather")
    return fact is None or fact.value is not False


@cache
def tp_overlap_offered(framework: str) -> bool:
    """Whether the framework can overlap its tensor-parallel collectives with the matmuls (frameworks.json
    ``tp_comm_overlap.supported``): Megatron-Core (TE userbuffers, ``--tp-comm-overlap``), torchtitan (async TP under
    torch.compile), nanotron (``tp_linear_async_communication``); its cannot-run rules say where it may not."""
    return get_framework(framework).tp_comm_overlap["supported"].value is True


@cache
def zero3_gather_of(framework: str) -> str:
    """How the framework's ZeRO-3 gathers parameters when the layout leaves it open (frameworks.json ``zero3_gather``:
    DeepSpeed one submodule at a time through its module hooks; FSDP one wrapped block at a time), else per block."""
    value = get_framework(framework).zero3_gather.value
    return value if isinstance(value, str) else "layer"


