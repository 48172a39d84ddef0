"""Golden parameter counts of transformers 5.24's newest decoders: Gemma 4 (gemma4_text, gemma4), Qwen4-Exp
(qwen4_exp_text, qwen4_exp) DeepSeek-V4 (deepseek_v4),
HY-V4 (hy_v4), LFM3 (lfm3) and Cohere 2 MoE (cohere2_moe). The reference count is transformers' own:
``AutoModelForCausalLM.from_config(config)`` on the meta device with transformers 5.24.0,
``sum(p.numel() for p in model.parameters())``. No released model's config.json was at hand (no network): the
config classes' defaults and small configs exercising each family's flags."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model

# Gemma4TextConfig defaults (30 layers, full attention on every 6th with head size 512, per-layer embeddings)
GEMMA4_DEFAULT = {"model_type": "gemma4_text"}
SMALL_G4 = {"num_hidden_layers": 12, "hidden_size": 512, "intermediate_size": 1024, "vocab_size": 32000}
# MoE beside the dense MLP, keys as values on the full layers with one global key/value head, no PLE, untied
GEMMA4_MOE = {"model_type": "gemma4_text", **SMALL_G4, "num_attention_heads": 8, "num_key_value_heads": 2,
              "attention_k_eq_v": True, "num_global_key_value_heads": 1, "enable_moe_block": True, "num_experts": 8,
              "top_k_experts": 2, "moe_intermediate_size": 128, "hidden_size_per_layer_input": 0,
              "tie_word_embeddings": False}
# the last 4 layers reuse earlier layers' keys and values (doubled MLPs there), biases, a smaller PLE
GEMMA4_SHARED_KV = {"model_type": "gemma4_text", **SMALL_G4, "num_kv_shared_layers": 4, "use_double_wide_mlp": True,
                    "attention_bias": True, "vocab_size_per_layer_input": 32000, "hidden_size_per_layer_input": 64}
# per_layer_config as a saved config.json has it
GEMMA4_PER_LAYER = {"model_type": "gemma4_text", **SMALL_G4, "sliding_window": 1024,
                    "layer_types": ["sliding_attention", "full_attention"] + ["sliding_attention"] * 2
                    + ["full_attention"] + ["sliding_attention"] * 6 + ["full_attention"],
                    "per_layer_config": {str(i): {"head_dim": 128, "num_key_value_heads": 1} for i in (1, 4, 11)}}
# Gemma4Config with the vision and audio towers' defaults (counted apart) and a 2-layer decoder
GEMMA4_TOWERS = {"model_type": "gemma4", "vision_config": {}, "audio_config": {},
                 "text_config": {"num_hidden_layers": 2}}
GEMMA4_SMALL_TOWERS = {"model_type": "gemma4", "text_config": {"num_hidden_layers": 2},
                       "vision_config": {"hidden_size": 384, "num_attention_heads": 6, "num_key_value_heads": 3,
                                         "head_dim": 64, "intermediate_size": 1000, "patch_size": 14,
                                         "num_hidden_layers": 3},
                       "audio_config": {"hidden_size": 512, "num_attention_heads": 4,
                                        "subsampling_conv_channels": [64, 16], "conv_kernel_size": 3,
                                        "output_proj_dims": 768, "num_hidden_layers": 2}}

# Qwen4ExpTextConfig defaults with the QSA indexer keys (transformers builds no model without them)
QSA = {"indexer_n_heads": 32, "indexer_kv_heads": 1, "indexer_head_dim": 256, "indexer_budget": 2048,
       "indexer_compress_ratio": 4}
QWEN4_DEFAULT = {"model_type": "qwen4_exp_text", **QSA}
QSA_SMALL = {"num_experts": 8, "num_experts_per_tok": 2, "indexer_n_heads": 4, "indexer_kv_heads": 1,
             "indexer_head_dim": 256, "indexer_budget": 256, "indexer_compress_ratio": 4}
# hashed n-gram per-layer embeddings on layers 1 and 2 (a small n-gram vocabulary base)
QWEN4_PLE = {"model_type": "qwen4_exp_text", "num_hidden_layers": 4, **QSA_SMALL, "ple_layer_ids": [1, 2],
             "eos_token_id": 1, "ngram_vocab_size_base": 1000}
QWEN4_WRAPPER = {"model_type": "qwen4_exp", "text_config": {"num_hidden_layers": 4, **QSA_SMALL}}
# small shapes, 2 streams, listed layer types, partial rotary, tied, PLE with the default 20M n-gram base
QWEN4_SMALL = {"model_type": "qwen4_exp_text", "num_hidden_layers": 8, "hidden_size": 512, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 64, "linear_num_value_heads": 8, "linear_num_key_heads": 4,
               "linear_key_head_dim": 64, "linear_value_head_dim": 64, "num_experts": 16, "num_experts_per_tok": 4,
               "moe_intermediate_size": 128, "shared_expert_intermediate_size": 256, "hc_count": 2,
               "hc_lowrank": 64, "vocab_size": 32000, "tie_word_embeddings": True, "ple_layer_ids": [2, 5],
               "eos_token_id": 2, "ple_embed_dim": 256,
               "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
               "layer_types": ["linear_attention", "linear_attention", "full_attention"] + ["linear_attention"] * 4
               + ["full_attention"],
               "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": 64, "indexer_budget": 512,
               "indexer_compress_ratio": 4}

# DeepseekV4Config defaults: its docstring's DeepSeek-V4-Flash shapes (hidden 4096, 43 layers, 64 heads of 512, o_groups
# 8 x o_lora_rank 1024, 256 experts of 2048, top 6)
DSV4_DEFAULT = {"model_type": "deepseek_v4"}
DSV4_SMALL = {"model_type": "deepseek_v4", "hidden_size": 512, "num_attention_heads": 8, "head_dim": 128,
              "q_lora_rank": 256, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
              "vocab_size": 32000}
# legacy compress_ratios (sliding-only, compressed-sparse, heavily compressed), 2 streams, one hash-routed layer, tied
DSV4_RATIOS = {**DSV4_SMALL, "num_hidden_layers": 6, "o_groups": 4, "o_lora_rank": 128, "hc_mult": 2,
               "index_n_heads": 4, "index_head_dim": 64, "compress_ratios": [0, 4, 128, 0, 4, 128],
               "num_hash_layers": 1, "mlp_bias": True, "tie_word_embeddings": True}
# listed layer_types and mlp_layer_types, other compress rates
DSV4_TYPES = {**DSV4_SMALL, "num_hidden_layers": 4,
              "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                              "compressed_sparse_attention"],
              "compress_rates": {"compressed_sparse_attention": 8, "heavily_compressed_attention": 64},
              "mlp_layer_types": ["moe", "hash_moe", "moe", "moe"]}

# HYV4Config defaults (checkpoint tencent/Hy4-preview in its docstring)
HYV4_DEFAULT = {"model_type": "hy_v4"}
# small: listed dense/sparse MLPs and full/shared indexers, 2 shared experts, biases, 2 streams, tied
HYV4_SMALL = {"model_type": "hy_v4", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
              "q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
              "v_head_dim": 32, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
              "n_shared_experts": 2, "intermediate_size": 1024, "hc_mult": 2, "index_n_heads": 4, "index_head_dim": 32,
              "vocab_size": 32000, "pad_token_id": 0, "attention_bias": True, "tie_word_embeddings": True,
              "mlp_layer_types": ["dense", "dense", "sparse", "sparse", "dense", "sparse"],
              "indexer_types": ["full", "shared", "full", "shared", "shared", "full"]}

# Lfm3Config defaults (its docstring: "LFM3-1.7B style")
LFM3_DEFAULT = {"model_type": "lfm3"}
# small: listed layer types, biases, no attention gate, no sandwich norms, untied
LFM3_SMALL = {"model_type": "lfm3", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "vocab_size": 32000,
              "pad_token_id": 0, "conv_bias": True, "attention_bias": True, "use_attention_gate": False,
              "use_sandwich_norm": False, "tie_word_embeddings": False, "conv_L_cache": 3,
              "layer_types": ["conv", "full_attention", "conv", "sliding_attention", "sliding_attention",
                              "full_attention"]}

# Cohere2MoeConfig defaults
COHERE2_MOE_DEFAULT = {"model_type": "cohere2_moe"}
# small: a dense prefix of 2 (its own width and window pattern), 2 shared experts, RMSNorm, biases, untied
COHERE2_MOE_PREFIX = {"model_type": "cohere2_moe", "hidden_size": 512, "num_hidden_layers": 6,
                      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 256,
                      "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 2, "first_k_dense_replace": 2,
                      "prefix_dense_intermediate_size": 1024, "prefix_dense_sliding_window_pattern": 2,
                      "rms_norm_eps": 1e-6, "attention_bias": True, "tie_word_embeddings": False,
                      "vocab_size": 32000}
# listed mlp_layer_types and layer_types
COHERE2_MOE_TYPES = {"model_type": "cohere2_moe", "hidden_size": 512, "num_hidden_layers": 4,
                     "num_attention_heads": 8, "head_dim": 64, "intermediate_size": 256, "vocab_size": 32000,
                     "mlp_layer_types": ["dense", "sparse", "dense", "sparse"],
                     "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.24 Gemma4ForCausalLM(Gemma4TextConfig())
    (GEMMA4_DEFAULT, 5_077_177_856),
    # transformers 5.24 Gemma4ForConditionalGeneration(Gemma4Config()): no towers by default
    ({"model_type": "gemma4"}, 5_077_177_856),
    # transformers 5.24 Gemma4ForCausalLM, small configs
    (GEMMA4_MOE, 105_750_112),
    (GEMMA4_SHARED_KV, 106_193_216),
    (GEMMA4_PER_LAYER, 877_170_688),
    # transformers 5.24 Gemma4ForConditionalGeneration with vision and audio towers (language model + extra_params)
    (GEMMA4_TOWERS, 1_389_130_528),
    (GEMMA4_SMALL_TOWERS, 940_295_696),
    # transformers 5.24 Qwen4ExpForCausalLM(Qwen4ExpTextConfig(**QSA))
    (QWEN4_DEFAULT, 67_494_649_472),
    # transformers 5.24 Qwen4ExpForCausalLM, small configs; AutoModelForCausalLM of a Qwen4ExpConfig
    (QWEN4_PLE, 1_355_613_760),
    (QWEN4_SMALL, 10_296_479_712),
    (QWEN4_WRAPPER, 1_309_001_280),
    # transformers 5.24 DeepseekV4ForCausalLM(DeepseekV4Config()), and small configs
    (DSV4_DEFAULT, 284_325_869_015),
    (DSV4_RATIOS, 44_089_911),
    (DSV4_TYPES, 75_611_005),
    # transformers 5.24 HYV4ForCausalLM(HYV4Config()), and a small config
    (HYV4_DEFAULT, 58_278_193_133),
    (HYV4_SMALL, 26_935_451),
    # transformers 5.24 Lfm3ForCausalLM(Lfm3Config()), and a small config
    (LFM3_DEFAULT, 1_728_801_536),
    (LFM3_SMALL, 46_944_256),
    # transformers 5.24 Cohere2MoeForCausalLM(Cohere2MoeConfig()), and small configs
    (COHERE2_MOE_DEFAULT, 190_004_928_512),
    (COHERE2_MOE_PREFIX, 55_602_176),
    (COHERE2_MOE_TYPES, 27_666_944),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_gemma4_maps_its_blocks():
    m = load_model(GEMMA4_DEFAULT)
    # Gemma4TextConfig.layer_types: full attention on each 6th layer, a 512-token window on the others
    assert m.sliding_window == 512 and m.window_layers == tuple((i + 1) % 6 != 0 for i in range(30))
    assert (m.head_dim, m.n_kv_heads, m.post_norms, m.tied_embeddings) == (256, 4, True, True)
    assert any("full-attention layers' own (head size 512" in a for a in m.assumed)
    moe = load_model(GEMMA4_MOE)
    assert (moe.n_experts, moe.top_k, moe.moe_ffn, moe.shared_ffn, moe.ffn) == (8, 2, 128, 1024, 0)
    towers = load_model(GEMMA4_TOWERS)
    assert towers.extra_params == towers.frozen_params == 1_389_130_528 - towers.params


def test_qwen4_exp_maps_its_blocks():
    m = load_model(QWEN4_SMALL)
    assert [g.mixer for g in m.layers for _ in range(g.count)] == ["gdn", "gdn", "attention"] + ["gdn"] * 4 + \
        ["attention"]
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.rotary_percent) == (16, 4, 128, 256, 0.25)
    assert m.ssm is not None and any("QSA attention" in a for a in m.assumed)
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="QSA indexer keys"):
        load_model({"model_type": "qwen4_exp_text"})


def test_deepseek_v4_maps_its_blocks():
    m = load_model(DSV4_DEFAULT)
    assert (m.n_kv_heads, m.head_dim, m.sliding_window, m.window_layers) == (1, 512, 128, (True,) * 43)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.rotary_percent) == (256, 6, 2048, 2048, 0.125)
    assert all(g.moe for g in m.layers) and any("compressed keys" in a for a in m.assumed)
    assert round(m.params_active / 1e9, 1) == 13.8


def test_hy_v4_maps_its_blocks():
    m = load_model(HYV4_DEFAULT)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.head_dim, m.v_head_dim) == (1536, 512, 64, 256, 256)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 33
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (256, 8, 768, 768, 6912)


def test_lfm3_maps_its_blocks():
    m = load_model(LFM3_DEFAULT)
    kinds = ["attention" if i % 4 == 2 or (i % 4 == 0 and i) else "conv" for i in range(24)]
    assert [g.mixer for g in m.layers for _ in range(g.count)] == kinds
    assert m.sliding_window == 256 and m.window_layers == tuple(i % 4 == 0 and i > 0 for i in range(24))
    assert (m.n_kv_heads, m.head_dim, m.ffn, m.post_norms, m.tied_embeddings) == (4, 128, 7680, True, True)


def test_cohere2_moe_maps_its_blocks():
    m = load_model(COHERE2_MOE_DEFAULT)
    assert m.parallel_block and m.norm == "layernorm" and all(g.moe for g in m.layers)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (8, 2, 22528, 0, 0)
    assert m.sliding_window == 4096 and m.window_layers == tuple((i + 1) % 4 != 0 for i in range(40))
    p = load_model(COHERE2_MOE_PREFIX)
    assert [g.moe for g in p.layers for _ in range(g.count)] == [False, False] + [True] * 4
    assert (p.ffn, p.shared_ffn, p.norm) == (1024, 512, "rmsnorm")
    assert p.window_layers == (True, False, True, True, True, False)


@pytest.mark.parametrize("cfg", [GEMMA4_MOE, GEMMA4_SHARED_KV, GEMMA4_SMALL_TOWERS, QWEN4_PLE, QWEN4_WRAPPER,
                                 DSV4_RATIOS, DSV4_TYPES, HYV4_SMALL, LFM3_DEFAULT, LFM3_SMALL,
                                 COHERE2_MOE_PREFIX, COHERE2_MOE_TYPES])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)
