"""The frameworks' own config keys for the data-parallel sharding and the recomputation (io/config_keys.py), and
keys in capitals, read as gpuplan's fields and said."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.errors import GpuplanError


def _layout(layout, gpus=16, **training):
    sc = make("llama-3.1-8b", "h100-sxm", gpus, training={"seq_len": 4096, **training}, layout=layout)
    return sc.layout, sc.read_as


@pytest.mark.parametrize("layout, expect", [
    ({"TP": 4, "PP": 2}, {"tp": 4, "pp": 2}),
    # accelerate's FSDP plugin numbers its strategies from 1 (utils/constants.py FSDP_SHARDING_STRATEGY)
    ({"fsdp_sharding_strategy": 1}, {"zero": 3}), ({"fsdp_sharding_strategy": 2}, {"zero": 2}),
    ({"fsdp_sharding_strategy": 3}, {"zero": 0}), ({"fsdp_sharding_strategy": "SHARD_GRAD_OP"}, {"zero": 2}),
    # HYBRID_SHARD shards inside a node: its group is the node's 8 GPUs (not all 16, which would under-count memory)
    ({"fsdp_sharding_strategy": 4}, {"zero": 3, "zero_group": 8}),
    ({"fsdp": "hybrid_shard"}, {"zero": 3, "zero_group": 8}),
    ({"fsdp": "hybrid_shard", "tp": 2}, {"zero": 3, "zero_group": 4, "tp": 2}),
    # Megatron-FSDP's --data-parallel-sharding-strategy
    ({"data_parallel_sharding_strategy": "optim"}, {"zero": 1}),
    ({"data_parallel_sharding_strategy": "optim_grads_params"}, {"zero": 3}),
    # DeepSpeed's zero_optimization block
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}, {"zero": 3, "offload": "params"}),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, {"zero": 2, "offload": "optimizer"}),
    # torchtitan's data_parallel_shard_degree (FSDP) × data_parallel_replicate_degree (DDP): HSDP
    ({"data_parallel_shard_degree": 8, "data_parallel_replicate_degree": 2}, {"zero": 3, "dp": 16, "zero_group": 8}),
    ({"dp_shard": 1, "dp_replicate": 16}, {"dp": 16, "zero": 0}), ({"dp_shard": -1}, {"zero": 3}),
    # Megatron's uniform method recomputes every layer
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
     {"recompute": "full"}),
])
def test_framework_config_keys_read_as_the_layout(layout, expect):
    got, reads = _layout(layout)
    assert got == expect
    assert reads or set(layout) <= {"TP", "PP", "recompute_granularity", "recompute_method", "recompute_num_layers"}


@pytest.mark.parametrize("layout, message", [
    ({"fsdp_sharding_strategy": 7}, "accelerate numbers them 1"),
    ({"data_parallel_sharding_strategy": "everything"}, "none of Megatron-FSDP's"),
    ({"zero_optimization": 2}, "give it as a mapping with its stage"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}, "NVMe .* not modelled"),
    ({"dp_replicate": 2}, "give data_parallel_shard_degree too"),
    ({"recompute": "full", "recompute_method": "block", "recompute_num_layers": 4}, "recompute_every"),
    ({"recompute": "selective", "recompute_method": "uniform"}, "applies to full recomputation"),
    ({"zero": 1, "zero_optimization": {"stage": 2}}, "layout.zero 2, but layout.zero is 1"),
    ({"TP": 2, "tp": 2}, "given twice"),
    ({"fsdp": True, "fsdp_sharding_strategy": 1}, "both name the sharding"),
])
def test_what_the_config_keys_cannot_say_is_one_error_with_the_fix(layout, message):
    with pytest.raises(GpuplanError, match=message):
        _layout(layout)


def test_a_shard_degree_of_one_is_ddp_under_a_stack_that_shards_by_default():
    # torchtitan shards fully unless told (frameworks.json defaults.zero 3): replicate-only is DDP
    got, _ = _layout({"data_parallel_shard_degree": 1, "data_parallel_replicate_degree": 16}, framework="torchtitan")
    assert got["zero"] == 0 and got["dp"] == 16
