"""Golden parameter counts of GPT-J, Phi-1.5/2, GPT-BigCode (StarCoder), StableLM, OLMoE and DBRX, read from their
config.json (issue 21: any decoder-only model_type transformers ships with a standard block is read, not
refused). Each config is the model's own config.json as published, shape keys written here (no network).
The reference count is transformers' own: ``AutoModelForCausalLM.from_config(config)`` built on the meta
device with transformers 5.24.0, ``sum(p.numel() for p in model.parameters())`` — the same tensors the
family builders list one by one."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model

# EleutherAI/gpt-j-6b config.json
GPTJ_6B = {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64, "n_positions": 2048,
           "vocab_size": 50400, "activation_function": "gelu_new", "tie_word_embeddings": False}
# microsoft/phi-2 config.json
PHI_2 = {"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "vocab_size": 51200,
         "max_position_embeddings": 2048, "hidden_act": "gelu_new", "qk_layernorm": False, "tie_word_embeddings": False}
# microsoft/phi-1_5 config.json
PHI_1_5 = {"model_type": "phi", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
           "num_attention_heads": 32, "partial_rotary_factor": 0.5, "vocab_size": 51200, "hidden_act": "gelu_new"}
# bigcode/starcoder config.json
STARCODER = {"model_type": "gpt_bigcode", "n_embd": 6144, "n_layer": 40, "n_head": 48, "n_positions": 8192,
             "n_inner": 24576, "vocab_size": 49152, "multi_query": True, "activation_function": "gelu_pytorch_tanh"}
# stabilityai/stablelm-3b-4e1t config.json
STABLELM_3B = {"model_type": "stablelm", "hidden_size": 2560, "intermediate_size": 6912, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.25,
               "vocab_size": 50304, "max_position_embeddings": 4096, "hidden_act": "silu", "use_qkv_bias": False,
               "tie_word_embeddings": False}
# stabilityai/stablelm-2-1_6b config.json (q/k/v biases)
STABLELM_2 = {"model_type": "stablelm", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
              "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352, "use_qkv_bias": True,
              "tie_word_embeddings": False}
# allenai/OLMoE-1B-7B-0924 config.json
OLMOE = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
         "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
         "vocab_size": 50304, "max_position_embeddings": 4096, "tie_word_embeddings": False}

# databricks/dbrx-base config.json (shape keys, with its nested attn_config and ffn_config)
DBRX = {"model_type": "dbrx", "d_model": 6144, "n_heads": 48, "n_layers": 40, "max_seq_len": 32768,
        "vocab_size": 100352, "tie_word_embeddings": False,
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
        "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}


@pytest.mark.parametrize("cfg, reference", [
    # transformers 5.24.0 counts (meta device, the module docstring)
    (GPTJ_6B, 6_050_882_784), (PHI_2, 2_779_683_840), (PHI_1_5, 1_418_270_720), (STARCODER, 15_517_456_384),
    (STABLELM_3B, 2_795_443_200), (STABLELM_2, 1_644_515_328), (OLMOE, 6_919_161_856), (DBRX, 131_596_523_520),
    # DbrxConfig's nested defaults: one key/value head, 4 experts of 3584, top 1
    ({"model_type": "dbrx", "d_model": 1024, "n_heads": 16, "n_layers": 2, "vocab_size": 1000}, 94_598_144),
    # variants the flags switch: Phi with per-head q/k LayerNorms and GQA, GPT-BigCode with multi-head attention,
    # StableLM with per-head q/k norms and one norm for both branches
    ({**PHI_2, "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 16,
      "num_key_value_heads": 4, "vocab_size": 1000, "qk_layernorm": True}, 24_091_112),
    ({**STARCODER, "n_embd": 1024, "n_layer": 2, "n_head": 16, "vocab_size": 1000, "multi_query": False,
      "n_positions": 1024, "n_inner": None}, 27_267_072),
    ({**STABLELM_3B, "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 2,
      "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 1000, "qk_layernorm": True,
      "use_parallel_residual": True}, 20_931_584),
], ids=["gptj-6b", "phi-2", "phi-1.5", "starcoder", "stablelm-3b", "stablelm-2-1.6b", "olmoe-1b-7b", "dbrx",
        "dbrx-defaults",
        "phi-qk-norm-gqa", "bigcode-mha", "stablelm-qk-norm-parallel"])
def test_parameter_count_is_transformers_own(cfg, reference):
    assert load_model(cfg).params == reference


def test_published_sizes():
    # GPT-J model card: "6B"; Phi-2: "2.7 billion parameters"; StarCoder: "15.5B parameter models"; OLMoE paper
    # (arXiv:2409.02060): "1B active and 7B total parameters" (1.3B and 6.9B in its Table 1)
    assert round(load_model(GPTJ_6B).params / 1e9) == 6
    assert round(load_model(PHI_2).params / 1e9, 1) == 2.8  # 2.78B: "2.7" truncated
    assert round(load_model(STARCODER).params / 1e9, 1) == 15.5
    olmoe = load_model(OLMOE)
    assert (round(olmoe.params / 1e9, 1), round(olmoe.params_active / 1e9, 1)) == (6.9, 1.3)
    # Databricks, "Introducing DBRX" (2024-03-27): "132B total parameters of which 36B parameters are active"
    dbrx = load_model(DBRX)
    assert (round(dbrx.params / 1e9), round(dbrx.params_active / 1e9)) == (132, 36)


def test_blocks_as_the_classes_run_them():
    gptj, phi, bigcode, stablelm = (load_model(c) for c in (GPTJ_6B, PHI_2, STARCODER, STABLELM_3B))
    # GPT-J and Phi: attention and MLP read one LayerNorm in parallel; rotary on 64 of 256 dims / 40 %
    assert (gptj.parallel_block, gptj.rotary_percent, gptj.head_dim, gptj.norm) == (True, 0.25, 256, "layernorm")
    assert (phi.parallel_block, phi.rotary_percent, phi.activation) == (True, 0.4, "gelu_new")
    # StarCoder: one key/value head (multi-query), learned positions, tied embeddings
    assert (bigcode.n_kv_heads, bigcode.position, bigcode.tied_embeddings) == (1, "learned", True)
    assert (stablelm.parallel_block, stablelm.gated_mlp, stablelm.rotary_percent) == (False, True, 0.25)
    olmoe, dbrx = load_model(OLMOE), load_model(DBRX)
    assert (olmoe.n_experts, olmoe.top_k, olmoe.moe_ffn, olmoe.ffn) == (64, 8, 1024, 0)
    assert (dbrx.n_experts, dbrx.top_k, dbrx.moe_ffn, dbrx.n_kv_heads, dbrx.norm) == (16, 4, 10752, 8, "layernorm")


@pytest.mark.parametrize("cfg", [GPTJ_6B, PHI_2, STARCODER, STABLELM_3B, OLMOE, {**DBRX, "n_layers": 4}],
                         ids=["gptj", "phi", "gpt_bigcode", "stablelm", "olmoe", "dbrx"])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)  # a model folder's config.json, as a user has it


def test_a_nested_dbrx_config_that_is_not_a_mapping_is_one_clear_error():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="ffn_config must be a mapping"):
        load_model({**DBRX, "ffn_config": [1, 2]})
    with pytest.raises(GpuplanError, match="moe_top_k = 20 is more than the 16 experts"):
        load_model({**DBRX, "ffn_config": {**DBRX["ffn_config"], "moe_top_k": 20}})
