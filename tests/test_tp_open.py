"""An open tensor-parallel degree under sequence parallelism given on (model/tp_open.py)."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError


def _sc(gpus=2048, **layout):
    # LLaMA (Touvron et al. 2023, Sec. 2.4): "model and sequence parallelism", degrees not stated
    return make("llama-65b", "a100-80gb-sxm", gpus, training={"seq_len": 2048, "global_batch": 2048},
                layout={"sequence_parallel": True, **layout})


def _assumed(est, field):
    return [a for a in est.to_json()["assumed"] if a["field"] == field]


def test_sequence_parallel_with_tp_open_reads_the_fastest_degree_that_fits():
    est = evaluate(_sc())
    assert est.layout.tp > 1 and est.layout.sequence_parallel and est.memory.fits
    # no power of two inside the node (8 A100s) that fits is faster: each read as evaluate reads it
    for tp in (2, 4, 8):
        other = evaluate(_sc(tp=tp))
        assert not other.memory.fits or other.time.tokens_per_s <= est.time.tokens_per_s * (1 + 1e-12)
        if tp == est.layout.tp:
            assert other.layout == est.layout
    (rule,) = _assumed(est, "layout.tp")
    assert rule["value"] == est.layout.tp and "tp_open.py" in rule["rule"]


def test_a_given_dp_leaves_one_degree_and_a_given_tp_stays():
    # 2048 GPUs at dp 256: tp 8, the only degree inside the node
    assert evaluate(_sc(dp=256)).layout.tp == 8
    assert evaluate(_sc(tp=2)).layout.tp == 2
    # without sequence parallelism an open tp keeps its default
    plain = make("llama-65b", "a100-80gb-sxm", 2048, training={"seq_len": 2048, "global_batch": 2048})
    assert evaluate(plain).layout.tp == 1


def test_no_degree_to_choose_is_the_layout_error():
    # one GPU: sequence parallelism still needs tp > 1, said as before
    with pytest.raises(GpuplanError, match="sequence_parallel needs tp > 1"):
        evaluate(_sc(gpus=1))
