"""Words of an answer that must not mislead: the frontier shows the recommended run, the exposed communication
adds up, an efficiency compares counts of one GPU type only, a missed deadline names the assumed batch when it is
what stops more GPUs from paying, and a model with a short learned position table defaults to its length."""

from __future__ import annotations

import math

import pytest

from gpuplan.api import evaluate_scenario, plan_scenario
from gpuplan.io.scenario import parse_scenario
from gpuplan.report.advice import _beside_words
from gpuplan.report.lines import pareto_words as _pareto_words


def _pt(gpus: int) -> dict:
    return {"gpus": gpus, "gpu": "h100-sxm", "train_s": 1e9 / gpus, "usd": 1e5 + gpus}


def test_the_frontier_keeps_the_recommended_run_and_says_what_it_leaves_out():
    pts = [_pt(2 ** k) for k in range(14, 2, -1)]  # 12 points, fastest first
    words = _pareto_words({"pareto": pts, "recommendation": {"gpus": 64, "gpu": "h100-sxm"}})
    assert "64× h100-sxm" in words and words.count("— recommended") == 1
    assert "16384× h100-sxm" in words and "8× h100-sxm" in words and "… " in words
    assert "… 9 more" not in words  # the recommended one is shown, not counted out
    few = _pareto_words({"pareto": pts[:5], "recommendation": {}})
    assert "…" not in few and few.count("×") == 5


@pytest.mark.parametrize("schedule", ["dualpipe", "1f1b"])
def test_the_exposed_communication_is_the_sum_of_its_exposed_parts(schedule):
    sc = parse_scenario({"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "gpus": 256},
                         "layout": {"tp": 2, "pp": 4, "zero": 2, "pp_schedule": schedule}})
    t = evaluate_scenario(sc).to_json()["time"]
    d = t["comm_detail"]
    parts = d["tp_exposed"] + d["cp"] + d.get("ep_exposed", d["ep"]) + d["pp_exposed"] + d["dp_exposed"]
    assert math.isclose(parts, t["comm_exposed_s"], rel_tol=1e-9)
    # DualPipe overlaps the pipeline's sends with the other direction's compute: none of it exposed
    assert (d["pp_exposed"] == 0.0) == (schedule == "dualpipe") and d["pp"] > 0


def test_an_efficiency_compares_counts_of_one_gpu_type_only():
    same = {"gpu": "h100-sxm", "gpus": 128, "speedup": 1.5, "efficiency": 0.75, "extra_usd": 10.0, "train_s": 1.0,
            "from_gpu": "h100-sxm", "from_gpus": 64}
    other = {**same, "gpu": "gb200", "efficiency": 1.13}
    assert "75% parallel efficiency from 64 GPUs" in _beside_words(same, "the fastest")
    assert "efficiency" not in _beside_words(other, "the fastest") and "1.50× faster" in _beside_words(other, "x")


def test_a_missed_deadline_names_the_assumed_batch_past_the_equilibrium():
    from gpuplan.report.advice import advice

    base = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm"}, "training": {"tokens": 15e12}}
    opts = {"deadline_s": "1d", "max_gpus": 4096}
    words = advice(plan_scenario(parse_scenario(base), **opts).result)
    assert any("or a larger global batch: the assumed 1,024 sequences" in w for w in words)
    given = {**base, "training": {**base["training"], "global_batch": 1024}}
    assert not any("larger global batch" in w for w in advice(plan_scenario(parse_scenario(given), **opts).result))


def test_a_short_learned_position_table_sets_the_default_sequence():
    # GPT-2: n_positions 1024 (its released config); the default 4,096 would grow its table
    est = evaluate_scenario(parse_scenario({"model": "gpt2", "hardware": {"gpu": "h100-sxm", "gpus": 8}})).to_json()
    assert est["scenario"]["training"]["seq_len"] == 1024 and est["model"]["params"] == 124_439_808
    rule = next(a["rule"] for a in est["assumed"] if a["field"] == "training.seq_len")
    assert "learned position table: 1,024 positions" in rule
    rope = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 8}})
    assert rope.training.seq_len == 4096


def test_state_offloaded_to_a_host_memory_nobody_gave_is_said_unchecked():
    # 405B at 18 B/param offloaded from 8 GPUs of a box the catalogue gives no host memory for: 7.3 TB per node
    sc = parse_scenario({"model": "llama-3.1-405b", "hardware": {"gpu": "rtx-4090", "gpus": 8},
                         "layout": {"zero": 3, "offload": "params"}})
    notes = evaluate_scenario(sc).to_json()["notes"]
    assert any("offloaded to each node's host memory, which is not checked" in n for n in notes)
    given = parse_scenario({"model": "llama-3.1-405b",
                            "hardware": {"gpu": "rtx-4090", "gpus": 8, "host_memory": "1TB"},
                            "layout": {"zero": 3, "offload": "params"}})
    est = evaluate_scenario(given).to_json()
    assert not any("not checked" in n for n in est["notes"]) and not est["memory"]["fits"]


def test_a_network_given_in_words_is_said_as_the_fabric_it_is_read_as():
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16, "scale_out": "100GbE"}})
    reading = next(r for r in sc.read_as if r[0] == "hardware.scale_out")
    assert reading[1:3] == ("100GbE", "eth-100g") and "Gb/s per node" in reading[3]
    same = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16,
                                                                  "scale_out": "eth-100g"}})
    assert not any(r[0] == "hardware.scale_out" for r in same.read_as)
