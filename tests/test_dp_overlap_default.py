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
