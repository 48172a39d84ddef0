"""The optimizer in backward (training.optimizer_in_backward; torchtune's optimizer_in_bwd): each parameter's
step runs from its post-accumulate-grad hook and frees its gradient, so a step holds one parameter's gradient
at a time — and cannot accumulate gradients over micro-batches (torchtune's recipes raise 'Gradient
accumulation is not supported with optimizer in bwd')."""

from __future__ import annotations

import pytest
from conftest import make, mem

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

TUNE = {"framework": "torchtune", "seq_len": 2048, "tokens": 1e8}


def test_one_parameters_gradient_is_held_the_largest():
    m = load_model("llama-3.1-8b")
    # activation checkpointing on, as torchtune's full fine-tune configs: without it one GPU's peak is the start of
    # backward, before any gradient exists, with or without the optimizer in backward
    lay = {"micro_batch": 2, "recompute": "full"}
    on = mem(gpus=1, training={**TUNE, "optimizer_in_bwd": True}, layout=lay)
    off = mem(gpus=1, training={**TUNE, "global_batch": 2, "optimizer_in_backward": False}, layout=lay)
    # torchtune trains in pure bf16: 2 B per gradient; the largest parameter is the 128,256 x 4,096 embedding
    assert on["gradients"] == 2 * m.vocab * m.hidden == 1_050_673_152
    assert off["gradients"] == pytest.approx(2 * m.params)
    assert on["weights"] == off["weights"] and on["optimizer"] == off["optimizer"]
    assert on["total"] < off["total"] - 10 * 2**30  # 15 GB of gradients gone; the peak moves to the loss


def test_sharded_the_held_gradient_is_a_shard():
    # FSDP over 8 (torchtune's distributed recipe): the embedding's gradient shard, 1/8 of it
    on = mem(gpus=8, training={**TUNE, "optimizer_in_backward": True}, layout={"micro_batch": 1})
    m = load_model("llama-3.1-8b")
    assert on["gradients"] == pytest.approx(2 * m.vocab * m.hidden / 8)


def test_an_open_global_batch_is_one_micro_batch_per_step():
    est = evaluate(make(gpus=4, training={**TUNE, "optimizer_in_backward": True}, layout={"micro_batch": 3}))
    out = est.to_json()
    assert out["scenario"]["training"]["global_batch"] == 12 and out["scenario"]["training"]["optimizer_in_backward"]
    rule = next(a["rule"] for a in out["assumed"] if a["field"] == "training.global_batch")
    assert "one micro-batch per step" in rule


def test_a_given_global_batch_with_the_micro_batch_open_is_one_micro_batch_per_step():
    # 12 sequences over 4 replicas, stepped in backward: the per-replica 3 is the micro-batch
    est = evaluate(make(gpus=4, training={**TUNE, "optimizer_in_backward": True, "global_batch": 12}))
    assert est.layout.micro_batch == 3
    rule = next(a["rule"] for a in est.to_json()["assumed"] if a["field"] == "layout.micro_batch")
    assert "optimizer steps in backward" in rule


@pytest.mark.parametrize("training, layout, words", [
    ({"global_batch": 8}, {"micro_batch": 2}, "micro_batch = global_batch / dp = 8"),
    ({}, {"micro_batch": 1, "pp": 2, "dp": 1}, "set pp: 1"),
    ({"method": "lora"}, {}, "method is lora"),
])
def test_what_it_cannot_run_is_refused_with_the_fix(training, layout, words):
    with pytest.raises(GpuplanError, match=words):
        evaluate(make(gpus=2 if "pp" in layout else 1,
                      training={**TUNE, "optimizer_in_backward": True, **training}, layout=layout))


def test_the_planner_searches_only_what_it_can_run():
    sc = make(training={**TUNE, "optimizer_in_backward": True, "global_batch": 16})
    res = plan_scenario(sc, max_gpus=16).result
    assert res.candidates
    for c in res.candidates:
        assert c.layout.pp == 1 and c.layout.dp * c.layout.micro_batch == 16


def test_a_plan_takes_a_fine_tunes_batch_and_exports_say_what_they_cannot_write():
    from gpuplan.export import export

    sc = make(training={"optimizer_in_backward": True, "seq_len": 2048})
    res = plan_scenario(sc, max_gpus=8).result
    assert res.candidates[0].layout.dp * res.candidates[0].layout.micro_batch == 32  # torchtune's batch of 32
    est = evaluate(make(gpus=8, training={"optimizer_in_backward": True, "tokens": 1e8},
                        layout={"micro_batch": 1})).to_json()
    ex = export(est, "accelerate")
    assert any("optimizer_in_backward" in n and "is not written" in n for n in ex.notes)
