"""Fixed means fixed, one default rule, answers are inputs (README "Commands"): over generated
scenarios, every command hands back the fields it was given unchanged, lists what it filled in
under ``assumed``, and its echoed scenario reproduces the answer through ``evaluate``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario

MODEL = "llama-3.2-1b"
TRAINING = {
    "seq_len": st.sampled_from([1024, 2048, 4096]),
    "global_batch": st.sampled_from([64, 128, 256]),
    "precision": st.sampled_from(["bf16", "fp8"]),
    "optimizer": st.sampled_from(["adamw", "adamw-8bit"]),
    "framework": st.sampled_from(["generic", "megatron-core", "torchtitan"]),
    "headroom": st.sampled_from([0.0, 0.05, 0.1]),
}
LAYOUT = {"tp": st.sampled_from([1, 2]), "zero": st.sampled_from([1, 2, 3]),
          "recompute": st.sampled_from(["none", "full"])}


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    training = {k: draw(v) for k, v in TRAINING.items() if draw(st.booleans())}
    layout = {k: draw(v) for k, v in LAYOUT.items() if draw(st.booleans())}
    if layout.get("zero") == 1 and training.get("framework") == "torchtitan":
        layout["zero"] = 2  # torchtitan has no ZeRO-1 (its cannot_run rule); not what this test is about
    hardware = {"gpu": "h100-sxm", "gpus": draw(st.sampled_from([8, 16]))}
    return {"model": MODEL, "hardware": hardware, "training": training, "layout": layout}


def _echo_keeps(raw: dict, answer: dict) -> None:
    sc = answer["scenario"]
    for section in ("hardware", "training", "layout"):
        for key, value in raw[section].items():
            assert sc[section][key] == value, f"{section}.{key}: given {value!r}, answered {sc[section][key]!r}"
    fields = {a["field"] for a in answer["assumed"]}
    given = {f"{s}.{k}" for s in ("hardware", "training", "layout") for k in raw[s]}
    assert not fields & given, fields & given
    for key in ("global_batch", "precision", "optimizer", "framework", "headroom", "seq_len"):
        if key not in raw["training"]:
            assert f"training.{key}" in fields, key


def _reproduces(answer: dict) -> None:
    again = evaluate(parse_scenario(answer["scenario"])).to_json()
    assert again["memory"]["total"] == pytest.approx(answer["memory"]["total"], rel=1e-12)
    assert again["time"]["step_s"] == pytest.approx(answer["time"]["step_s"], rel=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_evaluate_fit_and_plan_keep_what_was_given(raw: dict) -> None:
    try:
        est = gpuplan.evaluate(raw).to_json()
    except GpuplanError:
        return  # a combination no framework runs (e.g. its layout rules): refused, nothing to echo
    _echo_keeps(raw, est)
    _reproduces(est)
    res = gpuplan.plan(raw).to_json()
    if res["best"] is not None:
        _echo_keeps(raw, res["best"])
        _reproduces(res["best"])
        # the same layout through evaluate: the same step time
        again = gpuplan.evaluate(res["best"]["scenario"]).to_json()
        assert again["time"]["step_s"] == pytest.approx(res["best"]["time"]["step_s"], rel=1e-12)
    fit = gpuplan.fit(raw).to_json()
    assert fit["min_gpus"] in (None, raw["hardware"]["gpus"])
    if fit["best"] is not None:
        _echo_keeps(raw, fit["best"])


def test_plan_with_a_given_count_answers_there_and_max_gpus_cannot_contradict_it():
    res = gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", gpus=64, tokens="1T").to_json()
    assert res["best"]["scenario"]["hardware"]["gpus"] == 64
    assert all(c["scenario"]["hardware"]["gpus"] == 64 for c in res["candidates"])
    assert max(r["gpus"] for r in res["scaling"]) <= 64  # smaller counts only as the curve's context
    with pytest.raises(GpuplanError, match="--max-gpus 32 is below the fixed hardware.gpus = 64"):
        gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", gpus=64, max_gpus=32)
    open_count = gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", tokens="1T", max_gpus=32).to_json()
    assert open_count["best"]["scenario"]["hardware"]["gpus"] <= 32


def test_evaluate_and_plan_use_one_default_global_batch():
    # the guide's "7B on 64 GPUs" question: evaluate and plan at the same layout agree
    res = gpuplan.plan(model="llama-2-7b", gpu="h100-sxm", gpus=64, tokens="1.4T").to_json()
    best = res["best"]
    lay = best["scenario"]["layout"]
    ev = gpuplan.evaluate(model="llama-2-7b", gpu="h100-sxm", gpus=64, tokens="1.4T",
                          **{k: lay[k] for k in ("tp", "pp", "zero", "micro_batch", "recompute")}).to_json()
    assert ev["scenario"]["training"]["global_batch"] == res["global_batch"] == 1024  # 4M tokens / 4096
    assert ev["time"]["step_s"] == pytest.approx(best["time"]["step_s"], rel=1e-9)
    assert {"field": "training.global_batch", "value": 1024} .items() <= next(
        a for a in ev["assumed"] if a["field"] == "training.global_batch").items()


def test_headroom_makes_a_layout_in_the_margin_tight_not_fitting():
    kw = dict(model="llama-3.2-1b", gpu="h100-sxm", gpus=1, zero=0, recompute="full", global_batch=8, micro_batch=4)
    edge = gpuplan.evaluate(**kw, headroom=0).to_json()["memory"]
    assert edge["fits"] and edge["headroom_share"] == 0
    # fits means the peak's 80 % interval's upper end fits (model/memory.py verdict)
    share = edge["interval"]["total"]["p90"] / edge["capacity"]
    # a margin that leaves the peak's upper end between the usable share and the whole card
    margin = round(1 - share + 0.01, 3)
    tight = gpuplan.evaluate(**kw, headroom=margin).to_json()["memory"]
    assert tight["total"] == edge["total"] and tight["usable"] == pytest.approx(edge["capacity"] * (1 - margin))
    assert not tight["fits"] and tight["tight"]
    roomy = gpuplan.evaluate(**kw, headroom=round(1 - share - 0.01, 3)).to_json()["memory"]
    assert roomy["fits"] and not roomy["tight"]


def test_cost_without_a_deadline_stays_within_the_horizon():
    res = gpuplan.plan(model="llama-2-7b", gpu="h100-sxm", tokens="1.4T", objective="cost", max_gpus=256).to_json()
    assert res["horizon_s"] == 90 * 86400
    assert res["best"]["time"]["train_s"] <= res["horizon_s"]
    assert any("default horizon" in a for a in res["advice"])


def test_plan_without_a_gpu_searches_the_catalogue():
    p = gpuplan.plan(model="llama-3.2-1b", tokens="1e10", max_gpus=8)
    assert len(p.result.gpu_types) > 10
