"""LoRA / QLoRA against published counts."""

import pytest
from conftest import make, mem

from gpuplan.api import evaluate_scenario as evaluate


def test_peft_llama2_7b_r8_q_v_trainable_params():
    # source: Hugging Face PEFT's print_trainable_parameters() for Llama-2-7b with LoraConfig(r=8,
    # target_modules=["q_proj", "v_proj"]): "trainable params: 4,194,304" (PEFT docs/README example
    # output) = 8 × (4096 + 4096) × 2 matrices × 32 layers.
    est = evaluate(make("llama-2-7b", training={"method": "lora", "lora_rank": 8,
                                                "lora_targets": ["q_proj", "v_proj"]})).to_json()
    assert est["model"]["params_trainable"] == 4_194_304


def test_lora_all_linear_rank_16_llama_3_8b():
    # r·(in + out) per adapted matrix: q 4096→4096, k/v 4096→1024, o 4096→4096, gate/up 4096→14336,
    # down 14336→4096; 32 layers.
    per_layer = 16 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 3)
    est = evaluate(make("llama-3.1-8b", training={"method": "lora", "lora_rank": 16})).to_json()
    assert est["model"]["params_trainable"] == 32 * per_layer


def test_qlora_base_is_nf4_with_double_quantisation():
    # source: Dettmers et al. 2023, QLoRA (arXiv:2305.14314) Sec. 3: 4 + 8/64 + 32/(64·256) bits per
    # parameter of the quantised linear layers; embeddings, norms and the LM head stay 16-bit.
    m = mem("llama-2-7b", training={"method": "qlora", "lora_rank": 8, "lora_targets": ["q_proj"]})
    sc = make("llama-2-7b")
    g = sc.model.params_by_group()
    linear = g["attention"] + g["mlp"]
    rest = sc.model.params - linear
    adapters = 8 * (4096 + 4096) * 32
    expected = linear * (4 + 8 / 64 + 32 / (64 * 256)) / 8 + rest * 2 + adapters * 4
    assert m["weights"] == pytest.approx(expected, rel=1e-4)


def test_lora_frozen_base_has_no_gradients_or_adam_states():
    full = mem("llama-3.1-8b")
    lora = mem("llama-3.1-8b", training={"method": "lora"})
    assert lora["gradients"] < 0.02 * full["gradients"]  # 41.9M fp32 adapter grads vs 8.03B bf16
    assert lora["optimizer"] < 0.02 * full["optimizer"]
    assert lora["weights"] == pytest.approx(2 * 8_030_261_248 + 4 * 41_943_040, rel=1e-6)
