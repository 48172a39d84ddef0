"""Golden parameter counts of the hybrid decoders read from config.json (issue 21, item 5): Nemotron-H
(nemotron_h: Mamba-2, attention, MLP and MoE blocks), Qwen3-Next (qwen3_next) and Qwen3.5 (qwen3_5_text,
qwen3_5_moe_text, and their image-text wrappers qwen3_5 / qwen3_5_moe). The reference is transformers 5.24.0's
own count on the meta device (``AutoModelForCausalLM.from_config``; ``Qwen3_5ForConditionalGeneration`` /
``Qwen3_5MoeForConditionalGeneration`` for the wrappers, total and language model + LM head),
``sum(p.numel() for p in model.parameters())``."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# nvidia/Nemotron-H-8B-Base-8K config.json (the copy in NVIDIA-NeMo/Megatron-Bridge's tests,
# tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py, states the same keys)
NEMOTRON_H_8B = {
    "model_type": "nemotron_h", "attention_head_dim": 128, "chunk_size": 128, "conv_kernel": 4, "hidden_act": "relu2",
    "hidden_size": 4096, "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "intermediate_size": 21504, "layer_norm_epsilon": 1e-05, "mamba_head_dim": 64, "mamba_num_heads": 128,
    "mamba_proj_bias": False, "max_position_embeddings": 8192, "mlp_bias": False, "mlp_hidden_act": "relu2",
    "n_groups": 8, "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "ssm_state_size": 128, "tie_word_embeddings": False, "use_bias": False,
    "use_conv_bias": True, "vocab_size": 131072}
SMALL_MOE = {"model_type": "nemotron_h", "hidden_size": 256, "hybrid_override_pattern": "MEM*EME-",
             "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "mamba_num_heads": 16,
             "mamba_head_dim": 32, "n_groups": 4, "ssm_state_size": 64, "n_routed_experts": 16,
             "num_experts_per_tok": 4, "moe_intermediate_size": 128, "moe_shared_expert_intermediate_size": 192,
             "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": False}
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json shape keys
QWEN3_NEXT_80B = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "linear_num_value_heads": 32, "linear_num_key_heads": 16,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "intermediate_size": 5120, "vocab_size": 151936, "full_attention_interval": 4, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "tie_word_embeddings": False}
# Qwen/Qwen3.5-9B config.json text_config / vision_config shape keys
QWEN35_9B_TEXT = {"full_attention_interval": 4, "head_dim": 256, "hidden_size": 4096, "intermediate_size": 12288,
                  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                  "linear_num_value_heads": 32, "linear_value_head_dim": 128, "num_attention_heads": 16,
                  "num_key_value_heads": 4, "num_hidden_layers": 32, "vocab_size": 248320, "tie_word_embeddings": False}
QWEN35_9B_VISION = {"depth": 27, "hidden_size": 1152, "in_channels": 3, "intermediate_size": 4304, "num_heads": 16,
                    "num_position_embeddings": 2304, "out_hidden_size": 4096, "patch_size": 16, "spatial_merge_size": 2,
                    "temporal_patch_size": 2}
SMALL_GDN_MOE = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                 "head_dim": 32, "linear_num_value_heads": 8, "linear_num_key_heads": 4, "linear_key_head_dim": 32,
                 "linear_value_head_dim": 48, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                 "shared_expert_intermediate_size": 96, "vocab_size": 1000}
SMALL_VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4, "out_hidden_size": 256,
                "num_position_embeddings": 64}


@pytest.mark.parametrize("cfg, total, kinds", [
    # transformers 5.24: NemotronHForCausalLM(Nemotron-H-8B-Base-8K) 8,100,852,736; 24 Mamba-2, 4 attention, 24 MLP
    (NEMOTRON_H_8B, 8_100_852_736, {("mamba2", False, False): 24, ("attention", False, False): 4,
                                    ("none", True, False): 24}),
    (SMALL_MOE, 5_995_408, {("mamba2", False, False): 3, ("none", True, True): 3, ("attention", False, False): 1,
                            ("none", True, False): 1}),
    # with a latent MoE projection, no conv bias, and tie_word_embeddings true (NemotronH never ties: 2,538,080)
    ({**SMALL_MOE, "hybrid_override_pattern": "MEM*E", "moe_latent_size": 64, "tie_word_embeddings": True,
      "use_conv_bias": False}, 2_538_080, {("mamba2", False, False): 2, ("none", True, True): 2,
                                           ("attention", False, False): 1}),
])
def test_nemotron_h_counts_every_block_kind_as_transformers_does(cfg, total, kinds):
    m = load_model(cfg)
    assert m.params == total
    seen: dict[tuple[str, bool, bool], int] = {}
    for lg in m.layers:
        key = (lg.mixer, lg.mlp, lg.moe)
        seen[key] = seen.get(key, 0) + lg.count
    assert seen == kinds
    assert m.position == "none" and m.hybrid and m.attention_layers == kinds.get(("attention", False, False))
    assert any("no measured kernel rate" in a for a in m.assumed)


def test_nemotron_h_reads_the_layer_list_as_the_pattern():
    types = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    pattern = SMALL_MOE["hybrid_override_pattern"]
    listed = {k: v for k, v in SMALL_MOE.items() if k != "hybrid_override_pattern"}
    assert load_model({**listed, "layers_block_type": [types[ch] for ch in pattern]}) == load_model(SMALL_MOE)


@pytest.mark.parametrize("bad, words", [
    ({"hybrid_override_pattern": "M-X"}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": None, "layers_block_type": ["mamba2", "mlp"]}, "layers_block_type"),
    ({"mamba_num_heads": 12, "n_groups": 8}, "not a multiple of n_groups"),
])
def test_a_bad_nemotron_h_config_is_one_clear_error(bad, words):
    with pytest.raises(GpuplanError, match=words):
        load_model({k: v for k, v in {**SMALL_MOE, **bad}.items() if v is not None})


def test_qwen3_next_80b_is_transformers_count_and_the_published_active_count():
    m = load_model(QWEN3_NEXT_80B)
    # transformers 5.24 Qwen3NextForCausalLM: 79,674,391,296; active (10 routed of 512 + the shared expert):
    # 3,874,929,408 — "80B in total and 3B activated" (the model card, the active count without embeddings)
    assert (m.params, m.params_active) == (79_674_391_296, 3_874_929_408)
    assert m.attention_layers == 12 and m.ssm is not None and m.ssm.chunk == 64
    assert {lg.mixer for lg in m.layers} == {"gdn", "attention"}


@pytest.mark.parametrize("mt, text, vision, language, total", [
    # Qwen3_5ForConditionalGeneration(Qwen3.5-9B): language model + head 8,953,803,264, total 9,409,813,744
    ("qwen3_5", QWEN35_9B_TEXT, QWEN35_9B_VISION, 8_953_803_264, 9_409_813_744),
    ("qwen3_5_moe", SMALL_GDN_MOE, SMALL_VISION, 3_722_240, 4_023_360),
])
def test_qwen3_5_image_text_configs_read_the_hybrid_decoder_and_count_the_tower_apart(mt, text, vision, language,
                                                                                      total):
    m = load_model({"model_type": mt, "text_config": text, "vision_config": vision})
    assert (m.params, m.params + m.extra_params, m.frozen_params) == (language, total, total - language)
    assert m.model_type == mt
    # the text model alone (qwen3_5_text / qwen3_5_moe_text): transformers' own count is the language model's
    assert load_model({"model_type": f"{mt}_text", **text}).params == language


@pytest.mark.parametrize("cfg, total, active", [
    # GraniteMoeHybridForCausalLM, transformers 5.24: legacy layer names (mamba / attention, as Granite 4.0's
    # config.json writes them), NoPE, a top-2 MoE beside the gated shared MLP, tied head
    ({"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2,
      "intermediate_size": 128, "shared_intermediate_size": 384, "num_local_experts": 8, "num_experts_per_tok": 2,
      "vocab_size": 1000, "mamba_n_heads": 16, "mamba_n_groups": 2, "mamba_d_state": 32, "mamba_expand": 2,
      "position_embedding_type": "nope", "layer_types": ["mamba", "mamba", "attention", "mamba", "mamba", "attention"],
      "tie_word_embeddings": True}, 8_822_720, 5_283_776),
    # no experts: the shared MLP is the dense MLP; biased attention, no conv bias, untied
    ({"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
      "shared_intermediate_size": 384, "num_local_experts": 0, "vocab_size": 1000, "mamba_n_heads": 8,
      "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 32,
      "layer_types": ["mamba", "attention", "mamba", "mamba"], "tie_word_embeddings": False,
      "mamba_conv_bias": False, "attention_bias": True}, 3_101_896, 3_101_896),
])
def test_granite_4_hybrid_counts_as_transformers_does(cfg, total, active):
    m = load_model({"model_type": "granitemoehybrid", **cfg})
    assert (m.params, m.params_active) == (total, active)
    assert m.attention_layers == sum(t == "attention" for t in cfg["layer_types"])
    assert m.position == ("none" if cfg.get("position_embedding_type") == "nope" else "rope")


def test_granite_4_dense_reads_no_mamba_block():
    # Granite 4.0's dense models (micro) are GraniteMoeHybrid configs listing attention alone: no Mamba block, so no
    # Mamba default is assumed, no scan is timed and the throughput interval is not widened for one.
    # Count as transformers builds it: 1000 x 256 (tied) + 4 x (attention 256 x 256 x 2 + 64 x 256 x 2 + shared MLP
    # 768 x 256 + 256 x 384 + 2 norms of 256) + final norm 256 = 2,093,312
    m = load_model({"model_type": "granitemoehybrid", "hidden_size": 256, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 2, "shared_intermediate_size": 384,
                    "num_local_experts": 0, "vocab_size": 1000, "layer_types": ["attention"] * 4,
                    "tie_word_embeddings": True})
    assert m.params == 2_093_312 and m.ssm is None and m.attention_layers == 4
    assert not [a for a in m.assumed if "mamba" in a or "scan" in a]


@pytest.mark.parametrize("cfg, total", [
    # BambaForCausalLM, transformers 5.24: Mamba-2 blocks, attention on attn_layer_indices, SwiGLU in every block
    ({"hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2,
      "intermediate_size": 512, "vocab_size": 1000, "mamba_n_heads": 16, "mamba_n_groups": 2, "mamba_d_state": 32,
      "attn_layer_indices": [2, 5]}, 4_937_664),
    ({"hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 8, "intermediate_size": 512,
      "vocab_size": 1000, "mamba_n_heads": 8, "mamba_d_head": 64, "tie_word_embeddings": True, "mamba_conv_bias": False,
      "mlp_bias": True, "attention_bias": True, "attn_layer_indices": [1]}, 2_766_384),
])
def test_bamba_counts_as_transformers_does(cfg, total):
    m = load_model({"model_type": "bamba", **cfg})
    assert m.params == total and m.attention_layers == len(cfg["attn_layer_indices"])
    assert m.rotary_percent == 0.5


def test_mamba_heads_that_do_not_tile_the_inner_width_are_one_clear_error():
    with pytest.raises(GpuplanError, match="mamba_n_heads x mamba_d_head"):
        load_model({"model_type": "bamba", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                    "mamba_n_heads": 8, "mamba_d_head": 32})


@pytest.mark.parametrize("cfg, total, attention", [
    # OlmoHybridForCausalLM, transformers 5.24: every 4th block OLMo 2 attention, the rest the gated delta rule
    # with its separate q/k/v/g/a/b/o projections; the delta rule's sizes from OlmoHybridConfig's defaults
    ({"num_hidden_layers": 8}, 6_590_080, 2),
    ({"num_hidden_layers": 3, "num_key_value_heads": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
      "linear_key_head_dim": 32, "linear_value_head_dim": 48, "tie_word_embeddings": True,
      "layer_types": ["linear_attention", "full_attention", "linear_attention"]}, 2_335_936, 1),
    ({"num_hidden_layers": 2}, 1_962_816, 1),  # too few layers for the pattern: the last is made attention
])
def test_olmo_hybrid_counts_as_transformers_does(cfg, total, attention):
    base = {"model_type": "olmo_hybrid", "hidden_size": 256, "num_attention_heads": 8, "intermediate_size": 512,
            "vocab_size": 1000}
    m = load_model({**base, **cfg})
    assert (m.params, m.attention_layers) == (total, attention)
    assert {lg.mixer for lg in m.layers} == {"gdn", "attention"}


FALCON_H1 = {"model_type": "falcon_h1", "hidden_size": 256, "num_attention_heads": 8, "intermediate_size": 512,
             "vocab_size": 1000}


@pytest.mark.parametrize("cfg, total", [
    # FalconH1ForCausalLM, transformers 5.24: attention and Mamba-2 side by side in every block, then SwiGLU
    ({"num_hidden_layers": 3, "num_key_value_heads": 2, "mamba_n_heads": 8, "mamba_d_state": 32, "mamba_d_ssm": 512},
     3_428_616),
    # mamba_d_ssm null: the inner width is mamba_expand x hidden; the gated norm with mamba_rms_norm; biases
    ({"num_hidden_layers": 2, "mamba_n_heads": 16, "mamba_n_groups": 2, "mamba_d_state": 32, "mamba_d_ssm": None,
      "mamba_rms_norm": True, "projectors_bias": True, "mamba_conv_bias": False, "tie_word_embeddings": True,
      "attention_bias": True}, 2_436_960),
    ({"num_hidden_layers": 2, "mamba_n_heads": 8, "mamba_d_state": 32}, 3_444_656),  # FalconH1Config's mamba_d_ssm 1024
])
def test_falcon_h1_counts_as_transformers_does(cfg, total):
    m = load_model({**FALCON_H1, **cfg})
    assert m.params == total
    assert m.attention_layers == m.n_layers and {lg.mixer for lg in m.layers} == {"attention+mamba2"}


KIMI_SMALL = {"model_type": "kimi_linear", "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 8,
              "vocab_size": 1000, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
              "num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "intermediate_size": 512,
              "linear_num_heads": 4, "linear_head_dim": 32}


@pytest.mark.parametrize("cfg, total, attention", [
    # KimiLinearForCausalLM, transformers 5.24: Kimi Delta Attention blocks and MLA (no positional encoding) on every
    # 4th layer from the 5th; the first layer dense, the rest routed + shared experts
    ({}, 4_139_636, 1),
    # a compressed query, two shared experts, tie_word_embeddings true (KimiLinear never ties: its head counted)
    ({"q_lora_rank": 48, "n_shared_experts": 2, "tie_word_embeddings": True}, 4_317_860, 1),
    # the released config's nested linear_attn_config: 1-indexed full / KDA layer lists and the KDA sizes
    ({"linear_num_heads": None, "linear_head_dim": None,
      "linear_attn_config": {"full_attn_layers": [2, 6], "kda_layers": [1, 3, 4, 5], "num_heads": 8, "head_dim": 16,
                             "short_conv_kernel_size": 4}}, 4_153_312, 2),
])
def test_kimi_linear_counts_as_transformers_does(cfg, total, attention):
    m = load_model({k: v for k, v in {**KIMI_SMALL, **cfg}.items() if v is not None})
    assert (m.params, m.attention_layers) == (total, attention)
    assert m.kv_lora_rank == 64 and m.position == "none" and {lg.mixer for lg in m.layers} == {"gdn", "attention"}


def test_kimi_linear_48b_is_the_config_class_defaults():
    # KimiLinearConfig's defaults are Kimi-Linear-48B-A3B's shapes: transformers 5.24 counts 49,133,074,464
    # ("48B total, 3B activated")
    m = load_model({"model_type": "kimi_linear", "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "hidden_size": 2304, "num_hidden_layers": 27, "num_attention_heads": 32,
                    "vocab_size": 163840})
    assert (m.params, m.params_active) == (49_133_074_464, 3_494_852_640)


@pytest.mark.parametrize("cfg, total, attention", [
    # Lfm2ForCausalLM, transformers 5.24: gated short-convolution blocks, GQA attention on full_attn_idxs, SwiGLU
    # of 2/3 intermediate_size rounded up to block_multiple_of (512 here), tied head
    ({"num_hidden_layers": 6, "num_key_value_heads": 2, "intermediate_size": 768, "full_attn_idxs": [2, 5]},
     3_998_080, 2),
    # conv biases, an untied head, a multiplier 1.5 (1000 -> 666 -> 999 -> 1024), layer_types
    ({"num_hidden_layers": 4, "intermediate_size": 1000, "conv_bias": True, "tie_word_embeddings": False,
      "block_ffn_dim_multiplier": 1.5, "layer_types": ["conv", "full_attention", "conv", "conv"]}, 4_714_816, 1),
    ({"num_hidden_layers": 3, "intermediate_size": 700, "block_auto_adjust_ff_dim": False}, 2_657_216, 3),
])
def test_lfm2_counts_as_transformers_does(cfg, total, attention):
    m = load_model({"model_type": "lfm2", "hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1000, **cfg})
    assert (m.params, m.attention_layers) == (total, attention)


@pytest.mark.parametrize("cfg, message", [
    ({**KIMI_SMALL, "layer_types": ["full_attention"] * 5}, "layer_types must list one of .* each of the 6 layers"),
    ({**KIMI_SMALL, "linear_attn_config": {"full_attn_layers": [2], "kda_layers": [1, 3]}},
     "together name each of the 6 layers"),
    ({"model_type": "lfm2", "hidden_size": 256, "num_attention_heads": 8, "num_hidden_layers": 2,
      "layer_types": ["conv", "mamba2"]}, "layer_types must list one of full_attention, conv"),
])
def test_a_wrong_layer_list_is_named(cfg, message):
    with pytest.raises(GpuplanError, match=message):
        load_model(cfg)
