"""A torch.distributed.pipelining rank's stage buffers (torchtitan): a receive buffer per micro-batch of the step on
every stage but the first, a gradient receive buffer per micro-batch on every stage but the last, and each in-flight
micro-batch's stage output until its backward (torch/distributed/pipelining/stage.py _prepare_forward_infra,
_prepare_backward_infra, fwd_cache). Megatron receives into a fresh tensor and deallocates sent outputs: none."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.framework_memory import keeps_stage_buffers
from gpuplan.model import memory
from gpuplan.model.pipeline import flight_of, stage_io_bytes

S, H = 8192, 8192  # Llama 3.1 70B's hidden size
_LAYOUTS: dict = {}


def _scenario(framework: str, schedule: str = "1f1b", mb: int = 1, v: int = 1):
    return make("llama-3.1-70b", "h100-sxm", 64, training={"seq_len": S, "global_batch": 64, "framework": framework,
                                                          "tokens": 1e9},
                layout={"dp": 2, "tp": 8, "pp": 4, "zero": 1 if framework != "torchtitan" else 3, "micro_batch": mb,
                        "recompute": "full", "sequence_parallel": True, "pp_schedule": schedule,
                        **({"virtual_stages": v} if v > 1 else {})})


def test_only_torch_pipelining_keeps_them():
    assert keeps_stage_buffers("torchtitan")
    assert not any(keeps_stage_buffers(f) for f in ("megatron-core", "megatron-lm", "nanotron", "deepspeed", "generic"))
    sc = _scenario("megatron-core")
    assert stage_io_bytes(sc.model, sc.training, evaluate(sc).layout, 1, 1, 32, 3) == 0.0


def test_one_f_one_b_in_units_of_one_stage_input():
    sc = _scenario("torchtitan")
    lay = evaluate(sc).layout
    unit = 2 * 1 * S * H / 8  # bf16, micro-batch 1, the sequence shard of tp 8
    n_mb = 64 // 2  # global batch over dp
    io = [stage_io_bytes(sc.model, sc.training, lay, s, 1, n_mb, flight_of(4, "1f1b", 1, s, n_mb))
          for s in range(4)]
    # first stage: a gradient buffer per micro-batch and its 4 outputs in flight; middle: 2 per micro-batch;
    # last: the receive buffers of the micro-batches not in flight (one is)
    assert io == [(32 + 4) * unit, 64 * unit, 64 * unit, (32 - 1) * unit]


def test_interleaved_counts_each_stage_of_the_rank():
    sc = _scenario("torchtitan", "interleaved", v=2)
    unit = 2 * S * H / 8
    f = flight_of(4, "interleaved", 2, 1, 32)
    assert stage_io_bytes(sc.model, sc.training, evaluate(sc).layout, 1, 1, 32, f) == 2 * 2 * 32 * unit


def test_they_are_communication_buffers_of_the_peak(monkeypatch):
    with_io = evaluate(_scenario("torchtitan")).to_json()["memory"]
    monkeypatch.setattr(memory, "stage_io_bytes", lambda *a: 0.0)
    without = evaluate(_scenario("torchtitan")).to_json()["memory"]
    assert with_io["stage"] == without["stage"] == 3  # the last stage (the LM head's logits) is the most loaded
    unit = 2 * S * H / 8
    # its receive buffers of the micro-batches not in flight: 32 − 1
    assert with_io["detail"]["comm_buffers"] - without["detail"]["comm_buffers"] == pytest.approx((32 - 1) * unit)
    assert with_io["allocated"] > without["allocated"]


@settings(max_examples=80, deadline=None)
@given(p=st.sampled_from([2, 4, 8]), v=st.sampled_from([1, 2]), batch=st.sampled_from([16, 32, 64, 128]),
       stage=st.integers(0, 7))
def test_never_falls_as_the_micro_batch_grows_but_on_the_last_stage(p, v, batch, stage):
    # the planner sizes a family's micro-batches as a prefix: a stage's buffers must not fall as they grow —
    # (n_mb buffers of mb sequences) is the batch, the in-flight outputs grow; the last stage's "− 1" is one
    # micro-batch's input, far below what its logits add per sequence
    stage %= p
    sc = _scenario("torchtitan", "interleaved" if v > 1 else "1f1b", v=v)
    sched = "interleaved" if v > 1 else "1f1b"
    lay = replace(_LAYOUTS.setdefault(v, evaluate(sc).layout), pp=p, virtual_stages=v)
    sizes = [stage_io_bytes(sc.model, sc.training, lay, stage, mb, batch // mb,
                            flight_of(p, sched, v, stage, batch // mb)) for mb in (1, 2, 4, 8)]
    if stage == p - 1:  # falls by one stage input as the micro-batch doubles
        assert all(a - b <= 2 * S * H / 8 * mb for (a, b), mb in zip(zip(sizes, sizes[1:], strict=False), (1, 2, 4),
                                                                       strict=True))
    else:
        assert sizes == sorted(sizes)
