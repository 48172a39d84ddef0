"""Scenario keys as the frameworks' own configs spell them (io/schema.py KEY_ALIASES)."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16}}


def test_megatron_and_deepspeed_names_are_the_scenarios_keys():
    megatron = parse_scenario({**BASE, "training": {"seq_length": 8192, "global_batch_size": 512, "train_iters": 100},
                               "layout": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                                          "micro_batch_size": 1, "zero_stage": 1, "recompute_granularity": "selective",
                                          "virtual_pipeline_model_parallel_size": 2}})
    own = parse_scenario({**BASE, "training": {"seq_len": 8192, "global_batch": 512, "steps": 100},
                          "layout": {"tp": 2, "pp": 2, "micro_batch": 1, "zero": 1, "recompute": "selective",
                                     "virtual_stages": 2}})
    assert megatron.layout == own.layout and megatron.training == own.training
    # given, not assumed: the aliases count as the keys they spell
    assert {"layout.tp", "training.global_batch", "training.steps"} <= megatron.given
    hw = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu_type": "h100-sxm", "num_gpus": 16,
                                                                "nproc_per_node": 8}})
    assert (hw.hardware.gpus, hw.hardware.gpus_per_node) == (16, 8)
    # a hardware section as papers' tables give it ("gpu: A100-80GB, count: 2048")
    counted = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "count": 2048}})
    assert counted.hardware.gpus == 2048 and "hardware.gpus" in counted.given


def test_a_key_given_twice_in_two_spellings_is_refused():
    with pytest.raises(GpuplanError, match=r"layout.tp is given twice \(tp and tensor_model_parallel_size\)"):
        parse_scenario({**BASE, "layout": {"tp": 2, "tensor_model_parallel_size": 4}})
    with pytest.raises(GpuplanError, match="unknown key layout.tensor_slicing"):
        parse_scenario({**BASE, "layout": {"tensor_slicing": 2}})  # no framework's or table's name: still an error


def test_the_python_api_takes_the_frameworks_names_as_keywords():
    import gpuplan

    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", num_gpus=16, tensor_model_parallel_size=2,
                           micro_batch_size=2, seq_length=4096).to_json()
    assert (est["scenario"]["layout"]["tp"], est["scenario"]["layout"]["micro_batch"]) == (2, 2)
    with pytest.raises(GpuplanError, match="'tp' is given twice"):
        gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=16, tp=2, tensor_model_parallel_size=4)


def test_nodes_without_a_gpu_count_give_the_count_they_hold():
    # "4 nodes of 8 H100": 32 GPUs, given (plan answers on them); the GPU's usual node when gpus_per_node is open
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "nodes": 4}})
    assert sc.hardware.gpus == 32 and "hardware.gpus" in sc.given
    assert parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_nodes": 2,
                                                                 "gpus_per_node": 4}}).hardware.gpus == 8
    with pytest.raises(GpuplanError, match="does not match gpus / gpus_per_node"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "nodes": 3, "gpus": 16}})
    with pytest.raises(GpuplanError, match="not a whole number of nodes"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "nodes": 1.5}})


def test_a_gpu_named_with_its_count_gives_the_count():
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "8x A100-80GB"}})
    assert (sc.hardware.gpu.id, sc.hardware.gpus) == ("a100-80gb-sxm", 8) and "hardware.gpus" in sc.given
    assert parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "64× H100"}}).hardware.gpus == 64
    with pytest.raises(GpuplanError, match="names 8 GPUs, hardware.gpus is 64: give the count once"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "8x A100 80GB", "gpus": 64}})
    # the count after the name, as cluster inventories write it
    after = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "A100-SXM4-80GB x 16"}}).hardware
    assert (after.gpu.id, after.gpus) == ("a100-80gb-sxm", 16)
    assert parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "H100 ×64"}}).hardware.gpus == 64
    with pytest.raises(GpuplanError, match="names 8 GPUs, hardware.gpus is 64: give the count once"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "A100 x8", "gpus": 64}})
    # nodes of GPUs: the count and the node
    nodes = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "4 servers × 8 A100-80GB"}}).hardware
    assert (nodes.gpu.id, nodes.gpus, nodes.gpus_per_node) == ("a100-80gb-sxm", 32, 8)
    with pytest.raises(GpuplanError, match="names 8 GPUs per node, hardware.gpus_per_node is 4"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "2 nodes of 8x H100", "gpus_per_node": 4}})
    with pytest.raises(GpuplanError, match="'2 nodes of 8x H100' names 16 GPUs, hardware.gpus is 32"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "2 nodes of 8x H100", "gpus": 32}})


def test_sequence_parallel_with_tp_1_is_none_as_megatron_reads_it():
    # a published config's SP column (or a recipe that always sets it) beside tp 1: Megatron-LM's validate_args turns
    # sequence parallelism off there; gpuplan drops it and says so, where it refused the layout before
    sc = parse_scenario({**BASE, "layout": {"tp": 1, "sequence_parallel": True}})
    assert "sequence_parallel" not in sc.layout and "layout.sequence_parallel" not in sc.given
    assert [w[:3] for w in sc.read_as if w[0] == "layout.sequence_parallel"] == \
        [("layout.sequence_parallel", True, False)]
    # with tp > 1, or tp left to the search, it stands
    assert parse_scenario({**BASE, "layout": {"tp": 2, "sequence_parallel": True}}).layout["sequence_parallel"]
    assert parse_scenario({**BASE, "layout": {"sequence_parallel": True}}).layout == {"sequence_parallel": True}


@pytest.mark.parametrize("layout, zero, offload, recompute", [
    # Hugging Face Trainer's fsdp strategy strings and PyTorch's ShardingStrategy names
    ({"fsdp": "full_shard auto_wrap"}, 3, None, None), ({"fsdp": "SHARD_GRAD_OP"}, 2, None, None),
    ({"fsdp": "full_shard offload auto_wrap"}, 3, "params", None), ({"fsdp": "no_shard"}, 0, None, None),
    # Megatron-LM's --use-distributed-optimizer: ZeRO-1
    ({"use_distributed_optimizer": True}, 1, None, None),
    # a checkpointing granularity where a switch was expected
    ({"activation_checkpointing": "selective"}, None, None, "selective"),
    ({"gradient_checkpointing": "true"}, None, None, "full"),
])
def test_sharding_and_checkpointing_as_trainers_write_them(layout, zero, offload, recompute):
    sc = parse_scenario({**BASE, "layout": layout})
    assert (sc.layout.get("zero"), sc.layout.get("offload"), sc.layout.get("recompute")) == (zero, offload, recompute)
    assert any(w[0].startswith("layout.") for w in sc.read_as)


def test_an_fsdp_word_that_names_no_strategy_is_one_line():
    with pytest.raises(GpuplanError, match="layout.fsdp 'sideways' names no sharding strategy"):
        parse_scenario({**BASE, "layout": {"fsdp": "sideways"}})


def test_a_published_runs_parallelism_section_and_its_words_read_as_the_layout():
    # a published-run table's "parallelism" section (tp, pp, dp, vp, its batch and precision beside them) is the
    # layout; keys of another section move to theirs (io/config_keys.py moved_keys)
    table = parse_scenario({**BASE, "parallelism": {"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 4,
                                                    "vp": 2, "global_batch": 256, "precision": "bf16"},
                            "training": {"seq_len": 4096}})
    own = parse_scenario({**BASE, "layout": {"tp": 2, "pp": 2, "dp": 4, "virtual_stages": 2},
                          "training": {"seq_len": 4096, "global_batch": 256, "precision": "bf16"}})
    assert table.layout == own.layout and table.training == own.training
    # torchtitan's pipeline_parallel_schedule; its local_batch_size is no micro-batch under a pipeline but the
    # per-replica batch its micro-batches split (io/titan_keys.py), and "schedule" elsewhere is a learning-rate
    # schedule: not read
    titan = parse_scenario({**BASE, "layout": {"pp": 2, "pipeline_parallel_schedule": "Interleaved1F1B"}})
    assert titan.layout["pp_schedule"] == "interleaved"
    titan = parse_scenario({**BASE, "layout": {"pp": 2, "local_batch_size": 2}})
    assert (titan.layout["micro_batch"], titan.training.global_batch) == (1, 2 * 8)  # dp: 16 GPUs over pp 2
    with pytest.raises(GpuplanError, match="unknown key layout.schedule"):
        parse_scenario({**BASE, "layout": {"pp": 2, "schedule": 2}})
    # llm-foundry's table columns: its FSDP sharding and gradient accumulation beside the micro-batch
    foundry = parse_scenario({**BASE, "parallelism": {"dp": 16, "fsdp_sharding": "FULL_SHARD", "grad_accum": 2,
                                                      "micro_batch": 4}})
    assert (foundry.layout["zero"], foundry.training.global_batch) == (3, 16 * 4 * 2)
    with pytest.raises(GpuplanError, match=r"layout.tp is given twice \(parallelism.tp and layout.tp\)"):
        parse_scenario({**BASE, "parallelism": {"tp": 2}, "layout": {"tp": 4}})
    with pytest.raises(GpuplanError, match="must be mappings"):
        parse_scenario({**BASE, "parallelism": "3D"})


def test_accelerates_mixed_precision_and_a_model_named_in_a_mapping():
    def precision(word):
        return parse_scenario({**BASE, "training": {"mixed_precision": word}}).training.precision

    # accelerate's Accelerator(mixed_precision=...): 'no' (full fp32), 'fp16', 'bf16', 'fp8'
    assert [precision(w) for w in ("no", "fp16", "bf16", "fp8")] == ["fp32", "fp16", "bf16", "fp8"]
    assert precision(False) == "fp32"  # YAML reads an unquoted `mixed_precision: no` as false
    named = parse_scenario({**BASE, "model": {"name": "llama-3.1-8b"}})
    assert named.model.params == parse_scenario(BASE).model.params
    assert any("the model it names" in a for a in named.model.assumed)
    with pytest.raises(GpuplanError, match="unknown model 'no-such-model-xyz'"):
        parse_scenario({**BASE, "model": {"name": "no-such-model-xyz"}})


def test_a_batch_given_both_ways_must_agree_and_a_figure_with_a_remark_is_refused():
    def training(**tr):
        return parse_scenario({**BASE, "training": tr}).training

    # LLaMA's "4M tokens" batch: 2,048 sequences of 2,048 = 4,194,304 tokens, within 5 % of 4M: the sequences read
    assert training(seq_len=2048, global_batch=2048, global_batch_tokens="4M").global_batch == 2048
    assert training(seq_len=2048, global_batch=512, global_batch_tokens=1_048_576).global_batch == 512
    with pytest.raises(GpuplanError, match=r"512 × seq_len 4,096 = 2,097,152 tokens, but .* is 4,000,000"):
        training(seq_len=4096, global_batch=512, global_batch_tokens="4M")
    # a remark after a figure may carry its unit ("1.4 (trillion)", "2 (or 4)"): not read, refused
    with pytest.raises(GpuplanError, match="cannot read training.seq_len"):
        training(seq_len="8192 (default)")


def test_a_model_tables_sequence_length_is_the_runs_where_training_gives_none():
    # Megatron 2021 Table 1's GPT 1.7B row: its model table states seq 2048, the length it trained at
    table = {"name": "GPT 1.7B", "layers": 24, "hidden": 2304, "heads": 24, "kv_heads": 24, "ffn": 9216,
             "vocab": 51200, "seq_len": 2048}
    sc = parse_scenario({**BASE, "model": table})
    assert sc.training.seq_len == 2048
    assert [r[:2] for r in sc.read_as if r[0] == "training.seq_len"] == [("training.seq_len", "model.seq_len: 2048")]
    assert parse_scenario({**BASE, "model": table, "training": {"seq_len": 1024}}).training.seq_len == 1024


def test_a_named_model_with_other_keys_is_not_the_named_one_and_baichuans_length_is_its_own():
    from gpuplan.catalog.models import load_model

    # a name beside a dimension the catalogue model does not have is no silent catalogue model
    with pytest.raises(GpuplanError, match="neither model_type nor params"):
        load_model({"name": "llama-3.1-8b", "num_hidden_layers": 16})
    # Baichuan's configs give model_max_length (4,096: Yang et al. 2023 trained Baichuan 2 at 4,096), not
    # max_position_embeddings
    assert load_model("baichuan2-13b").max_positions == load_model("baichuan-13b").max_positions == 4096


def test_megatrons_command_line_spelling():
    # Megatron-LM's arguments as its launch scripts write them: --tensor-model-parallel-size, dashes for underscores
    sc = parse_scenario({**BASE, "training": {"seq-length": 4096, "global-batch-size": 64},
                         "layout": {"--tensor-model-parallel-size": 2, "pipeline-model-parallel-size": 2,
                                    "micro-batch-size": 1}})
    assert (sc.layout["tp"], sc.layout["pp"], sc.layout["micro_batch"], sc.training.seq_len,
            sc.training.global_batch) == (2, 2, 1, 4096, 64)
    with pytest.raises(GpuplanError, match="given twice"):
        parse_scenario({**BASE, "layout": {"micro-batch-size": 1, "micro_batch_size": 2}})


def test_megatron_core_moe_arguments():
    # the dispatcher and grouped GEMM gpuplan times are said; the router's hyperparameters set aside; what it does not
    # time (the allgather dispatcher, SequentialMLP, token dropping) is one error with the fix
    moe = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "gpus": 16}}
    sc = parse_scenario({**moe, "training": {"framework": "megatron-core", "moe_aux_loss_coeff": 1e-3},
                         "layout": {"ep": 8, "moe_token_dispatcher_type": "alltoall", "moe_grouped_gemm": True,
                                    "moe_router_dtype": "fp32"}})
    said = {r[0]: r[2] for r in sc.read_as}
    assert said["training.moe_dispatcher"] == "alltoall" and said["training.moe_grouped_gemm"] == "as timed"
    assert sc.training.moe_dispatcher == "alltoall"
    assert said["training.moe_aux_loss_coeff"] == said["training.moe_router_dtype"] == "not used"
    for layout, match in (({"moe_token_dispatcher_type": "allgather"}, "allgather dispatcher"),
                          ({"moe_grouped_gemm": False}, "SequentialMLP"),
                          ({"moe_expert_capacity_factor": 1.0}, "token dropping")):
        with pytest.raises(GpuplanError, match=match):
            parse_scenario({**moe, "layout": {"ep": 8, **layout}})
