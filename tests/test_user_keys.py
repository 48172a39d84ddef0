"""Keys of a scenario as users write them (io/user_keys.py): read as what they mean and listed under ``assumed``,
not refused — gradient checkpointing switches, FSDP on, a network, accumulation steps, and the optimizer's
hyperparameters, which change neither memory nor time."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate_scenario
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.spec import LORA_TARGETS_ALL


def _read(**sections):
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 64}, **sections}
    sc = parse_scenario(raw)
    return sc, {r[0]: r for r in sc.read_as}


@pytest.mark.parametrize("sections, recompute", [
    ({"layout": {"recompute": True}}, "full"),
    ({"layout": {"recompute": False}}, "none"),
    ({"layout": {"activation_checkpointing": True}}, "full"),
    ({"training": {"gradient_checkpointing": True}}, "full"),                      # Hugging Face TrainingArguments
    ({"training": {"enable_activation_checkpointing": False}}, "none"),            # torchtune recipes
])
def test_a_checkpointing_switch_is_read_as_recompute(sections, recompute):
    sc, reads = _read(**sections)
    assert sc.layout["recompute"] == recompute and reads["layout.recompute"][2] == recompute


@pytest.mark.parametrize("value, zero", [(1, 3), (0, None), (True, 3), (False, None)])
def test_a_tables_0_or_1_fsdp_column_is_the_switch(value, zero):
    # performance tables write FSDP as 0/1; a shard degree is 2 or more, one of 1 would shard nothing
    sc, reads = _read(layout={"fsdp": value})
    assert sc.layout.get("zero") == zero
    if zero:
        assert reads["layout.zero"][1] == ("fsdp: 1" if value == 1 and value is not True else "fsdp: true")


def test_fsdp_on_is_zero_3_and_a_network_is_where_it_runs():
    sc, reads = _read(layout={"fsdp": True}, hardware={"gpu": "h100-sxm", "gpus": 64, "interconnect": "InfiniBand"})
    assert sc.layout["zero"] == 3 and reads["layout.zero"][1] == "fsdp: true"
    assert sc.hardware.scale_out.id.startswith("ib")
    inside, reads = _read(hardware={"gpu": "h100-sxm", "gpus": 64, "network": "NVLink 4"})
    assert "hardware.scale_up" in reads and "hardware.scale_out" not in reads


def test_the_optimizers_hyperparameters_are_set_aside_and_said_so():
    sc, reads = _read(training={"lr": 3e-4, "weight_decay": 0.1, "warmup_steps": 2000, "max_grad_norm": 1.0})
    est = evaluate_scenario(sc).to_json()
    noted = {a["field"] for a in est["assumed"] if a.get("value") == "not used"}
    assert noted == {"training.lr", "training.weight_decay", "training.warmup_steps", "training.max_grad_norm"}
    assert reads["training.lr"][1] == "lr: 0.0003"


@pytest.mark.parametrize("layout, gb", [
    ({"micro_batch": 2}, 4 * 2 * 64),                                  # dp = 64 GPUs
    ({"per_device_train_batch_size": 2, "tp": 2}, 4 * 2 * 32),         # dp = 64 / tp 2, the HF spelling read
    ({"micro_batch": 1, "dp": 8, "tp": 8}, 4 * 1 * 8),
])
def test_accumulation_steps_make_the_global_batch(layout, gb):
    sc, reads = _read(training={"gradient_accumulation_steps": 4}, layout=layout)
    assert sc.training.global_batch == gb and reads["training.global_batch"][2] == gb


def test_an_fp8_switch_is_the_precision_as_bf16_and_fp16_are():
    sc, reads = _read(training={"fp8": True})
    assert sc.training.precision == "fp8" and reads["training.precision"][1] == "fp8: true"


def test_accumulation_steps_beside_the_global_batch_agree_or_fix_the_micro_batch():
    # 64 GPUs: 512 sequences in 4 steps over 64 replicas is a micro-batch of 2 (a run's config states all three)
    sc, reads = _read(training={"gradient_accumulation_steps": 4, "global_batch": 512})
    assert sc.layout["micro_batch"] == 2 and reads["layout.micro_batch"][2] == 2
    sc, reads = _read(training={"gradient_accumulation_steps": 4, "global_batch": 512}, layout={"micro_batch": 2})
    assert sc.training.global_batch == 512 and reads["training.gradient_accumulation_steps"][2] == "not used"
    with pytest.raises(GpuplanError, match=r"\(3\) and training.global_batch \(512\) are both given and do not agree"):
        _read(training={"gradient_accumulation_steps": 3, "global_batch": 512})


@pytest.mark.parametrize("training, layout, words", [
    ({"gradient_accumulation_steps": 4}, {}, "give layout.micro_batch"),
    ({"gradient_accumulation_steps": 4, "global_batch": 512}, {"micro_batch": 1}, "both given"),
    ({"gradient_accumulation_steps": 0}, {"micro_batch": 1}, "whole number of micro-batches"),
    ({"gradient_checkpointing": "sometimes"}, {}, "give true or false"),
])
def test_what_cannot_be_read_is_one_clear_error(training, layout, words):
    with pytest.raises(GpuplanError, match=words):
        _read(training=training, layout=layout)


def test_a_switch_written_as_a_word_is_read_as_every_switch_is():
    # io/words.switch_word: "yes" in quotes is the YAML 1.1 boolean a file meant
    assert _read(training={"gradient_checkpointing": "yes"})[0].layout["recompute"] == "full"
    assert _read(training={"gradient_checkpointing": "Off"})[0].layout.get("recompute", "none") == "none"


def test_epochs_without_a_dataset_size_are_noted_and_more_spellings_are_read():
    raw = {"model": "llama-3.1-8b", "hardware": {"accelerator": "A100-40G", "gpus": 8},
           "training": {"num_train_epochs": 3, "tokens_per_step": "1M", "seq_len": 2048}}
    sc = parse_scenario(raw)
    reads = {r[0]: r for r in sc.read_as}
    assert sc.hardware.gpu.id == "a100-40gb-sxm"
    assert sc.training.global_batch == 512  # "1M" tokens at 2,048: the power of two it rounds, 512 sequences
    epochs = reads["training.num_train_epochs"]
    assert epochs[2] == "not used" and "training.tokens" in epochs[3]


@pytest.mark.parametrize("flag, attention", [("flash_attention", "flash"), ("use_flash_attn", "flash")])
def test_a_flash_attention_switch_is_read_as_the_attention_kernel(flag, attention):
    sc, reads = _read(training={flag: True})
    assert sc.training.attention == attention and reads["training.attention"][1] == f"{flag}: true"
    off, reads = _read(training={flag: "false"})
    assert off.training.attention == "eager" and reads["training.attention"][2] == "eager"


def test_hugging_faces_attn_implementation_is_the_attention_kernel():
    sc, _ = _read(training={"attn_implementation": "eager"})
    assert sc.training.attention == "eager"


@pytest.mark.parametrize("raw, field, value", [
    ({"training": {"micro_batch_size": 4}}, "layout.micro_batch", 4),
    ({"layout": {"seq_len": 4096}}, "training.seq_len", 4096),
    ({"hardware": {"gpu": "h100-sxm", "gpus": 8, "zero": 1}, "layout": {"tp": 2}}, "layout.zero", 1),
])
def test_a_key_under_another_section_is_read_under_its_own_and_said(raw, field, value):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}, **raw})
    section, key = field.split(".")
    got = sc.layout.get(key) if section == "layout" else getattr(sc.training, key)
    assert got == value
    assert [r for r in sc.read_as if r[0] == field and "read under" in r[3]]
    with pytest.raises(GpuplanError, match="given twice"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                        "training": {"micro_batch_size": 4}, "layout": {"micro_batch": 2}})


@pytest.mark.parametrize("raw, message", [
    ({"training": {"batch_size": 256}}, "training.batch_size means different things in different frameworks: give "
                                        "training.global_batch"),
    ({"training": {"nonsense": 1}}, "unknown key training.nonsense: valid keys are seq_len"),
    # a misspelled key: the nearest of its own section's, else of another section's
    ({"training": {"seq_lenn": 1}}, "unknown key training.seq_lenn: did you mean training.seq_len? valid keys"),
    ({"training": {"micro_bach": 2}}, "unknown key training.micro_bach: did you mean layout.micro_batch? valid keys"),
])
def test_a_key_in_the_wrong_section_or_an_ambiguous_one_is_named_with_its_fix(raw, message):
    with pytest.raises(GpuplanError) as err:
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}, **raw})
    assert str(err.value).startswith(message)


def test_a_top_level_key_of_a_section_is_named():
    with pytest.raises(GpuplanError, match="^scenario.gpu is a hardware key: put it under hardware$"):
        parse_scenario({"model": "llama-3.1-8b", "gpu": "h100-sxm"})


@pytest.mark.parametrize("words, fabric", [("infiniband 200", "ib-hdr-200g"), ("IB 400", "ib-ndr-400g"),
                                           ("RoCE 200", "roce-200g"), ("ethernet 25", "eth-25g"),
                                           ("RoCE v2 400G", "roce-400g")])
def test_a_network_with_a_bare_rate_is_that_rate(words, fabric):
    sc, _ = _read(hardware={"gpu": "h100-sxm", "gpus": 64, "scale_out": words})
    assert sc.hardware.scale_out.id == fabric


@pytest.mark.parametrize("key, word, value", [
    # recompute and pipeline schedules as run descriptions and torchtitan's configs write them
    ("recompute", "full AC", "full"),
    ("recompute", "full activation recomputation (FLOP formula counts the extra forward pass)", "full"),
    ("recompute", "activation checkpointing", "full"),
    ("recompute", "per-op SAC", "selective-op"),
    ("recompute", "selective op", "selective-op"),
    ("recompute", "no activation checkpointing", "none"),
    ("pp_schedule", "Interleaved 1F1B", "interleaved"),
    ("pp_schedule", "interleaved 1F1B with scatter/gather optimization", "interleaved"),
    ("pp_schedule", "Interleaved1F1B", "interleaved"),
    ("pp_schedule", "ZBVZeroBubble", "zero-bubble"),
])
def test_layout_words_as_runs_write_them(key, word, value):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "layout": {key: word, "pp": 2}})
    assert sc.layout[key] == value
    assert [r[1:3] for r in sc.read_as if r[0] == f"layout.{key}"] == [(word, value)]


def test_layer_wise_selective_checkpointing_names_its_fix():
    from gpuplan.io.scenario import parse_scenario

    with pytest.raises(GpuplanError, match="give recompute: full with recompute_every: k"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                        "layout": {"recompute": "selective layer"}})


@pytest.mark.parametrize("key, word, value", [
    ("attention", "xformers causal MHA", "flash"), ("attention", "torch SDPA (flash backend)", "flash"),
    ("attention", "PyTorch eager attention", "eager"), ("method", "LoRA r=16", "lora"),
    ("optimizer", "DistributedFusedAdam", "adamw"), ("optimizer", "AdamW 8-bit", "adamw-8bit"),
])
def test_training_words_in_phrases(key, word, value):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}, "training": {key: word}})
    assert getattr(sc.training, key) == value


def test_a_negated_attention_word_is_not_read_as_what_it_negates():
    from gpuplan.catalog.method_words import read_attention

    assert read_attention("no FlashAttention") == ("no FlashAttention", None)  # then refused by spec.Training


@pytest.mark.parametrize("word, stage", [("ZeRO-3", 3), ("stage 2", 2), ("FULL_SHARD", 3), ("SHARD_GRAD_OP", 2),
                                         ("ZeRO stage 1", 1)])
def test_a_zero_stage_as_frameworks_name_it(word, stage):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}, "layout": {"zero": word}})
    assert sc.layout["zero"] == stage
    assert [r[1:3] for r in sc.read_as if r[0] == "layout.zero"] == [(word, stage)]


def test_fsdp_hybrid_shard_shards_inside_a_node():
    from gpuplan.io.scenario import parse_scenario

    # PyTorch FSDP's HYBRID_SHARD: ZeRO-3 inside a node, replicas across nodes (torch ShardingStrategy) — read as
    # ZeRO-3 alone it would shard over all 32 GPUs and under-predict the peak
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 32},
                         "training": {"framework": "FSDP HYBRID_SHARD"}, "layout": {"tp": 2}})
    assert (sc.layout["zero"], sc.layout["zero_group"]) == (3, 4)  # 8 GPUs a node over tp 2
    # the same word as the layout's stage, and a shard group named as the node, read with the node's GPUs
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 32},
                         "layout": {"zero": "HYBRID_SHARD"}})
    assert (sc.layout["zero"], sc.layout["zero_group"]) == (3, 8)
    assert ("layout.zero_group", "HYBRID_SHARD", 8) in [r[:3] for r in sc.read_as]
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 32, "gpus_per_node": 4},
                         "layout": {"zero": 2, "zero_group": "node", "tp": 2}})
    assert (sc.layout["zero"], sc.layout["zero_group"]) == (2, 2)  # 4 GPUs a node over tp 2; the stage as given
    with pytest.raises(GpuplanError, match="do not hold whole tensor × context groups of 3"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 48},
                        "layout": {"zero": 3, "zero_group": "intra-node", "tp": 3}})


def test_distributed_optimizer_and_a_batch_in_tokens():
    from gpuplan.io.scenario import parse_scenario

    # Megatron's distributed optimizer as tables shorten it: ZeRO-1
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16},
                         "training": {"framework": "megatron-lm"}, "layout": {"distributed_optimizer": True}})
    assert sc.layout["zero"] == 1
    # a paper's "4M tokens" as the global batch: 4,000,000 / 4,096 read as 1,024 sequences (the power of two within
    # 5 %: Llama 2, arXiv:2307.09288, Table 1), listed
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16},
                         "training": {"seq_len": 4096, "global_batch": "4M tokens"}})
    assert sc.training.global_batch == 1024
    assert any(r[0] == "training.global_batch_tokens" and r[1] == "global_batch: 4M tokens" for r in sc.read_as)
    with pytest.raises(GpuplanError, match="counts tokens, but global_batch counts sequences"):  # given twice
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                        "training": {"global_batch": "4M tokens", "global_batch_tokens": "4M"}})


@pytest.mark.parametrize("keys, field, value", [
    # the Hugging Face Trainer's and Axolotl's precision switches
    ({"bf16": True}, "precision", "bf16"), ({"fp16": True}, "precision", "fp16"),
    # BitsAndBytesConfig / Axolotl load_in_4bit under LoRA: QLoRA; TRL's use_peft: LoRA
    ({"load_in_4bit": True}, "method", "qlora"), ({"method": "lora", "load_in_4bit": True}, "method", "qlora"),
    ({"use_peft": True}, "method", "lora"),
    # Axolotl's adapter, LLaMA-Factory's finetuning_type, the Trainer's optim
    ({"adapter": "qlora"}, "method", "qlora"), ({"finetuning_type": "lora"}, "method", "lora"),
    ({"optim": "paged_adamw_8bit"}, "optimizer", "adamw-8bit"),
    # Axolotl's lora_target_linear: every linear
    ({"method": "lora", "lora_target_linear": True}, "lora_targets", LORA_TARGETS_ALL),
])
def test_a_fine_tuning_config_s_switches_are_read(keys, field, value):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "training": keys})
    assert getattr(sc.training, field) == value


def test_switches_the_scenario_overrides_or_that_cost_nothing_are_said():
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                         "training": {"precision": "bf16", "fp16": True, "packing": True}})
    read = {r[0]: r for r in sc.read_as}
    assert sc.training.precision == "bf16" and read["training.fp16"][2] == "not used"
    assert read["training.packing"][2] == "not used"
    # an 8-bit base (transformers' load_in_8bit, bitsandbytes LLM.int8) under LoRA: lora-int8
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "training": {"load_in_8bit": True}})
    assert sc.training.method == "lora-int8"
    with pytest.raises(GpuplanError, match="load_in_8bit: true trains an 8-bit base"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                        "training": {"load_in_8bit": True, "method": "qlora"}})


@pytest.mark.parametrize("method, key, outcome", [
    # the method already says what the switch says: read, set aside
    ("qlora", "load_in_4bit", "not used"), ("lora", "use_peft", "not used"), ("qlora", "use_peft", "not used"),
    # a contradiction: a full fine-tune has no frozen 4-bit base and no adapters
    ("full", "load_in_4bit", "method is full"), ("full", "use_peft", "method is full"),
])
def test_a_switch_beside_a_method_is_said_or_refused(method, key, outcome):
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "training": {"method": method, key: True}}
    if outcome == "not used":
        sc = parse_scenario(raw)
        assert sc.training.method == method
        assert {r[0]: r[2] for r in sc.read_as}[f"training.{key}"] == "not used"
    else:
        with pytest.raises(GpuplanError, match=f"{outcome}: set method"):
            parse_scenario(raw)


@pytest.mark.parametrize("method, key, value", [
    # the method as configs spell it is read before it is compared with the switch (it was "method is LoRA" errors)
    ("LoRA", "use_peft", "lora"), ("QLoRA", "load_in_4bit", "qlora"), ("LoRA (r=16)", "use_peft", "lora"),
    ("LoRA", "load_in_4bit", "qlora"),  # a 4-bit load turns LoRA into QLoRA
])
def test_a_method_as_configs_spell_it_beside_a_switch(method, key, value):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                         "training": {"method": method, key: True}})
    assert sc.training.method == value


def test_a_tables_inter_and_intra_node_columns_are_the_fabrics_they_describe():
    # published tables describe the node: "NVLink3 + NVSwitch (DGX A100)", "8x 200 Gb/s HDR InfiniBand HCAs per node"
    sc, reads = _read(hardware={"gpu": "a100-80gb-sxm", "gpus": 64, "intra_node": "NVLink3 + NVSwitch (DGX A100)",
                                "inter_node": "8x 200 Gb/s HDR InfiniBand HCAs per node"})
    assert (sc.hardware.scale_up.id, sc.hardware.scale_out.id) == ("nvlink3", "ib-hdr-200g")
    assert {"hardware.scale_up", "hardware.scale_out"} <= set(reads)
    # a generation the GPU runs cut down (H800's 400 GB/s NVLink 4) stays the GPU's own; no generation: the GPU's own
    assert _read(hardware={"gpu": "h800", "gpus": 16, "intra_node": "4th-generation NVLink"})[0].hardware.scale_up.id \
        == "nvlink4-h800"
    assert _read(hardware={"gpu": "h100-sxm", "gpus": 16, "intra_node": "NVLink + NVSwitch"})[0].hardware.scale_up.id \
        == "nvlink4"
    assert _read(hardware={"gpu": "v100-32gb", "gpus": 16, "intra_node": "NVLink 2.0"})[0].hardware.scale_up.id \
        == "nvlink2"


def test_a_description_naming_another_fabric_beside_nvlink_is_not_read_as_nvlink():
    # README's own example: no NVLink; a network description that mentions the node's NVLink; a bridge between cards
    def fabrics(gpu, **hw):
        sc = _read(hardware={"gpu": gpu, "gpus": 16, **hw})[0]
        return sc.hardware.scale_up.id, sc.hardware.scale_out.id

    assert fabrics("h100-sxm", scale_up="PCIe4, no NVLink")[0] == "pcie4"
    assert fabrics("h100-sxm", scale_out="InfiniBand NDR 400Gb/s, NVLink4 within node")[1] == "ib-ndr-400g"
    assert fabrics("a100-80gb-sxm", interconnect="NVLink3 + NVSwitch, 8x HDR InfiniBand")[1] == "ib-hdr-200g"
    for gpu, text in (("rtx-3090", "NVLink 2-way bridge"), ("h100-nvl", "NVLink4 bridge"), ("gh200", "NVLink-C2C")):
        with pytest.raises(GpuplanError, match="unknown fabric"):
            fabrics(gpu, intra_node=text)


def test_a_deepspeed_config_given_as_the_training_section():
    from gpuplan.io.scenario import parse_scenario

    # DeepSpeed's JSON as users paste it: bf16 as a section with its `enabled` switch, zero_optimization beside the
    # batch keys (a layout block, read under layout: stage 3, the optimizer state on the CPU)
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "a100-80gb", "gpus": 16},
                         "training": {"framework": "deepspeed", "seq_len": 4096, "train_micro_batch_size_per_gpu": 4,
                                      "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
                                      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}})
    assert (sc.training.precision, sc.layout["zero"], sc.layout["offload"], sc.layout["micro_batch"]) == \
        ("bf16", 3, "optimizer", 4)
    assert sc.training.global_batch == 4 * 8 * 16
    assert ("layout.zero_optimization", "training.zero_optimization", "layout") in [r[:3] for r in sc.read_as]
    with pytest.raises(GpuplanError, match="zero_optimization is given twice"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "a100-80gb"},
                        "training": {"zero_optimization": {"stage": 2}}, "layout": {"zero_optimization": {"stage": 3}}})


@pytest.mark.parametrize("gpu, precision", [("rtx-4090", "bf16"), ("v100-32gb", "fp16")])
def test_bf16_auto_is_what_the_gpu_has(gpu, precision):
    from gpuplan.io.scenario import parse_scenario

    # the Trainer's and Axolotl's bf16: auto — bf16 where the GPU has bf16 tensor cores, else fp16; Axolotl's
    # sequence_len is the sequence length
    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": gpu},
                         "training": {"bf16": "auto", "sequence_len": 2048}})
    assert (sc.training.precision, sc.training.seq_len) == (precision, 2048)
    assert ("training.precision", "bf16: auto", "mixed") in [r[:3] for r in sc.read_as]


def test_the_trainers_fsdp_config_block():
    from gpuplan.io.scenario import parse_scenario

    # accelerate's keys (fsdp_ prefix) and the Trainer's (without): the strategy, offload and checkpointing they set
    for prefix in ("fsdp_", ""):
        sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "a100-80gb", "gpus": 8},
                             "training": {"torch_compile": True, "fsdp_config": {
                                 f"{prefix}sharding_strategy": "SHARD_GRAD_OP", f"{prefix}offload_params": False,
                                 f"{prefix}activation_checkpointing": True,
                                 f"{prefix}transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}}})
        assert (sc.layout["zero"], sc.layout["recompute"], sc.training.compile) == (2, "full", True)
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "a100-80gb", "gpus": 8},
                         "layout": {"fsdp": "full_shard", "fsdp_config": {"offload_params": True}}})
    assert (sc.layout["zero"], sc.layout["offload"]) == (3, "params")


@pytest.mark.parametrize("block, recompute, every", [
    # torchtitan's [activation_checkpoint] (job_config.py ActivationCheckpoint): per-op selective, every k-th block
    ({"mode": "selective", "selective_ac_option": "op"}, "selective-op", None),
    ({"mode": "selective", "selective_ac_option": "2"}, "full", 2), ({"mode": "full"}, "full", None),
])
def test_torchtitans_activation_checkpoint_block(block, recompute, every):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "activation_checkpoint": block})
    assert (sc.layout["recompute"], sc.layout.get("recompute_every")) == (recompute, every)
    with pytest.raises(GpuplanError, match="none of torchtitan's modes"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                        "layout": {"activation_checkpoint": {"mode": "memory_budget"}}})


def test_a_llama_factory_config():
    from gpuplan.io.scenario import parse_scenario

    # LLaMA-Factory's keys: stage sft, finetuning_type lora with quantization_bit 4 (QLoRA), lora_target all,
    # cutoff_len the sequence length
    sc = parse_scenario({"model": "qwen2.5-7b", "hardware": {"gpu": "rtx-4090"},
                         "training": {"stage": "sft", "finetuning_type": "lora", "lora_rank": 8, "lora_target": "all",
                                      "quantization_bit": 4, "cutoff_len": 2048}})
    assert (sc.training.method, sc.training.seq_len, sc.training.lora_rank) == ("qlora", 2048, 8)
    assert len(sc.training.lora_targets) == 7  # every linear of the block: q, k, v, o, gate, up, down
    for training, match in (({"stage": "kto"}, "KTO"), ({"quantization_bit": 3}, "give 4 or 8")):
        with pytest.raises(GpuplanError, match=match):
            parse_scenario({"model": "qwen2.5-7b", "hardware": {"gpu": "rtx-4090"}, "training": training})
