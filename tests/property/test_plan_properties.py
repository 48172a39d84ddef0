"""Invariants of ``plan`` (hypothesis): what it returns fits and is consistent, however it is asked."""

from __future__ import annotations

from functools import cache

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import plan_scenario as plan
from gpuplan.search.rank import DEFAULT_COST_HORIZON_S
from gpuplan.spec.defaults import SAME_SPEED

MODELS = ["llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "llama-3.1-8b", "mixtral-8x7b"]
GPUS = ["h100-sxm", "a100-80gb", "mi300x", "l4"]
NETWORKS = ["ib-ndr-400g", "roce-100g", "eth-10g"]
SETTINGS = settings(max_examples=15, deadline=None)


@cache
def _plan(model: str, gpu: str, max_gpus: int, net: str, seq: int, threshold: float = 0.8,
          objective: str = "time") -> dict:
    sc = make(model, gpu, None, hardware={"scale_out": net}, training={"seq_len": seq, "tokens": 1e10})
    return plan(sc, max_gpus=max_gpus, top_k=100, threshold=threshold, objective=objective).to_json()


case = st.tuples(st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from([16, 32, 64]),
                 st.sampled_from(NETWORKS), st.sampled_from([1024, 4096]))


def _estimates(res: dict) -> list[dict]:
    return ([res["best"]] if res["best"] else []) + res["candidates"] + [r["best"] for r in res["scaling"]]


@SETTINGS
@given(c=case)
def test_every_returned_estimate_fits_and_is_a_whole_layout(c):
    model, gpu, max_gpus, net, seq = c
    res = _plan(*c)
    ests = _estimates(res)
    assert ests, "every case in this grid fits somewhere"
    for e in ests:
        lay, hw, tr = e["scenario"]["layout"], e["scenario"]["hardware"], e["scenario"]["training"]
        assert e["memory"]["fits"] is True
        assert e["memory"]["total"] <= e["memory"]["capacity"]
        assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == hw["gpus"]
        assert hw["gpus"] <= max_gpus
        assert hw["gpus"] <= hw["gpus_per_node"] or hw["gpus"] % hw["gpus_per_node"] == 0
        assert tr["global_batch"] == res["global_batch"]
        assert tr["global_batch"] % (lay["dp"] * lay["micro_batch"]) == 0
        assert tr["seq_len"] == seq
        assert e["time"]["tokens_per_s"] > 0


@SETTINGS
@given(c=case)
def test_candidates_are_ranked_and_agree_with_the_curve(c):
    res = _plan(*c)
    tps = [e["time"]["tokens_per_s"] for e in res["candidates"]]
    assert tps == sorted(tps, reverse=True)
    assert res["best"] == res["candidates"][0]
    # with room for every count, the candidates are the curve's per-count bests up to the compute equilibrium
    # (the rule without a deadline or budget: no count past it is recommended), ranked by speed
    eq = res["equilibrium"]["gpus"]
    assert res["recommendation"]["rule"] == "equilibrium"
    by_count = {r["gpus"]: r["best"]["time"]["tokens_per_s"] for r in res["scaling"] if r["gpus"] <= eq}
    assert {e["scenario"]["hardware"]["gpus"]: e["time"]["tokens_per_s"] for e in res["candidates"]} == by_count
    gpu_id = res["scaling"][0]["gpu"]
    assert res["min_gpus"][gpu_id] == res["scaling"][0]["gpus"] == min(by_count)
    cheap = _plan(*c, objective="cost")
    usd = [e["cost"]["usd"] for e in cheap["candidates"]]
    assert usd == sorted(usd)
    assert all(e["scenario"]["hardware"]["gpus"] <= eq for e in cheap["candidates"])
    # the cheapest that finishes within the cost horizon (search/rank.py DEFAULT_COST_HORIZON_S: a quarter), where one
    # does: a cheaper count past it (2 L4s for a Mixtral, 115 days) is not the answer
    within = [e for e in res["candidates"] if e["time"]["train_s"] <= DEFAULT_COST_HORIZON_S] or res["candidates"]
    assert cheap["best"]["cost"]["usd"] == min(e["cost"]["usd"] for e in within)


@SETTINGS
@given(c=case, threshold=st.sampled_from([0.5, 0.7, 0.8, 0.9, 1.0]))
def test_scaling_curve_and_equilibrium(c, threshold):
    res = _plan(*c, threshold=threshold)
    rows = res["scaling"]
    counts = [r["gpus"] for r in rows]
    assert counts == sorted(set(counts))
    assert rows[0]["speedup"] == 1.0
    n0, t0 = rows[0]["gpus"], rows[0]["best"]["time"]["tokens_per_s"]
    for r in rows:
        assert r["best"]["scenario"]["hardware"]["gpus"] == r["gpus"]
        assert r["speedup"] == pytest.approx(r["best"]["time"]["tokens_per_s"] / t0, rel=1e-12)
        assert r["efficiency"] == pytest.approx(r["speedup"] * n0 / r["gpus"], rel=1e-12)
    eq = res["equilibrium"]["gpus"]
    assert eq in counts
    # counts slower than a smaller count, or beaten by a larger one on efficiency too, stay on the
    # curve but are skipped by the equilibrium
    effs = [r["efficiency"] for r in rows]
    better = [r for k, r in enumerate(rows) if r["improves"] and (k == 0 or max(effs[k + 1:], default=0) <= effs[k])]
    i = [r["gpus"] for r in better].index(eq)
    assert all(r["efficiency"] >= threshold for r in better[1:i + 1])
    if i + 1 < len(better):
        assert better[i + 1]["efficiency"] < threshold
        assert res["equilibrium"]["next_gpus"] == better[i + 1]["gpus"]
    # each weighed step's marginal efficiency: what the added GPUs bring, as a share of what they would
    # at the previous weighed count's per-GPU rate
    tps = [r["best"]["time"]["tokens_per_s"] for r in better]
    for k in range(1, len(better)):
        m = (tps[k] / tps[k - 1] - 1) / (better[k]["gpus"] / better[k - 1]["gpus"] - 1)
        assert better[k]["marginal_efficiency"] == pytest.approx(m, rel=1e-9)
    if i > 0:
        assert res["equilibrium"]["marginal_efficiency"] == pytest.approx(better[i]["marginal_efficiency"])
    fastest = 0.0
    for r in rows:
        assert r["improves"] == (r["best"]["time"]["tokens_per_s"] > fastest)
        fastest = max(fastest, r["best"]["time"]["tokens_per_s"])
    # a stricter threshold never moves the equilibrium to more GPUs
    assert _plan(*c, threshold=1.0)["equilibrium"]["gpus"] <= eq <= _plan(*c, threshold=0.5)["equilibrium"]["gpus"]


@SETTINGS
@given(c=case, cut=st.floats(0.0, 1.0))
def test_deadline_and_budget_pick_within_the_limit(c, cut):
    model, gpu, max_gpus, net, seq = c
    every = [r["best"] for r in _plan(*c)["scaling"]]  # every count (a deadline or budget may pass the equilibrium)
    times = sorted(e["time"]["train_s"] for e in every)
    costs = sorted(e["cost"]["usd"] for e in every)
    deadline = times[0] + cut * (times[-1] - times[0])
    budget = costs[0] + cut * (costs[-1] - costs[0])
    sc = make(model, gpu, None, hardware={"scale_out": net}, training={"seq_len": seq, "tokens": 1e10})
    by_deadline = plan(sc, max_gpus=max_gpus, top_k=100, deadline_s=deadline).to_json()
    in_time = [e for e in every if e["time"]["train_s"] <= deadline]
    assert in_time  # the fastest always makes it
    assert all(e["time"]["train_s"] <= deadline for e in by_deadline["candidates"])
    assert by_deadline["best"]["cost"]["usd"] == min(e["cost"]["usd"] for e in in_time)
    by_budget = plan(sc, max_gpus=max_gpus, top_k=100, budget=budget).to_json()
    within = [e for e in every if e["cost"]["usd"] <= budget]
    assert within  # the cheapest always makes it
    assert all(e["cost"]["usd"] <= budget for e in by_budget["candidates"])
    # the fastest within the budget, where throughputs within SAME_SPEED of it are one speed: the cheapest of those
    fastest = max(e["time"]["tokens_per_s"] for e in within)
    near = [e for e in within if e["time"]["tokens_per_s"] >= fastest * (1 - SAME_SPEED)]
    assert by_budget["best"]["time"]["tokens_per_s"] >= fastest * (1 - SAME_SPEED)
    assert by_budget["best"]["cost"]["usd"] == min(e["cost"]["usd"] for e in near)
