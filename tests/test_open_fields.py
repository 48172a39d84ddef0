"""An open layout field is searched over every value the framework runs, given the fixed ones (issue 22
item 6): for each framework and each way of fixing one field, whenever some layout with the fixed
value fits (found by evaluating every combination of the small space below), ``plan`` finds one too —
and it never returns a layout that breaks the fixed value or that ``evaluate`` refuses."""

from __future__ import annotations

import itertools

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario as plan
from gpuplan.catalog.frameworks import FRAMEWORKS
from gpuplan.errors import GpuplanError
from gpuplan.spec.options import PlanOptions

SPACE = {"zero": (0, 1, 2, 3), "tp": (1, 2), "pp": (1, 2), "micro_batch": (1, 2), "recompute": ("none", "full")}
FIXED = [(k, v) for k in ("zero", "tp", "pp", "recompute") for v in SPACE[k]]
TRAINING = {"seq_len": 2048, "global_batch": 32, "tokens": 1e9}


def _some_layout_fits(framework: str, field: str, value) -> bool:
    keys = [k for k in SPACE if k != field]
    for combo in itertools.product(*(SPACE[k] for k in keys)):
        layout = {field: value, **dict(zip(keys, combo, strict=True))}
        sc = make("llama-3.2-1b", "l4", 8, training={**TRAINING, "framework": framework}, layout=layout)
        try:
            if evaluate(sc).memory.fits:
                return True
        except GpuplanError:
            continue  # not a layout this framework runs, or not one of this model
    return False


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("field", "value"), FIXED)
def test_an_open_field_is_searched_over_every_value_the_framework_runs(framework, field, value):
    # an L4 (24 GB) so that the fixed values matter: ZeRO-0 of a 1B model does not fit every layout
    sc = make("llama-3.2-1b", "l4", 8, training={**TRAINING, "framework": framework}, layout={field: value})
    try:
        res = plan(sc, PlanOptions())
    except GpuplanError as err:  # a fixed value the framework never runs: refused up front, with the reason
        assert not _some_layout_fits(framework, field, value), str(err)
        return
    if res.best is None:
        assert not _some_layout_fits(framework, field, value)
        return
    lay = res.best.layout
    assert getattr(lay, field) == value
    assert evaluate(sc, lay).memory.fits  # the plan's layout is one evaluate accepts and fits


def test_a_given_dp_with_tp_and_pp_open_splits_the_rest_as_megatron_does():
    # Narayanan et al. 2021 (arXiv:2104.04473) Table 2, PTD-P GPT 530B on 2,240 A100s at data parallelism 8: the other
    # 280 GPUs per replica as tensor parallelism within the 8-GPU node and 35 pipeline stages (Takeaway #1) — it was an
    # error (dp × tp × pp = 8 of 2,240)
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": {"model_type": "gpt2", "n_layer": 105, "n_embd": 20480, "n_head": 128,
                                   "vocab_size": 51200, "n_positions": 2048},
                         "hardware": {"gpu": "a100-80gb-sxm", "gpus": 2240},
                         "training": {"seq_len": 2048, "global_batch": 2240, "framework": "megatron-lm"},
                         "layout": {"dp": 8}})
    est = evaluate(sc)
    assert (est.layout.dp, est.layout.tp, est.layout.pp) == (8, 8, 35)
    rules = {a["field"]: a["rule"] for a in est.to_json()["assumed"]}
    assert "Takeaway #1" in rules["layout.tp"] and "Takeaway #1" in rules["layout.pp"]


@pytest.mark.parametrize("layout, read", [
    # a table with one model-parallel column left out (Narayanan et al. 2021, arXiv:2104.04473, Table 1 without its tp
    # column): 64 GPUs at dp 32 and pp 1 leave tp 2; at dp 8 and tp 4, pp 2 (it was "dp×tp×pp = 32 but gpus = 64")
    ({"dp": 32, "pp": 1}, ("tp", 2)), ({"dp": 8, "tp": 4}, ("pp", 2)),
    # torchtitan's tables without their CP column: dp 4, tp 8, pp 1 on 64 GPUs leave cp 2
    ({"dp": 4, "tp": 8, "pp": 1}, ("cp", 2)),
])
def test_a_given_dp_and_one_model_degree_leave_the_other_to_the_count(layout, read):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 64}, "layout": layout})
    est = evaluate(sc)
    assert getattr(est.layout, read[0]) == read[1]
    rules = {a["field"]: a["rule"] for a in est.to_json()["assumed"]}
    assert f"{read[0]} = 64 / {64 // read[1]}" in rules[f"layout.{read[0]}"]
    # no whole degree the model takes (3 does not divide 64): the count error stays
    with pytest.raises(GpuplanError, match="make the product equal the GPU count"):
        evaluate(parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 64},
                                 "layout": {"dp": 8, "pp": 3}}))


def test_an_fp8_recipe_with_the_precision_open_trains_in_fp8():
    # torchtitan's float8 recipe names given, the precision not: the matmuls it scales run in fp8 (it was "precision
    # is bf16: set precision: fp8")
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "training": {"framework": "torchtitan", "fp8_recipe": "rowwise"}})
    assert (sc.training.precision, sc.training.fp8_recipe) == ("fp8", "rowwise")
    assert any(r[0] == "training.precision" and r[2] == "fp8" for r in sc.read_as)
