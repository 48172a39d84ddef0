"""torchtitan's job-config keys given in a scenario (its [parallelism] and [training] batch keys) read as gpuplan's
layout and batch (io/titan_keys.py; torchtitan/config/job_config.py): dp = replicate × shard (shard -1: the rest),
FSDP2's ZeRO-3 over the shard degree (ZeRO-2 with reshard_after_forward never, DDP at shard 1), local_batch_size as
the micro-batch (no pipeline) or the per-replica batch (a pipeline's micro-batches), global_batch_size -1 =
local × dp."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario


def _sc(gpus: int, training: dict, parallelism: dict):
    return parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                           "training": {"framework": "torchtitan", "seq_len": 8192, **training},
                           "parallelism": parallelism})


def test_fsdp_over_the_rest_with_tensor_parallelism():
    sc = _sc(64, {"local_batch_size": 2, "global_batch_size": -1, "mixed_precision_param": "bfloat16"},
             {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 8, "enable_async_tensor_parallel": True})
    # shard -1: 64 GPUs over tp 8 leave 8; no pipeline: the local batch is the micro-batch, the global batch local × dp
    assert {k: sc.layout[k] for k in ("tp", "zero", "micro_batch", "tp_overlap")} == \
        {"tp": 8, "zero": 3, "micro_batch": 2, "tp_overlap": True}
    assert (evaluate(sc).layout.dp, sc.training.global_batch, sc.training.precision) == (8, 16, "bf16")
    assert {r[0] for r in sc.read_as} >= {"layout.zero", "layout.micro_batch", "training.global_batch"}


def test_a_pipeline_splits_the_local_batch_into_its_micro_batches():
    sc = _sc(512, {"local_batch_size": 16},
             {"tensor_parallel_degree": 8, "pipeline_parallel_degree": 8, "pipeline_parallel_microbatch_size": 2})
    assert (sc.layout["micro_batch"], sc.training.global_batch) == (2, 128)  # dp 512 / (8 × 8) = 8


def test_hybrid_shard_and_no_reshard_after_forward():
    # HSDP: 8 replicas of 8-way shards; reshard_after_forward never keeps the parameters gathered: ZeRO-2
    sc = _sc(64, {"local_batch_size": 1},
             {"data_parallel_replicate_degree": 8, "data_parallel_shard_degree": 8,
              "fsdp_reshard_after_forward": "never"})
    assert (sc.layout["dp"], sc.layout["zero"], sc.layout["zero_group"]) == (64, 2, 8)
    # shard 1: DDP
    assert _sc(16, {"local_batch_size": 1}, {"data_parallel_replicate_degree": 16,
                                             "data_parallel_shard_degree": 1}).layout["zero"] == 0


@pytest.mark.parametrize("training, parallelism, match", [
    ({"local_batch_size": 1}, {"data_parallel_shard_degree": -1, "tensor_parallel_degree": 3},
     "do not split into tp × pp × cp = 3"),
    ({"global_batch_size": -1}, {"data_parallel_shard_degree": 8}, "give local_batch_size too"),
    ({"local_batch_size": 0}, {"data_parallel_shard_degree": 8}, "local_batch_size must be a whole degree"),
])
def test_what_cannot_be_read_is_refused_with_the_fix(training, parallelism, match):
    with pytest.raises(GpuplanError, match=match):
        _sc(8 if parallelism.get("tensor_parallel_degree") != 3 else 64, training, parallelism)


def test_a_degree_given_both_ways_must_agree():
    with pytest.raises(GpuplanError, match="data_parallel_shard_degree: 8 means layout.dp 8, but layout.dp is 4"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                        "layout": {"dp": 4, "data_parallel_shard_degree": 8}})
