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
