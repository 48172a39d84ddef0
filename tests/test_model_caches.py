"""The model's caches can be emptied (what `gpuplan serve` does every thousand answers, so a server answering
distinct scenarios keeps flat memory) and an answer after emptying is the answer before, to the byte."""

from __future__ import annotations

import json

from conftest import make

from gpuplan.api import evaluate_scenario
from gpuplan.model.act_parts import activation_parts
from gpuplan.model.activations import layer_bytes
from gpuplan.model.caches import clear_model_caches
from gpuplan.model.memory import model_states


def test_emptied_caches_give_the_same_answer():
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"seq_len": 4096, "global_batch": 64})
    before = json.dumps(evaluate_scenario(sc).to_json(), sort_keys=True)
    assert model_states.cache_info().currsize > 0 and activation_parts.cache_info().currsize > 0
    assert clear_model_caches() >= 5
    assert model_states.cache_info().currsize == activation_parts.cache_info().currsize == 0
    assert layer_bytes.cache_info().currsize == 0
    assert json.dumps(evaluate_scenario(sc).to_json(), sort_keys=True) == before


def test_the_server_empties_them_every_thousand_answers(monkeypatch):
    from gpuplan.serve import pool

    calls = []
    monkeypatch.setattr("gpuplan.api.clear_model_caches", lambda: calls.append(1) or 0)
    monkeypatch.setattr(pool, "_count", [0])
    for _ in range(2 * pool.CLEAR_EVERY + 1):
        pool._answered()
    assert len(calls) == 2


def test_a_folded_expert_layout_is_timed_alike_whatever_was_cached_before():
    # whether the experts fold (Layout.folded_etp: ep 4 does not divide dp × cp = 2) changes a stage's parameters and
    # its expert matmuls; the stage compute is cached across dp, so its key must carry the folding — a dp 4 layout of
    # the same degrees (not folded) sized first must not answer for it
    import gpuplan

    kw = dict(model="mixtral-8x7b", gpu="h100-sxm", seq_len=4096, zero=1, micro_batch=1, tp=2, ep=4, pp=1,
              global_batch=8)
    clear_model_caches()
    fresh = gpuplan.evaluate(gpus=4, **kw)
    clear_model_caches()
    unfolded = gpuplan.evaluate(gpus=8, **kw)
    after = gpuplan.evaluate(gpus=4, **kw)
    assert fresh.layout.folded_etp == 1 and unfolded.layout.folded_etp is None
    assert after.time.step.step_s == fresh.time.step.step_s


# one layout field changed at a time (base layout: Llama-3.1-8B on 32 H100, tp 2, pp 2): the model's memo tables are
# shared across layouts, so each must key on every field its value reads — an answer never depends on what was
# evaluated before it
_BASE = {"tp": 2, "pp": 2, "zero": 1, "micro_batch": 1, "recompute": "none", "sequence_parallel": True}
_CHANGED = [{"zero": 2}, {"zero": 3}, {"zero": 3, "zero3_gather": "module"}, {"zero": 3, "zero_group": 8},
            {"micro_batch": 2}, {"recompute": "full"}, {"recompute": "full", "recompute_every": 2},
            {"recompute": "selective-op"}, {"sequence_parallel": False}, {"pp_schedule": "interleaved"},
            {"offload": "optimizer"}, {"dp_overlap": False}, {"tp_overlap": True}, {"tp": 4}, {"pp": 4}, {"cp": 2}]


def _answer(layout: dict) -> str:
    import gpuplan

    est = gpuplan.evaluate({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 32},
                            "training": {"seq_len": 4096, "global_batch": 64}, "layout": layout})
    return json.dumps(est.to_json(), sort_keys=True)


def test_every_layout_field_keys_the_model_caches():
    for change in _CHANGED:
        other = {**_BASE, **change}
        for first, second in ((_BASE, other), (other, _BASE)):
            clear_model_caches()
            fresh = _answer(first)
            clear_model_caches()
            _answer(second)
            assert _answer(first) == fresh, (change, first)
