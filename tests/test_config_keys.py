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
    # a published table's "FSDP 8" column: the shard degree (with 2 replicas: HSDP)
    ({"fsdp": 8, "tp": 2}, {"zero": 3, "dp": 8, "tp": 2}),
    ({"fsdp": 8, "data_parallel_replicate_degree": 2}, {"zero": 3, "dp": 16, "zero_group": 8}),
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


@pytest.mark.parametrize("layout, gpus, expect", [
    # FSDP's CPU offload moves parameters, gradients and optimizer state: at ZeRO-3 that is offload params
    ({"fsdp": "hybrid_shard offload"}, 16, {"zero": 3, "zero_group": 8, "offload": "params"}),
    # a job inside one node: the group is the GPUs it has there
    ({"fsdp": "hybrid_shard"}, 4, {"zero": 3, "zero_group": 4}),
    # tp filling the node: a shard group of one, each replica whole (not ZeRO-3 over every replica)
    ({"fsdp": "hybrid_shard", "tp": 8}, 16, {"tp": 8, "zero": 3, "zero_group": 1}),
])
def test_hybrid_shard_reads_with_the_node(layout, gpus, expect):
    assert _layout(layout, gpus)[0] == expect


@pytest.mark.parametrize("layout, expect", [
    # a framework's spelling beside the config keys: the same field, read once
    ({"zero_stage": 3, "zero_optimization": {"stage": 3}}, {"zero": 3}),
    ({"zero_stage": 3, "fsdp_sharding_strategy": "FULL_SHARD"}, {"zero": 3}),
    ({"dp_size": 16, "dp_shard": 8, "dp_replicate": 2}, {"dp": 16, "zero": 3, "zero_group": 8}),
    # DeepSpeed offloads parameters at stage 3 only
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}},
     {"zero": 2, "offload": "optimizer"}),
    # Megatron reads recompute_method only with --recompute-granularity full: alone it is set aside
    ({"recompute_method": "uniform", "recompute_num_layers": 2}, {}),
])
def test_config_keys_beside_aliases_and_what_they_do_not_say(layout, expect):
    assert _layout(layout)[0] == expect


@pytest.mark.parametrize("layout, message", [
    ({"zero_stage": 2, "zero_optimization": {"stage": 3}}, "layout.zero 3, but layout.zero is 2"),
    ({"fsdp_sharding_strategy": "FULL_SHARD", "zero": 2}, "shards as ZeRO-3, but layout.zero is 2"),
    ({"fsdp": True, "zero": 1}, "shards fully \\(ZeRO-3\\), but layout.zero is 1"),
    ({"dp_shard": 8, "dp_replicate": -1}, "-1 for the shard degree only"),
    ({"recompute": "full", "recompute_method": "sideways"}, "none of Megatron's uniform, block"),
])
def test_a_stage_or_degree_given_two_ways_that_disagree_is_one_error(layout, message):
    with pytest.raises(GpuplanError, match=message):
        _layout(layout)


@pytest.mark.parametrize("training, method", [({"adapter": "qlora", "load_in_4bit": True}, "qlora"),
                                              ({"finetuning_type": "lora", "use_peft": True}, "lora")])
def test_a_method_under_its_framework_spelling_beside_a_peft_switch(training, method):
    # Axolotl's adapter, LLaMA-Factory's finetuning_type: the method the switch then confirms
    assert make("llama-3.1-8b", "h100-sxm", 1, training=training).training.method == method
