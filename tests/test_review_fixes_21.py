"""Step-model fixes of session 21's reviews: ZeRO-2 reduce-scatters per micro-batch, an expert all-to-all hides only
beside another micro-batch, DualPipe's minimum micro-batch count, Megatron-Core's sharding under a pipeline."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate_scenario
from gpuplan.catalog.hardware import make_hardware
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.comm import reduce_scatter_s, topology
from gpuplan.spec.rules import dualpipe_count_ok


def _est(layout: dict, training: dict | None = None, model: str = "llama-3.1-8b", gpus: int = 16):
    raw = {"model": model, "hardware": {"gpu": "h100-sxm", "gpus": gpus},
           "training": {"seq_len": 4096, "global_batch": 64, **(training or {})}, "layout": layout}
    return evaluate_scenario(parse_scenario(raw))


def test_zero2_reduce_scatters_its_gradient_shard_in_every_micro_batch():
    # DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads:
    # "if self.partition_gradients or self.is_gradient_accumulation_boundary" — stage 2 reduces every micro-step
    base = {"dp": 16, "micro_batch": 1, "recompute": "full"}
    one, two = (_est({**base, "zero": z}).time.step.comm_detail["dp_total"] for z in (1, 2))
    n_mb = 64 // 16  # micro-batches per step
    grads = 4 * 8.03e9  # fp32 gradients on the wire (bf16 mixed precision), Llama 3.1 8B's parameters
    rs = reduce_scatter_s(grads, 16, 1, topology(make_hardware("h100-sxm", 16)))
    assert two - one == pytest.approx((n_mb - 1) * rs, rel=0.01)
    # one micro-batch per step: the same traffic as ZeRO-1
    single = {"dp": 16, "micro_batch": 4, "recompute": "full"}
    assert _est({**single, "zero": 2}).time.step.comm_detail["dp_total"] == \
        _est({**single, "zero": 1}).time.step.comm_detail["dp_total"]


def test_an_expert_all_to_all_hides_only_beside_another_micro_batch():
    # Megatron-Core --overlap-moe-expert-parallel-comm runs one micro-batch's dispatch and combine under another's
    # compute: with one micro-batch per step there is none to run beside
    lay = {"dp": 16, "ep": 8, "zero": 1, "recompute": "selective", "ep_overlap": True}
    tr = {"framework": "megatron-core", "global_batch": 16}
    one = _est({**lay, "micro_batch": 1}, tr, model="qwen3-30b-a3b").time.step.comm_detail
    assert one["ep_exposed"] == pytest.approx(one["ep"])
    two = _est({**lay, "micro_batch": 1}, {**tr, "global_batch": 32}, model="qwen3-30b-a3b").time.step.comm_detail
    assert two["ep_exposed"] < two["ep"]


def test_dualpipe_needs_an_even_count_of_at_least_two_micro_batches_per_stage():
    # deepseek-ai/DualPipe dualpipe/dualpipe.py DualPipe.step:
    # assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    assert dualpipe_count_ok(8, 4) and not dualpipe_count_ok(6, 4) and not dualpipe_count_ok(9, 4)
    with pytest.raises(GpuplanError, match=r"must be even and ≥ 2·pp \(got 4 for pp=4\)"):
        _est({"dp": 4, "pp": 4, "micro_batch": 4, "pp_schedule": "dualpipe"}, {"global_batch": 64})


def test_megatron_core_under_a_pipeline_shards_no_gradients():
    # Megatron-FSDP (optim_grads, optim_grads_params) does not compose with pipeline parallelism: with pp > 1
    # Megatron-Core's sharding is the distributed optimizer, ZeRO-1
    with pytest.raises(GpuplanError, match="not with pipeline parallelism"):
        _est({"tp": 8, "pp": 2, "zero": 2}, {"framework": "megatron-core"})
