"""The node's CPU memory, what offloaded state must fit in: given (hardware.host_memory), else the GPU's reference
node's (catalog/gpus.json host_memory_gb_per_node, from the DGX / NVL72 / GH200 datasheets), named under assumed;
unchecked where the catalogue has no reference node."""

from __future__ import annotations

from gpuplan.api import plan_scenario
from gpuplan.catalog.hardware import make_hardware
from gpuplan.io.scenario import parse_scenario
from gpuplan.search.codes import Reason
from gpuplan.spec.defaults import assumed


def test_reference_nodes_from_the_datasheets() -> None:
    # NVIDIA DGX H100 datasheet: System Memory 2TB (8 GPUs)
    assert make_hardware("h100-sxm").host_memory_bytes == 2e12
    # a node of 4 such GPUs: the reference node's per GPU, times 4
    assert make_hardware("h100-sxm", gpus_per_node=4).host_memory_bytes == 1e12
    # NVIDIA DGX A100 datasheet: 1TB on the DGX A100 320GB (8x A100 40GB)
    assert make_hardware("a100-40gb-sxm").host_memory_bytes == 1e12
    # GB200 NVL72: up to 17 TB of LPDDR5X over 18 trays of 4 GPUs
    assert abs(make_hardware("gb200").host_memory_bytes - 17e12 / 18) < 1e8
    assert make_hardware("l40s").host_memory_bytes is None  # no reference system: unchecked


def _405b_on_8(hardware_extra: dict) -> object:
    return parse_scenario({"model": "llama-3.1-405b",
                           "hardware": {"gpu": "a100-40gb-sxm", "gpus": 8, **hardware_extra},
                           "training": {"seq_len": 4096, "global_batch": 64}})


def test_offloaded_state_beyond_the_reference_node_does_not_fit() -> None:
    # 405B parameters' weights, gradients and Adam states offloaded: terabytes, beyond the DGX A100's 1 TB
    res = plan_scenario(_405b_on_8({})).result
    assert res.best is None
    assert any(r.reason is Reason.OUT_OF_HOST_MEMORY for r in res.rejected)
    roomy = plan_scenario(_405b_on_8({"host_memory": "8TiB"})).result
    assert roomy.best is not None and roomy.best.layout.offload == "params"


def test_the_default_is_named_and_a_given_value_is_not() -> None:
    sc = _405b_on_8({})
    rows = {a["field"]: a for a in assumed(sc, sc.training, None, True)}
    assert rows["hardware.host_memory"]["value"] == 1e12
    given = _405b_on_8({"host_memory": "8TiB"})
    assert "hardware.host_memory" not in {a["field"] for a in assumed(given, given.training, None, True)}


def test_other_gpu_types_take_their_own_node_unless_it_is_given() -> None:
    from gpuplan.catalog.hardware import get_gpu
    from gpuplan.io.options import hardware_for

    sc = _405b_on_8({})
    assert hardware_for(sc, get_gpu("h200")).host_memory_bytes == 2e12
    assert hardware_for(sc, get_gpu("l40s")).host_memory_bytes is None
    given = _405b_on_8({"host_memory": "8TiB"})
    assert hardware_for(given, get_gpu("l40s")).host_memory_bytes == 8 * 2**40
