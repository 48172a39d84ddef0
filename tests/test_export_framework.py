"""An export is planned and checked as its target framework runs it: the framework's documented defaults (not the
generic stack's) and its limits on tensor parallelism over key/value heads (catalog/framework_comm.py
``SPLITS_KV_HEADS``: Megatron-Core raises 'num_query_groups must be a multiple of tensor_model_parallel_size')."""

from __future__ import annotations

import pytest

from gpuplan.api import plan_scenario
from gpuplan.errors import GpuplanError
from gpuplan.export import export_scenario
from gpuplan.io.scenario import parse_scenario
from gpuplan.search.space import degrees, tp_domain


def _sc(model: str, gpu: str, gpus: int, framework: str | None = None, **layout):
    tr = {"tokens": 1e12} | ({"framework": framework} if framework else {})
    return parse_scenario({"model": model, "hardware": {"gpu": gpu, "gpus": gpus}, "training": tr, "layout": layout})


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_a_tp_past_the_key_value_heads_is_not_written_for_stacks_that_split_them(target):
    # Llama 3.1 70B: 8 key/value heads; tp 16 would give each rank half a head
    with pytest.raises(GpuplanError, match="splits the 8 key/value heads"):
        export_scenario(_sc("llama-3.1-70b", "h100-sxm", 64, tp=16, pp=1), target)


def test_the_search_offers_such_stacks_only_tps_that_divide_the_key_value_heads():
    # Qwen2.5-1.5B: 12 query heads, 2 key/value heads — tp 4 divides the query heads, not the key/value heads
    def tps(framework: str | None) -> list[int]:
        sc = _sc("qwen2.5-1.5b", "h100-sxm", 8, framework)
        return degrees(sc, tp_domain(sc.hardware))[0]

    assert tps("megatron-core") == [1, 2] and tps("torchtitan") == [1, 2]
    assert 4 in tps(None)  # the generic stack replicates key/value heads past their count


def test_an_export_is_planned_with_the_target_frameworks_defaults():
    # torchtitan's FSDP2 keeps gradients in the parameters' dtype and its launcher sets expandable segments
    # (frameworks.json); the export had planned with the generic stack's fp32 gradients: 59.9 against 57.9 GiB
    exp, _ = export_scenario(_sc("llama-3.1-8b", "h100-sxm", 8), "torchtitan")
    plan = plan_scenario(_sc("llama-3.1-8b", "h100-sxm", 8, "torchtitan")).to_json()["best"]
    assert f"{plan['memory']['total'] / 2**30:.1f} GiB per GPU" in exp.text
    assert plan["scenario"]["training"]["grad_dtype"] != "fp32"
