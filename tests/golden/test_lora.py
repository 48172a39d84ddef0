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
    # parameter of the quantised linear layers; embeddings, norms and the LM head stay as loaded (16-bit) —
    # the norms in fp32 where PEFT's prepare_model_for_kbit_training casts them and TRL casts the embeddings and
    # LM head back to bf16 (the Hugging Face stacks, the generic one)
    training = {"method": "qlora", "lora_rank": 8, "lora_targets": ["q_proj"]}
    sc = make("llama-2-7b")
    g = sc.model.params_by_group()
    linear = g["attention"] + g["mlp"]
    rest = sc.model.params - linear
    tables = 2 * 32000 * 4096  # embeddings and LM head
    adapters = 8 * (4096 + 4096) * 32
    nf4 = linear * (4 + 8 / 64 + 32 / (64 * 256)) / 8
    as_loaded = mem("llama-2-7b", training={**training, "framework": "pytorch-fsdp"})
    prepared = mem("llama-2-7b", training=training)
    assert as_loaded["weights"] == pytest.approx(nf4 + rest * 2 + adapters * 4, rel=1e-4)
    assert prepared["weights"] == pytest.approx(nf4 + tables * 2 + (rest - tables) * 4 + adapters * 4, rel=1e-4)
    # under fp16 TRL casts nothing back (peft_module_casting_to_bf16 runs only with args.bf16): all fp32
    fp16 = mem("llama-2-7b", training={**training, "precision": "fp16"}, gpu="v100-32gb")
    assert fp16["weights"] == pytest.approx(nf4 + rest * 4 + adapters * 4, rel=1e-4)


def test_lora_frozen_base_has_no_gradients_or_adam_states():
    full = mem("llama-3.1-8b")
    lora = mem("llama-3.1-8b", training={"method": "lora"})
    assert lora["gradients"] < 0.02 * full["gradients"]  # 41.9M fp32 adapter grads vs 8.03B bf16
    assert lora["optimizer"] < 0.02 * full["optimizer"]
    assert lora["weights"] == pytest.approx(2 * 8_030_261_248 + 4 * 41_943_040, rel=1e-6)


# ---- activations: what PEFT's adapters and the frozen base keep (model/activations.py lora_terms) ----------

def _per_layer(method: str, targets=None, precision: str = "bf16", framework: str = "generic") -> float:
    """Bytes kept per token per hidden unit by one layer of a small Llama (h 512, f 1408, 8 heads, 2 K/V heads,
    s 256, micro-batch 1, flash attention, rank 16)."""
    from gpuplan.io.scenario import parse_scenario
    from gpuplan.model.act_parts import activation_parts

    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8,
           "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 2000, "tie_word_embeddings": False}
    tr = {"seq_len": 256, "method": method, "lora_rank": 16, "precision": precision, "framework": framework}
    if targets:
        tr["lora_targets"] = targets
    sc = parse_scenario({"model": cfg, "hardware": {"gpu": "h100-sxm", "gpus": 1}, "training": tr})
    per_mb, _, _ = activation_parts(sc.model, sc.training, 1, 1, 1, 1, 0, 1, False, 1, "none")
    return per_mb / 4 / (256 * 512)


# measured (gpuplan, 2026-12-02): PEFT 0.21.2 + transformers 5.24.0 LlamaForCausalLM, torch 2.13 CPU, bf16 base
# weights, CPU autocast to bf16, SDPA, saved_tensors_hooks over one forward, storages counted once, per layer
# (the difference of a 4- and a 2-layer model): full fine-tune 43.08, LoRA on all seven projections 49.73,
# LoRA on q_proj and v_proj 34.11 bytes per token per hidden unit
def test_lora_activations_match_peft_measured_per_layer():
    assert _per_layer("full") == pytest.approx(43.08, abs=0.05)
    assert _per_layer("lora") == pytest.approx(49.73, abs=0.05)
    assert _per_layer("lora", ["q_proj", "v_proj"]) == pytest.approx(34.11, abs=0.05)


def test_torchtune_adapters_keep_the_shared_input_not_a_copy():
    # torchtune's LoRALinear: lora_a(x) keeps x itself; q/k/v share one input, gate/up another, o reads the
    # attention output (already kept), down the MLP's product — so LoRA on all seven keeps the full
    # fine-tune's inputs, the frozen norms' weights drop their normalized tensor, and the rank-r outputs add
    full = _per_layer("full", framework="torchtune", precision="bf16-pure")
    lora = _per_layer("lora", "all-linear", framework="torchtune", precision="bf16-pure")  # its recipes' own omit k
    # the norms keep their 2-byte input either way (no eager-norm fact in torchtune's profile); the rank-16
    # outputs of the 7 adapters add 7 * 16 * 2 / 512 bytes per token per hidden unit
    assert lora - full == pytest.approx(7 * 16 * 2 / 512, abs=1e-9)
