"""Activation offloading (training.activation_offloading; torchtune's enable_activation_offloading, Megatron-Core's
cpu_offloading): the saved activations go to host memory in forward and come back in backward on a side stream,
two blocks' staying on the GPU; no pipeline (Megatron-Core raises 'Currently there is no support for Pipeline
parallelism with CPU offloading'; torchtune has none)."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario
from gpuplan.errors import GpuplanError
from gpuplan.model.act_parts import activation_parts
from gpuplan.model.runtime import PCIE_HOST_BYTES_PER_S

LORA = {"seq_len": 2048, "framework": "torchtune", "method": "lora", "tokens": 1e7}


def _run(offload: bool, gpu: str = "rtx-4090", **training):
    return evaluate(make("llama-3.1-8b", gpu, 1, training={**LORA, "activation_offloading": offload, **training},
                         layout={"micro_batch": 2, "recompute": "none"})).to_json()


def test_two_blocks_of_saved_activations_stay_on_the_gpu():
    on, off = _run(True)["memory"], _run(False)["memory"]
    assert on["activations_per_microbatch"] == off["activations_per_microbatch"]
    held_once = off["activations"] - off["activations_per_microbatch"]  # one micro-batch in flight
    # Llama 3.1 8B: 32 blocks, two of them on the GPU
    assert on["activations"] == pytest.approx(off["activations_per_microbatch"] * 2 / 32 + held_once)
    assert on["total"] < off["total"] - 19 * 2**30


def test_the_copies_cost_time_only_where_they_outlast_the_compute():
    est = _run(True, "l40s")
    t = est["time"]
    sc = make("llama-3.1-8b", "l40s", 1, training={**LORA, "activation_offloading": True})
    per_mb, _, _ = activation_parts(sc.model, sc.training, 1, 1, 1, 1, 0, 1, False, 2, "none")
    copies = 2 * per_mb * (1 - 2 / 32) / PCIE_HOST_BYTES_PER_S  # to the host and back, per micro-batch
    per_mb_compute = t["compute_s"] / t["microbatches"]
    expected = t["microbatches"] * max(0.0, copies - per_mb_compute)
    assert expected > 0  # an L40S's PCIe 4 copies outlast its compute here
    assert t["comm_detail"]["activation_offload"] == pytest.approx(expected, rel=1e-3)
    assert _run(False, "l40s")["time"]["comm_detail"].get("activation_offload") is None
    # an RTX 4090 computes the same micro-batch slower than its copies take: they hide under it
    slow = _run(True)["time"]
    assert slow["compute_s"] / slow["microbatches"] > copies
    assert not slow["comm_detail"].get("activation_offload")


@pytest.mark.parametrize("framework, layout, words", [
    ("torchtune", {"pp": 2, "dp": 1, "micro_batch": 1}, "set pp: 1"),
    ("megatron-core", {"recompute": "full", "micro_batch": 1}, "does not work when activation recomputation"),
])
def test_what_it_cannot_run_is_refused_with_the_fix(framework, layout, words):
    with pytest.raises(GpuplanError, match=words):
        evaluate(make("llama-3.1-8b", "h100-sxm", 2 if "pp" in layout else 1,
                      training={"framework": framework, "activation_offloading": True, "tokens": 1e7},
                      layout=layout))


def test_the_planner_searches_no_pipeline():
    res = plan_scenario(make("llama-3.1-70b", "h100-sxm", training={**LORA, "activation_offloading": True}),
                        max_gpus=16).result
    assert res.candidates and all(c.layout.pp == 1 for c in res.candidates)
