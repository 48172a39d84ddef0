"""A LoRA/QLoRA run that names no target modules or rank gets what the stack it names builds by default
(catalog/stacks.json lora_defaults, each cited), said under `read as`; given values are kept; a stack without a row
and the typical stack adapt every linear at rank 16."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.stacks import named_stack
from gpuplan.model.params import trainable_params
from gpuplan.report.render import estimate_json
from gpuplan.spec import LORA_TARGETS_ALL


def lora(framework: str | None, model: str = "llama-3.1-8b", **training) -> object:
    tr = {"method": "lora", **training, **({"framework": framework} if framework else {})}
    return make(model, gpus=1, training=tr).training


@pytest.mark.parametrize("framework, targets, rank", [
    # huggingface/peft LoraConfig (commit 5d602fdb): r = 8, target_modules None -> the model type's mapping,
    # llama: ['q_proj', 'v_proj'] (src/peft/utils/constants.py)
    ("huggingface", ("q_proj", "v_proj"), 8),
    ("peft", ("q_proj", "v_proj"), 8),
    ("hf-trainer", ("q_proj", "v_proj"), 8),
    # torchtune recipes/configs/llama3_1/8B_lora.yaml: lora_attn_modules [q_proj, v_proj, output_proj],
    # apply_lora_to_mlp True, lora_rank 8
    ("torchtune", ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), 8),
    # unsloth FastLlamaModel.get_peft_model: r = 16, the seven projections
    ("unsloth", LORA_TARGETS_ALL, 16),
    # NeMo 2 nemo/collections/llm/peft/lora.py LoRA: linear_qkv, linear_proj, linear_fc1, linear_fc2, dim 32
    ("nemo", LORA_TARGETS_ALL, 32),
    ("megatron-core", LORA_TARGETS_ALL, 32),
    # LLaMA-Factory finetuning_args.py: lora_target "all", lora_rank 8; ms-swift TunerArguments: all-linear, 8
    ("llama-factory", LORA_TARGETS_ALL, 8),
    ("ms-swift", LORA_TARGETS_ALL, 8),
    # TRL's ModelConfig: lora_r 16, lora_target_modules None (PEFT's mapping)
    ("trl", ("q_proj", "v_proj"), 16),
    ("TRL SFTTrainer", ("q_proj", "v_proj"), 16),
    ("PEFT LoRA", ("q_proj", "v_proj"), 8),  # a description naming PEFT
    # Answer.AI's fsdp_qlora train.py: lora_rank 64, lora_target_modules 'all' = q, k, v, up, down, gate (no o_proj)
    ("fsdp-qlora", ("q_proj", "k_proj", "v_proj", "up_proj", "down_proj", "gate_proj"), 64),
    # no row: axolotl has no default target list (lora_target_modules or lora_target_linear must be set), Lightning
    # builds no adapters itself; the typical stack
    ("axolotl", LORA_TARGETS_ALL, 16),
    ("lightning", LORA_TARGETS_ALL, 16),
    (None, LORA_TARGETS_ALL, 16),
])
def test_a_stack_s_own_lora_default_where_the_run_names_none(framework, targets, rank):
    tr = lora(framework)
    assert (tr.lora_targets, tr.lora_rank) == (targets, rank)


def test_given_targets_and_rank_are_kept_and_a_rank_in_the_method_word_wins():
    tr = lora("huggingface", lora_targets="all-linear", lora_rank=64)
    assert (tr.lora_targets, tr.lora_rank) == (LORA_TARGETS_ALL, 64)
    tr = make("llama-3.1-8b", gpus=1, training={"framework": "huggingface", "method": "LoRA (r=64)"}).training
    assert (tr.lora_targets, tr.lora_rank) == (("q_proj", "v_proj"), 64)


@pytest.mark.parametrize("model, targets", [
    # PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING (src/peft/utils/constants.py, commit 5d602fdb)
    ("falcon-7b", ("query_key_value",)),  # falcon: the fused projection
    ("gpt2-xl", ("c_attn",)),
    ("mpt-7b", ("Wqkv",)),
    ("phi-2", ("q_proj", "v_proj", "fc1", "fc2")),  # phi: the MLP too
    ("mixtral-8x7b", ("q_proj", "v_proj", "!experts")),
    # a model type the mapping does not list: PEFT asks for the modules; the typical all-linear is assumed
    ("deepseek-v3", (*LORA_TARGETS_ALL, "!experts")),
    ("mamba-130m", LORA_TARGETS_ALL),
])
def test_peft_s_default_follows_its_model_type_mapping(model, targets):
    assert lora("huggingface", model=model).lora_targets == targets


def test_a_default_name_the_model_lacks_is_left_out_not_an_error():
    # torchtune's six on GPT-J (q_proj, v_proj, out_proj; fc_in, fc_out) — no gate: the up and down projections
    assert lora("torchtune", model="gpt-j-6b").lora_targets == ("q_proj", "v_proj", "out_proj", "fc_in", "fc_out")


def test_torchtune_default_adapts_six_linears_at_rank_8_exact_count():
    tr = lora("torchtune")
    # Llama 3.1 8B (h 4096, kv 1024, f 14336, 32 layers): rank 8 × (in + out) of q (4096+4096), v (4096+1024),
    # o (4096+4096), gate and up (4096+14336 each), down (14336+4096) — k_proj is not adapted
    per_layer = 8 * ((4096 + 4096) + (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336))
    assert trainable_params(make("llama-3.1-8b", gpus=1).model, "lora", tr.lora_targets, tr.lora_rank) \
        == 32 * per_layer == 19_660_800


def test_the_answer_says_where_the_targets_and_rank_came_from():
    est = evaluate(make("llama-3.1-8b", gpus=1, training={"framework": "huggingface", "method": "lora"}))
    read = {(a["field"], str(a["value"])): a for a in estimate_json(est)["assumed"]}
    assert [a["field"] for a in estimate_json(est)["assumed"]].count("training.lora_targets") == 1  # said once
    targets, rank = read[("training.lora_targets", "q_proj, v_proj")], read[("training.lora_rank", "8")]
    assert targets["given"] == rank["given"] == "huggingface"
    assert "src/peft/tuners/lora/config.py" in targets["rule"] and "r default 8" in rank["rule"]


@pytest.mark.parametrize("word, stack", [
    # the NeMo Framework 24.07 documentation: "NeMo 2.0 is an experimental feature and currently released in the dev
    # container only"; 24.09: "You are viewing the NeMo 2.0 documentation" — a container tag below 24.09 or a toolkit
    # version below 2.0 is NeMo 1, as are its own names
    ("NeMo 24.07", "nemo-1"), ("NVIDIA NeMo 24.05", "nemo-1"), ("NeMo Framework 24.07", "nemo-1"),
    ("NeMo 1.23", "nemo-1"), ("nemo v1.0", "nemo-1"), ("NeMo Megatron", "nemo-1"), ("nemo1", "nemo-1"),
    ("NeMo 24.09", "nemo"), ("NeMo 2.0", "nemo"), ("nemo 25.04", "nemo"), ("NeMo", "nemo"),
    ("Megatron-Bridge 0.1", "nemo"),  # Megatron-Bridge's own 0.x versions are not NeMo's
    ("NeMo 2", "nemo"), ("nemo-2", "nemo"),  # 2 is 2.0
    ("NeMo 24.07 + LoRA", "nemo-1"), ("NeMo Framework 24.07 container", "nemo-1"), ("nemo_toolkit==1.23.0", "nemo-1"),
])
def test_a_nemo_version_names_nemo_1_or_nemo_2(word, stack):
    assert named_stack(word) == stack


def test_nemo_1_adapts_the_fused_qkv_at_32():
    # NeMo 1 nemo/collections/nlp/parts/peft_config.py get_target_modules: lora_cfg.get("target_modules",
    # ["attention_qkv"]); the launcher's peft/llama/squad.yaml: adapter_dim 32
    tr = lora("NeMo 24.07")
    assert (tr.lora_targets, tr.lora_rank, tr.framework) == (("q_proj", "k_proj", "v_proj"), 32, "megatron-core")
