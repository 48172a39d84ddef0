"""Golden parameter counts of transformers 5.25's A.X-K1 (axk1), A.X-K2 (axk2), Ling hybrid (bailing_hybrid), ZAYA
(zaya) and Doge (doge). The reference count is transformers' own: ``AutoModelForCausalLM.from_config(config)`` on
the meta device with transformers 5.25.0 (torch 2.13, CPU), ``sum(p.numel() for p in model.parameters())``, the
config built as ``AutoConfig.for_model(model_type, **keys)``. No released model's config.json was at hand (no
network): the config classes' defaults and small configs exercising each family's flags."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

_MLA_SMALL = {"hidden_size": 512, "num_attention_heads": 8, "q_lora_rank": 128, "kv_lora_rank": 64,
              "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "num_experts_per_tok": 2,
              "moe_intermediate_size": 64, "intermediate_size": 1024, "vocab_size": 32000, "bos_token_id": 1,
              "eos_token_id": 2}

# AXK1Config defaults (A.X-K1: DeepSeek-V3's shapes, 192 experts, the first layer dense)
AXK1_DEFAULT = {"model_type": "axk1"}
# small: listed mlp_layer_types, 2 shared experts, grouped routing, attention biases, tied
AXK1_SMALL = {"model_type": "axk1", **_MLA_SMALL, "num_hidden_layers": 6, "n_routed_experts": 8, "n_group": 4,
              "topk_group": 2, "n_shared_experts": 2, "attention_bias": True, "tie_word_embeddings": True,
              "mlp_layer_types": ["dense", "sparse", "dense", "sparse", "sparse", "sparse"]}
# the legacy keys the config class converts (first_k_dense_replace, moe_layer_freq), num_local_experts, no shared
AXK1_LEGACY = {"model_type": "axk1", **_MLA_SMALL, "num_hidden_layers": 6, "num_local_experts": 8, "n_group": 4,
               "topk_group": 2, "n_shared_experts": 0, "first_k_dense_replace": 2, "moe_layer_freq": 2}

# AXK2Config defaults (A.X-K2-Light: 48 layers, 128 experts, the indexer on every layer)
AXK2_DEFAULT = {"model_type": "axk2"}
# small: two dense layers first, smaller gated norms and indexer, 2 shared experts, biases, tied
AXK2_SMALL = {"model_type": "axk2", **_MLA_SMALL, "num_hidden_layers": 6, "n_routed_experts": 8, "n_group": 4,
              "topk_group": 2, "n_shared_experts": 2, "attention_bias": True, "tie_word_embeddings": True,
              "gated_norm_rank": 8, "index_n_heads": 4, "index_head_dim": 32, "first_k_dense_replace": 2}
# listed mlp_layer_types (the gated norm before the MLP only on the sparse ones), no shared expert
AXK2_TYPES = {"model_type": "axk2", **_MLA_SMALL, "num_hidden_layers": 4, "n_routed_experts": 8,
              "n_shared_experts": 0, "mlp_layer_types": ["sparse", "dense", "sparse", "dense"]}

# BailingHybridConfig defaults (Ling 3.0 Flash shapes: 42 layers, MLA on each 6th, 512 experts)
BAILING_DEFAULT = {"model_type": "bailing_hybrid"}
_LING = {"model_type": "bailing_hybrid", "hidden_size": 512, "num_attention_heads": 8, "kv_lora_rank": 64,
         "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "moe_intermediate_size": 64,
         "intermediate_size": 1024, "vocab_size": 32000, "pad_token_id": 0, "eos_token_id": 2}
BAILING_SAVED = {"model_type": "bailing_hybrid", "head_dim": 64, "linear_head_dim": 128, "linear_num_heads": 32}
# small: Ling's key names (num_experts, num_experts_per_token, num_shared_experts), a query LoRA, MLA on each 3rd,
# a 3-tap convolution, biases, tie_word_embeddings (transformers keeps the LM head)
BAILING_SMALL = {**_LING, "num_hidden_layers": 6, "head_dim": 64, "q_lora_rank": 128, "num_experts": 8,
                 "num_experts_per_token": 2, "num_shared_experts": 2, "attention_bias": True,
                 "tie_word_embeddings": True, "layer_group_size": 3, "first_k_dense_replace": 1,
                 "short_conv_kernel_size": 3}
# listed layer_types; moe_layer_freq is not Ling's (every layer from first_k_dense_replace on routes)
BAILING_TYPES = {**_LING, "num_hidden_layers": 4, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
                 "n_shared_experts": 0, "first_k_dense_replace": 1, "moe_layer_freq": 2,
                 "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"]}

# ZayaConfig defaults (ZAYA1-8B: 40 layers, 16 experts, top-1)
ZAYA_DEFAULT = {"model_type": "zaya"}
# small: sliding-window layers, 3-tap depthwise convolution, biases, an untied LM head with its bias
ZAYA_SMALL = {"model_type": "zaya", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "num_experts": 4, "moe_intermediate_size": 256,
              "router_hidden_size": 64, "cca_time0": 3, "cca_time1": 2, "sliding_window": 512,
              "layer_types": ["hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding"], "tie_word_embeddings": False,
              "lm_head_bias": True, "attention_bias": True, "vocab_size": 32000, "pad_token_id": 0, "bos_token_id": 1,
              "eos_token_id": 2}
# multi-head (key/value heads = heads), the tied LM head keeping its own bias
ZAYA_TIED_BIAS = {"model_type": "zaya", "hidden_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "head_dim": 96, "num_experts": 8, "moe_intermediate_size": 128,
                  "lm_head_bias": True, "vocab_size": 32000, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

# DogeConfig defaults (Doge-320M style) and with its cross-domain MoE (16384 experts, top 64)
DOGE_DEFAULT = {"model_type": "doge"}
DOGE_MOE = {"model_type": "doge", "is_moe": True}
# small: the MoE with 1000 experts (31 keys per half), GQA, biases, tied, a sliding window
DOGE_SMALL_MOE = {"model_type": "doge", "hidden_size": 256, "num_hidden_layers": 4, "intermediate_size": 512,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 32000,
                  "is_moe": True, "num_experts": 1000, "num_experts_per_tok": 16, "attention_bias": True,
                  "mlp_bias": True, "tie_word_embeddings": True, "sliding_window": 512}
# dense, GQA, biases
DOGE_SMALL = {"model_type": "doge", "hidden_size": 512, "num_hidden_layers": 6, "intermediate_size": 1536,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "attention_bias": True,
              "mlp_bias": True}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.25.0 AXK1ForCausalLM(AXK1Config()), and small configs
    (AXK1_DEFAULT, 518_983_052_288),
    (AXK1_SMALL, 25_409_376),
    (AXK1_LEGACY, 42_566_272),
    # transformers 5.25.0 AXK2ForCausalLM(AXK2Config()), and small configs
    (AXK2_DEFAULT, 20_314_494_976),
    (AXK2_SMALL, 26_386_656),
    (AXK2_TYPES, 40_679_680),
    # transformers 5.25.0 BailingHybridForCausalLM(BailingHybridConfig()), and small configs
    (BAILING_DEFAULT, 124_414_191_072),
    # the same config as transformers writes it back (BailingHybridConfig.__post_init__ keeps the KDA heads in
    # linear_head_dim / linear_num_heads and overwrites head_dim with qk_rope_head_dim): the same model
    (BAILING_SAVED, 124_414_191_072),
    (BAILING_SMALL, 46_260_800),
    (BAILING_TYPES, 39_115_984),
    # transformers 5.25.0 ZayaForCausalLM(ZayaConfig()), and small configs
    (ZAYA_DEFAULT, 8_840_488_784),
    (ZAYA_SMALL, 42_246_856),
    (ZAYA_TIED_BIAS, 24_759_308),
    # transformers 5.25.0 DogeForCausalLM(DogeConfig()), DogeConfig(is_moe=True), and small configs
    (DOGE_DEFAULT, 403_055_872),
    (DOGE_MOE, 1_485_186_304),
    (DOGE_SMALL_MOE, 12_281_872),
    (DOGE_SMALL, 50_900_248),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_axk1_maps_its_blocks():
    m = load_model(AXK1_DEFAULT)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.head_dim, m.v_head_dim) == (1536, 512, 64, 192, 128)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 60
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (192, 8, 2048, 2048, 18432)
    legacy = load_model(AXK1_LEGACY)
    assert [g.moe for g in legacy.layers for _ in range(g.count)] == [False, False, True, False, True, False]
    with pytest.raises(GpuplanError, match="mlp_layer_types must list 'dense' or 'sparse' for each of the 6 layers"):
        load_model({**AXK1_SMALL, "mlp_layer_types": ["dense", "moe"] * 3})


def test_axk2_maps_its_blocks():
    m = load_model(AXK2_DEFAULT)
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.head_dim, m.v_head_dim) == (384, 128, 32, 96, 64)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 47
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (128, 8, 512, 512, 5120)
    assert any("DeepSeek Sparse Attention" in a for a in m.assumed)
    with pytest.raises(GpuplanError, match="positive q_lora_rank"):
        load_model({**AXK2_TYPES, "q_lora_rank": 0})


def test_bailing_hybrid_maps_its_blocks():
    m = load_model(BAILING_DEFAULT)
    assert [g.mixer for g in m.layers for _ in range(g.count)] == \
        ["attention" if (i + 1) % 6 == 0 else "gdn" for i in range(42)]
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] * 2 + [True] * 40
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (512, 8, 768, 768, 6144)
    assert m.ssm is not None and (m.ssm.heads, m.ssm.head_dim, m.ssm.conv_kernel) == (32, 128, 4)
    assert (m.q_lora_rank, m.kv_lora_rank, m.tied_embeddings) == (0, 512, False)
    assert any("Kimi Delta Attention" in a for a in m.assumed)
    with pytest.raises(GpuplanError, match="layer_types must list one of full_attention, linear_attention for each "
                                           "of the 4 layers"):
        load_model({**BAILING_TYPES, "layer_types": ["linear_attention", "full_attention", "mamba2"]})


def test_zaya_maps_its_blocks():
    m = load_model(ZAYA_SMALL)
    assert m.sliding_window == 512 and m.window_layers == (False, True, False, True)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.ffn, m.n_kv_heads, m.rotary_percent) == (4, 1, 256, 0, 2, 0.5)
    assert all(g.moe for g in m.layers) and any("CCA" in a for a in m.assumed)
    quarter = {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}
    assert load_model({**ZAYA_SMALL, "rope_parameters": {"hybrid": quarter, "hybrid_sliding": quarter}}
                      ).rotary_percent == 0.25
    with pytest.raises(GpuplanError, match="layer_types must list hybrid or hybrid_sliding for each of the 4 layers"):
        load_model({**ZAYA_SMALL, "layer_types": ["hybrid", "sliding_attention", "hybrid", "hybrid"]})
    with pytest.raises(GpuplanError, match="num_experts_per_tok must be 1"):
        load_model({**ZAYA_SMALL, "num_experts_per_tok": 2})
    with pytest.raises(GpuplanError, match="sliding_window"):
        load_model({**ZAYA_SMALL, "sliding_window": None})


def test_doge_maps_its_blocks():
    m = load_model(DOGE_DEFAULT)
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.ffn, m.n_experts, m.sliding_window) == (8, 8, 128, 2048, 0, 0)
    assert any("Dynamic Mask Attention" in a for a in m.assumed)
    moe = load_model(DOGE_MOE)
    assert (moe.n_experts, moe.top_k, moe.moe_ffn, moe.shared_ffn, moe.ffn) == (16384, 64, 1, 2048, 0)
    small = load_model(DOGE_SMALL_MOE)
    assert small.sliding_window == 512 and small.window_layers == (True,) * 4 and small.tied_embeddings


@pytest.mark.parametrize("cfg", [AXK1_SMALL, AXK2_SMALL, BAILING_SMALL, ZAYA_SMALL, DOGE_SMALL_MOE, DOGE_SMALL])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)
