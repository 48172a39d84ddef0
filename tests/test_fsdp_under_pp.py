"""FSDP under a pipeline: a framework that keeps the stage's parameters gathered and its gradients
unsharded between micro-batches (torchtitan: reshard_after_forward = not pp_enabled;
torch.distributed.pipelining's backward_maybe_with_nosync: set_requires_gradient_sync(last_backward))
holds ZeRO-1-like weights and gradients and communicates once per step, not once per micro-batch."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.frameworks import keeps_unsharded_under_pp
from gpuplan.model.params import rank_params

LAYOUT = {"dp": 4, "tp": 4, "pp": 4, "zero": 3, "recompute": "full"}


def _run(framework: str, micro_batch: int = 1, **layout):
    sc = make("llama-3.1-70b", "h100-sxm", 64, training={"framework": framework, "global_batch": 64},
              layout={**LAYOUT, "micro_batch": micro_batch, **layout})
    return evaluate(sc).to_json()


@pytest.mark.parametrize("framework, kept", [("torchtitan", True), ("generic", False), ("megatron-core", False)])
def test_which_frameworks_keep_the_stage_gathered(framework, kept):
    assert keeps_unsharded_under_pp(framework) is kept


def test_kept_weights_and_gradients_are_the_whole_stage_and_the_optimizer_stays_sharded():
    kept, resharded = _run("torchtitan")["memory"], _run("generic")["memory"]
    stage = kept["stage"]
    from gpuplan.catalog.models import load_model

    rp = rank_params(load_model("llama-3.1-70b"), 4, 1, 4, 1, stage, None, 0)
    n = rp.dense + rp.expert
    # bf16 weights of every parameter of the stage, 2 B each (dp 4 shards nothing); its gradients accumulate
    # unsharded in FSDP2's fp32 reduce dtype (torch _fsdp_param.py to_accumulated_grad_if_needed; torchtitan
    # mixed_precision_reduce = 'float32'), 4 B each
    assert kept["weights"] == pytest.approx(2 * n)
    assert kept["gradients"] == pytest.approx(4 * n)
    assert resharded["weights"] == pytest.approx(2 * n / 4)
    assert kept["optimizer"] == pytest.approx(resharded["optimizer"])


def test_kept_communication_is_once_per_step_whatever_the_micro_batch_count():
    one, eight = _run("torchtitan", 1), _run("torchtitan", 8)
    dp_one = one["time"]["comm_detail"]["dp_total"]
    dp_eight = eight["time"]["comm_detail"]["dp_total"]
    assert dp_one == pytest.approx(dp_eight)  # 64 vs 8 micro-batches: the same one gather + one reduce-scatter
    g_one = _run("generic", 1)["time"]["comm_detail"]["dp_total"]
    g_eight = _run("generic", 8)["time"]["comm_detail"]["dp_total"]
    assert g_one / g_eight == pytest.approx(8, rel=0.05)  # re-gathered every micro-batch: 8x the micro-batches
    assert dp_one < g_one / 10


def test_without_a_pipeline_torchtitan_reshards_as_fsdp_does():
    kept = _run("torchtitan", pp=1, dp=16)["memory"]
    generic = _run("generic", pp=1, dp=16)["memory"]
    assert kept["weights"] == pytest.approx(generic["weights"])
