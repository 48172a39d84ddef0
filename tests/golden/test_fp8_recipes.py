"""fp8 scaling recipes: which one a run uses (as given, else the framework's documented default),
what a framework refuses, and what exports write. Their cost is not modelled yet (README)."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.catalog.frameworks import fp8_recipe_of
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import evaluate
from gpuplan.spec import Training


@pytest.mark.parametrize("framework, recipe", [
    # torchtitan docs/float8.md: tensor-wise dynamic scaling by default; Megatron --fp8-recipe default 'delayed'
    ("torchtitan", "tensorwise"), ("megatron-core", "delayed"), ("generic", "tensorwise"),
    ("pytorch-fsdp", "tensorwise"),
])
def test_the_recipe_left_open_is_the_framework_s_documented_default(framework, recipe):
    assert fp8_recipe_of(Training(precision="fp8", framework=framework)) == recipe
    sc = make(training={"precision": "fp8", "framework": framework}, gpus=8)
    assert sc.training.fp8_recipe == recipe
    est = evaluate(sc).to_json()
    rule = "the framework's documented default (frameworks.json fp8_recipe), else tensorwise"
    assert {"field": "training.fp8_recipe", "value": recipe, "rule": rule} in est["assumed"]


def test_a_recipe_without_fp8_is_one_error():
    with pytest.raises(GpuplanError, match="training.fp8_recipe .rowwise. scales fp8 matmuls, but precision is bf16"):
        make(training={"fp8_recipe": "rowwise"})


@pytest.mark.parametrize("framework, recipe, refused", [
    ("megatron-core", "rowwise", "not torchao's rowwise"), ("megatron-core", "rowwise_with_gw_hp", "not torchao"),
    ("torchtitan", "delayed", "delayed scaling is not offered"),
])
def test_a_framework_refuses_the_recipes_it_does_not_offer(framework, recipe, refused):
    sc = make(training={"precision": "fp8", "framework": framework, "fp8_recipe": recipe}, gpus=8)
    with pytest.raises(GpuplanError, match=refused):
        evaluate(sc)
