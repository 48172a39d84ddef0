"""Recomputing every k-th block (torchtitan's 'selective layer' AC, selective_ac_option = k;
Megatron's block method): memory, time and FLOPs between no recompute and full recompute."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.errors import GpuplanError
from gpuplan.export import export_scenario

KW = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, micro_batch=2, global_batch=64)


def _est(**kw):
    return gpuplan.evaluate(**KW, **kw).to_json()


def test_every_kth_block_holds_the_mix_of_none_and_full():
    none, full, half = _est(recompute="none"), _est(recompute="full"), _est(recompute="full", recompute_every=2)
    per = {k: e["memory"]["activations_per_microbatch"] for k, e in (("none", none), ("full", full), ("half", half))}
    # half the blocks keep their activations, the other half only their inputs
    assert per["half"] == pytest.approx((per["none"] + per["full"]) / 2, rel=1e-12)
    assert full["time"]["step_s"] > half["time"]["step_s"] > none["time"]["step_s"]
    # the recomputed forward of half the blocks: HFU − MFU is half of full recompute's
    gap = {k: e["time"]["hardware_flops_per_token"] - e["time"]["model_flops_per_token"]
           for k, e in (("full", full), ("half", half))}
    assert gap["half"] == pytest.approx(gap["full"] / 2, rel=1e-12)
    assert none["time"]["model_flops_per_token"] == half["time"]["model_flops_per_token"]


def test_every_kth_block_needs_full_recompute():
    with pytest.raises(GpuplanError, match="set recompute: full"):
        _est(recompute="selective-op", recompute_every=2)
    with pytest.raises(GpuplanError, match="recompute_every"):
        _est(recompute="full", recompute_every=0)


def test_every_kth_block_with_the_mode_open_is_full_recompute_of_those_blocks():
    # a run table's "AC every 2nd layer" without the mode: the blocks it recomputes, it recomputes whole
    est = _est(recompute_every=2)
    lay = est["scenario"]["layout"]
    assert (lay["recompute"], lay["recompute_every"]) == ("full", 2)
    assert est["time"] == _est(recompute="full", recompute_every=2)["time"]


def test_exports_say_every_kth_block_in_each_framework():
    sc = gpuplan.scenario(**KW, tp=1, pp=1, recompute="full", recompute_every=2)
    titan, _ = export_scenario(sc, "torchtitan")
    assert 'selective_ac_option = "2"' in titan.text and 'mode = "selective"' in titan.text
    sc = gpuplan.scenario(**{**KW, "gpus": 16, "zero": 1}, tp=2, pp=2, recompute="full", recompute_every=4)
    mega, _ = export_scenario(sc, "megatron")
    # 32 layers on 2 stages: 16 per stage, a quarter of them (the block method's first N) recomputed
    assert "--recompute-method block" in mega.text and "--recompute-num-layers 4" in mega.text
