"""A LoRA/QLoRA run that names no target modules or rank gets what the stack it names builds by default
(catalog/stacks.json lora_defaults, each cited), said under `read as`; given values are kept; a stack without a row
and the typical stack adapt every linear at rank 16."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
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


def test_peft_s_query_and_value_default_on_a_model_that_fuses_them():
    # PEFT's mapping for falcon is ['query_key_value'] (src/peft/utils/constants.py): the fused projection
    assert lora("huggingface", model="falcon-7b").lora_targets == ("query_key_value",)


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
    targets, rank = read[("training.lora_targets", "q_proj, v_proj")], read[("training.lora_rank", "8")]
    assert targets["given"] == rank["given"] == "huggingface"
    assert "src/peft/tuners/lora/config.py" in targets["rule"] and "r default 8" in rank["rule"]
