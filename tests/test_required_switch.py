"""A setting the user left open that their framework requires for what they stated is read as on: torchtitan runs
async TP only compiled (frameworks.json cannot_run ``async-tp-needs-compile``, torchtitan/distributed/
tensor_parallel.py maybe_enable_async_tp), so a torchtitan run stated with ``tp_overlap: true`` and no word on
torch.compile was compiled — read so and listed under ``assumed`` with the rule, not refused. A stated
``compile: false`` still gets the framework's refusal."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.errors import GpuplanError

_RUN = dict(model="llama-3.1-70b", gpu="h100-sxm", gpus=64, seq_len=8192, global_batch=64, framework="torchtitan",
            dp=8, zero=3, tp=8, micro_batch=1, recompute="full", sequence_parallel=True)


def test_async_tp_with_compile_open_is_read_as_compiled():
    est = gpuplan.evaluate(**_RUN, tp_overlap=True)
    assert est.scenario.training.compile and est.layout.tp_overlap
    said = [a for a in est.to_json()["assumed"] if a["field"] == "training.compile"]
    assert len(said) == 1 and said[0]["value"] is True
    assert "Async TP requires" in said[0]["rule"] and "layout.tp_overlap" in said[0]["given"]
    # the same run stated compiled is the same answer
    told = gpuplan.evaluate(**_RUN, tp_overlap=True, compile=True)
    assert est.time.step.step_s == told.time.step.step_s


def test_a_stated_compile_false_is_refused_by_the_framework():
    with pytest.raises(GpuplanError, match="async TP requires torch.compile"):
        gpuplan.evaluate(**_RUN, tp_overlap=True, compile=False)


def test_nothing_is_read_where_nothing_requires_it():
    for kw in ({"tp_overlap": False}, {}):
        est = gpuplan.evaluate(**_RUN, **kw)
        assert not est.scenario.training.compile
        assert not [a for a in est.to_json()["assumed"] if a["field"] == "training.compile"]
    # another framework's overlap needs no compile (Megatron-Core's userbuffers)
    est = gpuplan.evaluate(**{**_RUN, "framework": "megatron-core"}, tp_overlap=True)
    assert not est.scenario.training.compile


# the same name over two eras of code: frameworks.json megatron-lm ``successor`` (Megatron-LM README: Megatron-Core
# behind its training scripts since 2023)
_MEG = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, seq_len=4096, global_batch=64)


def test_megatron_lm_with_what_only_megatron_core_runs_is_megatron_core():
    for word, kw in (("Megatron-LM", {"precision": "fp8"}), ("megatron-lm", {"cp": 2, "dp": 4})):
        est = gpuplan.evaluate(**_MEG, framework=word, **kw)
        assert est.scenario.training.framework == "megatron-core"
        said = [a for a in est.to_json()["assumed"] if a["field"] == "training.framework"]
        assert len(said) == 1 and said[0]["value"] == "megatron-core" and "cannot run this" in said[0]["rule"]
    # the same answer as naming it, with the launcher's allocator (Megatron-LM's scripts set no expandable segments)
    named = gpuplan.evaluate(**_MEG, framework="megatron-core", precision="fp8", expandable_segments=False)
    read = gpuplan.evaluate(**_MEG, framework="megatron-lm", precision="fp8")
    assert read.scenario.training.fp8_recipe == named.scenario.training.fp8_recipe == "delayed"
    assert read.time.step.step_s == named.time.step.step_s
    assert read.memory.total == named.memory.total


def test_megatron_lm_that_the_2020_22_code_runs_stays_and_other_names_keep_their_refusal():
    est = gpuplan.evaluate(**{**_MEG, "gpu": "a100-80gb-sxm"}, framework="megatron-lm")
    assert est.scenario.training.framework == "megatron-lm"
    # on a GPU after the code's era (Hopper) the name is the later code, said with the reason
    later = gpuplan.evaluate(**_MEG, framework="megatron-lm").to_json()
    (said,) = [a for a in later["assumed"] if a["field"] == "training.framework"]
    assert said["value"] == "megatron-core" and "predates hopper" in said["rule"]
    # Megatron-DeepSpeed is the 2020-22 code by name: no later code to read it as
    with pytest.raises(GpuplanError, match="fp16/bf16 only"):
        gpuplan.evaluate(**_MEG, framework="megatron-deepspeed", precision="fp8")
