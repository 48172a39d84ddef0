"""Where the data-parallel gradient reduction runs, as the framework runs it (frameworks.json ``dp_overlap``):
``evaluate`` of a layout that leaves ``dp_overlap`` open takes what the framework does by default and says so under
``assumed``; the planner turns it on only where the framework can run it so."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.framework_comm import dp_overlap_of

_RUN = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=64, global_batch=256, seq_len=4096, tokens=1e10)


@pytest.mark.parametrize(("framework", "zero", "pp", "does", "can"), [
    # DeepSpeed's overlap_comm defaults to stage == 3 (deepspeed/runtime/zero/config.py overlap_comm_valid), an option
    # below it; its pipeline engine reduces after the last micro-batch whatever the option
    ("deepspeed", 2, 1, False, True), ("deepspeed", 3, 1, True, True), ("deepspeed", 1, 4, False, False),
    # Megatron-LM of 2021-22 all-reduced after forward_backward_func returned
    ("megatron-lm", 1, 1, False, False),
    # PyTorch DDP and FSDP reduce under the backward by their hooks; an unstated fact is read so
    ("pytorch-fsdp", 3, 1, True, True), ("generic", 0, 1, True, True), ("nanotron", 1, 2, True, True),
])
def test_dp_overlap_of_reads_the_framework(framework, zero, pp, does, can):
    assert dp_overlap_of(framework, zero, pp) == (does, can)


def _assumed(est) -> dict[str, str]:
    return {a["field"]: a["rule"] for a in est.to_json()["assumed"]}


def test_evaluate_takes_deepspeeds_default_and_says_so():
    below = gpuplan.evaluate(**_RUN, framework="deepspeed", zero=2)
    assert below.layout.dp_overlap is False
    assert "after the backward" in _assumed(below)["layout.dp_overlap"]
    # the same layout with the reduction under the backward is faster: the default costs what it costs
    told = gpuplan.evaluate(**_RUN, framework="deepspeed", zero=2, dp_overlap=True)
    assert told.time.step.step_s < below.time.step.step_s
    assert gpuplan.evaluate(**_RUN, framework="deepspeed", zero=3).layout.dp_overlap is True
    assert gpuplan.evaluate(**_RUN, framework="pytorch-fsdp", zero=2).layout.dp_overlap is True


def test_the_planner_sets_deepspeeds_option_but_not_what_cannot_run():
    assert gpuplan.plan(**_RUN, framework="deepspeed", zero=2).best.layout.dp_overlap is True
    # Megatron-LM of 2021-22 on a GPU of its era (on Hopper the name is its later code, Megatron-Core)
    assert gpuplan.plan(**{**_RUN, "gpu": "a100-80gb-sxm"}, framework="megatron-lm", zero=1).best.layout.dp_overlap \
        is False


def test_nanotron_gathers_zero1_parameters_after_the_step(monkeypatch):
    # nanotron's ZeroDistributedOptimizer.step all-gathers the updated parameters after the optimizer step
    # (frameworks.json dp_overlap.param_gather false): the next forward does not hide them
    from gpuplan.catalog.framework_comm import param_gather_hidden
    from gpuplan.model.caches import clear_model_caches

    assert param_gather_hidden("nanotron") is False and param_gather_hidden("megatron-core") is True
    kw = dict(_RUN, framework="nanotron", zero=1, tp=1, pp=1, micro_batch=1, global_batch=64, seq_len=1024)
    clear_model_caches()
    after = gpuplan.evaluate(**kw).time.step
    monkeypatch.setattr("gpuplan.model.dp_comm.param_gather_hidden", lambda fw: True)
    clear_model_caches()
    under = gpuplan.evaluate(**kw).time.step
    clear_model_caches()
    assert after.comm_detail["dp_exposed"] > under.comm_detail["dp_exposed"]


@pytest.mark.parametrize(("framework", "zero", "pp", "overlapped", "group", "per_call"), [
    # PyTorch DDP: bucket_cap_mb 25 MiB of the parameters' gradients — fp32 under mixed precision, 4 B each
    ("generic", 0, 1, True, 64, 25 * 2**20 / 4), ("hf-trainer", 0, 1, True, 8, 25 * 2**20 / 4),
    # nanotron's DDP sizes the buckets in its bf16 parameters' gradients (ddp_bucket_cap_mb = 25)
    ("nanotron", 0, 1, True, 64, 25 * 2**20 / 2),
    # Megatron-Core: max(40,000,000, 1,000,000 x dp) parameters under overlap_grad_reduce, no bucketing past the first
    # pipeline stage nor without the overlap
    ("megatron-core", 1, 1, True, 16, 40e6), ("megatron-core", 1, 1, True, 128, 128e6),
    ("megatron-core", 1, 2, True, 128, None), ("megatron-core", 0, 1, False, 128, None),
    # DeepSpeed's reduce_bucket_size, 5e8 elements
    ("deepspeed", 2, 1, False, 64, 5e8),
    # stated for ZeRO-0 only (DDP): ZeRO-1/2 one reduction of the whole buffer; Megatron-LM 2021 its whole buffer
    ("generic", 1, 1, True, 64, None), ("megatron-lm", 0, 1, False, 64, None), ("nanotron", 1, 1, True, 64, None),
])
def test_the_gradient_reduction_runs_in_the_framework_s_buckets(framework, zero, pp, overlapped, group, per_call):
    from gpuplan.catalog.framework_comm import grad_bucket_params

    assert grad_bucket_params(framework, zero, pp, overlapped, group, 4.0) == per_call


def test_buckets_cost_their_own_collectives_and_the_last_is_never_hidden():
    # a 1B under DDP on 64 H100s: its fp32 gradients in 25 MiB buckets take longer than one all-reduce of the whole
    # buffer — each bucket at the rate its size reaches, with its latency — and the last bucket, which starts when the
    # backward ends, is exposed however long the backward is
    from gpuplan.io.scenario import parse_scenario
    from gpuplan.model.comm import all_reduce_s
    from gpuplan.model.dp_comm import replica_comm
    from gpuplan.model.runtime import _pipeline
    from gpuplan.spec.job import per_step
    from gpuplan.spec.scenario import complete_layout

    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 64},
                         "training": {"seq_len": 4096, "global_batch": 256},
                         "layout": {"zero": 0, "tp": 1, "pp": 1, "micro_batch": 4}})
    lay, tr = complete_layout(sc), per_step(sc.training)
    p = _pipeline(sc.model, sc.hardware, tr, lay, sc.corrections, False)
    grads = 4 * p.sc.params.dense  # fp32 on the wire under bf16 mixed precision
    calls = -(-grads // (25 * 2**20))
    assert calls > 100
    dp = replica_comm(tr, lay, p.sc, p.topo, p.n_mb)
    one = all_reduce_s(grads / calls, 64, 1, p.topo)
    assert dp.total == pytest.approx(calls * one, rel=1e-12)
    assert dp.total > 1.5 * all_reduce_s(grads, 64, 1, p.topo)
    assert dp.exposed == pytest.approx(one, rel=1e-12)  # the backward hides all but the last bucket here
    assert dp.hidden == pytest.approx(dp.total - one, rel=1e-12)
