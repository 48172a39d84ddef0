"""The expert exchange through DeepEP's kernels (model/ep_comm.py, comm.deepep_s, comm.touched): the ranks and nodes
a token reaches, the published DeepEP bandwidths, the dispatcher as a run's config names it."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.comm import touched
from gpuplan.validation import components as comp


def _bins_reached(experts: int, k: int, bins: int, pool: tuple[int, ...]) -> float:
    """Mean distinct bins over every k-subset of ``pool`` (the experts a token may take), bins of experts/bins."""
    per = experts // bins
    subsets = list(itertools.combinations(pool, k))
    return sum(len({e // per for e in s}) for s in subsets) / len(subsets)


@settings(max_examples=60, deadline=None)
@given(bins=st.sampled_from([2, 3, 4]), per=st.integers(1, 3), k=st.integers(1, 4))
def test_uniform_routing_reaches_the_enumerated_mean(bins, per, k):
    experts = bins * per
    k = min(k, experts)
    assert touched(experts, k, bins) == pytest.approx(_bins_reached(experts, k, bins, tuple(range(experts))))


@settings(max_examples=40, deadline=None)
@given(groups=st.sampled_from([2, 3, 4]), split=st.sampled_from([1, 2]), per=st.integers(1, 2),
       top=st.integers(1, 3), k=st.integers(1, 3))
def test_bins_inside_groups_reach_the_enumerated_mean(groups, split, per, top, k):
    # group-limited routing with each group split over ``split`` bins: the top groups uniform, then k of their experts
    top = min(top, groups - 1)
    bins, experts = groups * split, groups * split * per
    size = experts // groups
    k = min(k, top * size)
    means = [_bins_reached(experts, k, bins, tuple(e for g in chosen for e in range(g * size, (g + 1) * size)))
             for chosen in itertools.combinations(range(groups), top)]
    if split == 1:  # a bin holds a whole group: reached when chosen (every chosen group is hit), not the uniform mean
        assert touched(experts, k, bins, groups, top) == pytest.approx(top)
    else:
        assert touched(experts, k, bins, groups, top) == pytest.approx(sum(means) / len(means))


def test_deepseek_v3_reaches_four_nodes():
    # DeepSeek-V3 (arXiv:2412.19437 Sec. 3.2.2): 256 experts in 8 groups, top-4 groups, top-8 experts; EP 64 over 8
    # nodes: each token reaches its M = 4 nodes, and 32 · (1 − C(124, 8)/C(128, 8)) of the 32 ranks of its groups
    assert touched(256, 8, 8, 8, 4) == 4
    assert touched(256, 8, 64, 8, 4) == pytest.approx(32 * (1 - math.comb(124, 8) / math.comb(128, 8)))
    # without the group limit: 8 · (1 − C(224, 8)/C(256, 8)) of 8 nodes
    assert touched(256, 8, 8) == pytest.approx(8 * (1 - math.comb(224, 8) / math.comb(256, 8)))


def test_the_published_deepep_bandwidths_are_met():
    rows = [r for r in comp.rows() if r["source"] == "deepep_v1"]
    assert len(rows) == 8
    assert all(abs(r["error"]) <= 0.15 for r in rows), [(r["id"], round(r["error"], 3)) for r in rows]


DSV3 = {"model": "deepseek-v3", "hardware": {"gpu": "h800", "gpus": 2048, "scale_out": "ib-400g"},
        "training": {"seq_len": 4096, "global_batch": 15360, "precision": "fp8"},
        "layout": {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "pp_schedule": "dualpipe", "recompute": "full"}}


def _ep_s(raw: dict) -> float:
    return evaluate_scenario(parse_scenario(raw)).to_json()["time"]["comm_detail"]["ep"]


def test_dualpipe_exchanges_through_deepseeks_kernels():
    est = evaluate_scenario(parse_scenario(DSV3)).to_json()
    said = {a["field"]: a for a in est["assumed"]}
    assert said["training.moe_dispatcher"]["value"] == "deepep"
    deepep = est["time"]["comm_detail"]["ep"]
    alltoall = _ep_s({**DSV3, "training": {**DSV3["training"], "moe_dispatcher": "alltoall"}})
    # a token crosses the network once per node it reaches (4, 3.5 of them remote) where the all-to-all sends it once
    # per expert (7 of 8 remote) in 16 bits at NCCL's ramp (~0.93 of its rate at these sizes), half of DeepEP's
    # exchanges in FP8 (1 + 4/128 bytes a value): 7 · 2 / 0.93 against 3.5 · (1.03 + 2) / 2, about 2.8x
    assert 2.5 < alltoall / deepep < 3.2
    bf16 = _ep_s({**DSV3, "training": {**DSV3["training"], "precision": "bf16"}})
    assert deepep < bf16  # DeepSeek-V3's FP8 dispatch


def test_megatron_flex_dispatcher_reads_as_deepep():
    moe = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "gpus": 16}}
    for keys in ({"moe_token_dispatcher_type": "flex", "moe_enable_deepep": True},
                 {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"},
                 {"moe_enable_deepep": True}, {"moe_token_dispatcher_type": "deepep"}):
        sc = parse_scenario({**moe, "training": {"framework": "megatron-core", **keys}, "layout": {"ep": 8}})
        assert sc.training.moe_dispatcher == "deepep"
    for keys, match in (({"moe_token_dispatcher_type": "alltoall", "moe_enable_deepep": True}, "flex"),
                        ({"moe_flex_dispatcher_backend": "hybridep"}, "hybridep"),
                        ({"moe_dispatcher": "alltoall", "moe_token_dispatcher_type": "flex"}, "disagree"),
                        ({"moe_dispatcher": "nccl"}, "moe_dispatcher")):
        with pytest.raises(GpuplanError, match=match):
            parse_scenario({**moe, "training": keys, "layout": {"ep": 8}})


def test_the_dispatcher_given_is_echoed_and_read_back():
    raw = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "gpus": 16},
           "training": {"moe_dispatcher": "deepep"}, "layout": {"ep": 8}}
    echoed = evaluate_scenario(parse_scenario(raw)).to_json()["scenario"]
    assert echoed["training"]["moe_dispatcher"] == "deepep"
    assert parse_scenario(echoed).training.moe_dispatcher == "deepep"


def test_the_expert_exchange_widens_the_interval():
    # no published MoE run in the corpus checks how the exchange hides: its share of the step widens the throughput
    # interval by unmeasured_kernel_factor (2) as an unmeasured kernel's does, the point estimate unchanged
    from gpuplan.catalog.intervals import spread, widened

    t = evaluate_scenario(parse_scenario(DSV3)).to_json()["time"]
    share = t["comm_detail"]["ep"] / t["step_s"]
    assert 0.2 < share < 0.6
    base = spread("throughput", "generic", "hopper", 2048, 8, seq_len=4096)
    wide = widened(base, share, 2.0)
    tps = t["tokens_per_s_per_gpu"]
    assert t["interval"]["tokens_per_s_per_gpu"]["p10"] == pytest.approx(tps * (1 + wide.p10))
    assert t["interval"]["tokens_per_s_per_gpu"]["p90"] == pytest.approx(tps * (1 + wide.p90))
    assert "expert exchange" in t["interval_basis"]["regime"]
    dense = evaluate_scenario(parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}}))
    assert "expert exchange" not in dense.to_json()["time"]["interval_basis"]["regime"]


def test_deepep_needs_nvlink_peers_and_ampere():
    # DeepEP docs/legacy.md Requirements: Ampere or Hopper, NVLink peer access between every pair of a node's GPUs
    moe = {"model": "qwen3-30b-a3b", "training": {"moe_dispatcher": "deepep"}, "layout": {"ep": 8}}
    for gpu, match in (("l40s", "over PCIe 4.0"), ("h100-nvl", "NVLink bridge"), ("v100-32gb", "Ampere and later")):
        with pytest.raises(GpuplanError, match=match):
            evaluate_scenario(parse_scenario({**moe, "hardware": {"gpu": gpu, "gpus": 8}}))
    # a dense model exchanges nothing: the dispatcher it names changes nothing
    evaluate_scenario(parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "l40s", "gpus": 8},
                                      "training": {"moe_dispatcher": "deepep"}}))
    # the planner leaves such a GPU type out with the same words, and plans the others
    from gpuplan.api import plan_scenario

    res = plan_scenario(parse_scenario({"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm"},
                                        "training": {"moe_dispatcher": "deepep", "seq_len": 4096}}),
                        gpu_types="h100-sxm,l40s", max_gpus=16).to_json()
    assert res["best"]["scenario"]["hardware"]["gpu"] == "h100-sxm"
    assert any("DeepEP needs NVLink" in why and "l40s" in why for why in res["rejected"])
