"""Golden parameter counts of transformers 5.25's newest decoders read by catalog/families_v5_d: Param2 MoE
(param2moe), Cohere Compass (cohere_compass_text, cohere_compass), MiniMax-M3 (minimax_m3_vl_text, minimax_m3_vl) and
dots.3 Note (dots3_note_text, dots3_note). The reference count is transformers' own, with transformers 5.25.0 and
torch 2.13 on the meta device: ``AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg))`` for a
decoder (Param2 MoE builds Glm4MoeForCausalLM), ``AutoModelForImageTextToText`` for a wrapper, then
``sum(p.numel() for p in model.parameters())``. No released model's config.json was at hand (no network): the config
classes' defaults and small configs exercising each family's flags. HRM-Text (hrm_text) is not read (its stacks run
the same weights in cycles, which a ModelSpec cannot cost): see families_v5_d's docstring."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# Param2MoeConfig defaults (Param2-17B-A2.4B: 21 layers, 64 experts of 2048, top 6, 2 shared, tied)
PARAM2_DEFAULT = {"model_type": "param2moe"}
# small: the released config's own key names (num_experts, num_shared_experts, use_qkv_bias), 2 dense layers, no q/k
# norms, untied
PARAM2_SMALL = {"model_type": "param2moe", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
                "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "moe_intermediate_size": 128,
                "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1, "first_k_dense_replace": 2,
                "use_qkv_bias": True, "use_qk_norm": False, "tie_word_embeddings": False, "vocab_size": 32000}
# an MTP layer asked for (none built), no shared expert, an mlp_layer_types key Glm4Moe ignores
PARAM2_MTP = {"model_type": "param2moe", "num_hidden_layers": 3, "num_mtp_layers": 1, "n_shared_experts": 0,
              "mlp_layer_types": ["sparse", "sparse", "sparse"]}

# CohereCompassTextConfig defaults; transformers builds no model without a RoPE entry per layer type
R1 = {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}
R2 = {"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
COMPASS_DEFAULT = {"model_type": "cohere_compass_text", "rope_parameters": R1}
SMALL_COMPASS = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                 "intermediate_size": 1024, "vocab_size": 32000, "rope_parameters": R1}
# biases, untied, two sliding layers, a head_dim of its own
COMPASS_SMALL = {"model_type": "cohere_compass_text", **SMALL_COMPASS, "attention_bias": True,
                 "tie_word_embeddings": False,
                 "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                 "sliding_window": 1024, "rope_parameters": R2, "head_dim": 32}
# CohereCompassConfig: the default vision tower (Qwen3-VL's), a default or a small decoder; a small tower, tied
COMPASS_WRAPPER_DEFAULT = {"model_type": "cohere_compass", "text_config": {"rope_parameters": R1}}
COMPASS_WRAPPER = {"model_type": "cohere_compass", "text_config": SMALL_COMPASS}
COMPASS_WRAPPER_SMALL = {"model_type": "cohere_compass", "text_config": SMALL_COMPASS, "tie_word_embeddings": True,
                         "vision_config": {"depth": 2, "hidden_size": 256, "intermediate_size": 512, "num_heads": 4,
                                           "out_hidden_size": 512, "deepstack_visual_indexes": [0, 1],
                                           "num_position_embeddings": 1024}}

# MiniMaxM3VLTextConfig defaults (60 layers, 128 experts of 3072 + a shared one, top 4)
M3_DEFAULT = {"model_type": "minimax_m3_vl_text"}
SMALL_M3 = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
            "head_dim": 64, "intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2,
            "dense_intermediate_size": 1024, "shared_intermediate_size": 256, "rotary_dim": 32, "vocab_size": 32000}
# listed sparse-attention (indexer) layers and dense/sparse MLPs
M3_SMALL = {"model_type": "minimax_m3_vl_text", **SMALL_M3, "index_n_heads": 2, "index_head_dim": 64,
            "layer_types": ["full_attention", "minimax_m3_sparse", "full_attention", "minimax_m3_sparse"],
            "mlp_layer_types": ["dense", "sparse", "sparse", "dense"]}
# the released config's legacy keys (sparse_attention_config, moe_layer_freq), tied
M3_LEGACY = {"model_type": "minimax_m3_vl_text", **SMALL_M3, "tie_word_embeddings": True,
             "sparse_attention_config": {"sparse_attention_freq": [0, 1, 1, 0], "sparse_num_index_heads": 3,
                                         "sparse_index_dim": 32}, "moe_layer_freq": [0, 1, 1, 1]}
# MiniMaxM3VLConfig: the default vision tower and projector, a default or a small decoder; a small tower, tied
M3_WRAPPER_DEFAULT = {"model_type": "minimax_m3_vl"}
M3_WRAPPER = {"model_type": "minimax_m3_vl", "text_config": SMALL_M3}
M3_WRAPPER_SMALL = {"model_type": "minimax_m3_vl", "text_config": {**SMALL_M3, "tie_word_embeddings": True},
                    "projector_hidden_size": 1024,
                    "vision_config": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                                      "num_attention_heads": 4, "patch_size": 16, "spatial_merge_size": 2}}

# Dots3NoteTextConfig defaults (46 layers: MLA with DSA indexers on the first two and each 4th from the 2nd, the
# others sliding with their own MLA sizes; 256 experts of 1536, top 8, a shared one)
DOTS_DEFAULT = {"model_type": "dots3_note_text"}
SMALL_DOTS = {"hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 8,
              "q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
              "v_head_dim": 32, "head_dim": 48, "n_routed_experts": 8, "num_experts_per_tok": 2,
              "moe_intermediate_size": 64, "n_shared_experts": 2, "shared_experts_intermediate_size": 96,
              "intermediate_size": 1024, "index_n_heads": 4, "index_head_dim": 32, "vocab_size": 32000,
              "pad_token_id": 0}
# the released config's swa_* sizes of the sliding layers, 2 dense layers, biases, tied, sliding_window_size
DOTS_SMALL = {"model_type": "dots3_note_text", **SMALL_DOTS, "swa_num_attention_heads": 4,
              "swa_num_key_value_heads": 4, "swa_q_lora_rank": 96, "swa_kv_lora_rank": 48, "swa_head_dim": 64,
              "swa_qk_nope_head_dim": 48, "swa_v_head_dim": 40, "first_k_dense_replace": 2, "attention_bias": True,
              "tie_word_embeddings": True, "sliding_window_size": 256}
# a saved config's per_layer_config, listed layer types (full without an indexer) and MLP types
DOTS_PER_LAYER = {"model_type": "dots3_note_text", **SMALL_DOTS,
                  "layer_types": ["full_attention", "sliding_attention", "indexed_attention", "sliding_attention",
                                  "full_attention", "indexed_attention"],
                  "mlp_layer_types": ["dense", "sparse", "dense", "sparse", "sparse", "sparse"],
                  "per_layer_config": {str(i): {"num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 32,
                                                "qk_nope_head_dim": 16, "v_head_dim": 16, "head_dim": 32}
                                       for i in (1, 3)}}
# no DSA indexers, no sliding layers, experts on every 2nd layer
DOTS_NO_DSA = {"model_type": "dots3_note_text", **SMALL_DOTS, "use_dsa": False, "use_sliding_window": False,
               "moe_layer_freq": 2}
# Dots3NoteConfig: the default decoder with the default vision (42 blocks, 17 routed) and audio towers
DOTS_WRAPPER_DEFAULT = {"model_type": "dots3_note"}
SMALL_VISION = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
                "mlp_layer_types": ["dense", "sparse", "sparse"], "num_local_experts": 8, "moe_intermediate_size": 64,
                "per_layer_config": {"2": {"num_local_experts": 4, "num_experts_per_tok": 2}},
                "adapter_in_dim": 128, "adapter_out_dim": 512, "attention_bias": True}
SMALL_AUDIO = {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 512,
               "downsample_hidden_size": 32, "feature_size": 80, "adapter_input_size": 256, "adapter_out_dim": 512,
               "attention_bias": False}
# small towers; the text_config's own tie_word_embeddings (the wrapper's, false, decides)
DOTS_WRAPPER_SMALL = {"model_type": "dots3_note", "text_config": {**SMALL_DOTS, "tie_word_embeddings": True},
                      "vision_config": SMALL_VISION, "audio_config": SMALL_AUDIO}
# a published config: the text keys at the top level, the towers' legacy names (pyramid_num_routed, whisper_config)
DOTS_WRAPPER_FLAT = {"model_type": "dots3_note", **SMALL_DOTS, "tie_word_embeddings": True,
                     "vision_config": {"embed_dim": 128, "intermediate_size": 256, "num_hidden_layers": 3,
                                       "num_heads": 4, "use_bias": True, "pyramid_num_routed": [-1, 4, 8],
                                       "capacity_factor": 3, "moe_intermediate_size": 64, "adapter_in_dim": 128,
                                       "adapter_out_dim": 512, "patch_size": 16},
                     "audio_config": {"whisper_config": {"d_model": 256, "encoder_attention_heads": 4,
                                                         "encoder_layers": 2, "encoder_ffn_dim": 512,
                                                         "num_mel_bins": 80},
                                      "whisper_adapter_in_dim": 256, "whisper_adapter_out_dim": 512,
                                      "downsample_hidden_size": 32}}
# a dense vision tower with MLP biases, audio attention biases
DOTS_WRAPPER_DENSE = {"model_type": "dots3_note", "text_config": SMALL_DOTS,
                      "vision_config": {**SMALL_VISION, "mlp_layer_types": ["dense"] * 3, "mlp_bias": True},
                      "audio_config": {**SMALL_AUDIO, "attention_bias": True}}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.25 Glm4MoeForCausalLM(Param2MoeConfig()), and small configs
    (PARAM2_DEFAULT, 17_151_124_096),
    (PARAM2_SMALL, 42_089_984),
    (PARAM2_MTP, 1_961_113_984),
    # transformers 5.25 CohereCompassForCausalLM, CohereCompassForConditionalGeneration (language model + extra_params)
    (COMPASS_DEFAULT, 34_980_831_232),
    (COMPASS_SMALL, 40_376_320),
    (COMPASS_WRAPPER_DEFAULT, 37_644_932_336),
    (COMPASS_WRAPPER, 608_632_560),
    (COMPASS_WRAPPER_SMALL, 31_737_088),
    # transformers 5.25 MiniMaxM3VLForCausalLM, MiniMaxM3SparseForConditionalGeneration
    (M3_DEFAULT, 447_186_441_216),
    (M3_SMALL, 42_677_504),
    (M3_LEGACY, 26_625_152),
    (M3_WRAPPER_DEFAULT, 448_052_008_448),
    (M3_WRAPPER, 701_213_184),
    (M3_WRAPPER_SMALL, 31_750_144),
    # transformers 5.25 Dots3NoteForCausalLM, Dots3NoteForConditionalGeneration
    (DOTS_DEFAULT, 279_551_718_016),
    (DOTS_SMALL, 25_580_896),
    (DOTS_PER_LAYER, 41_918_240),
    (DOTS_NO_DSA, 43_179_744),
    (DOTS_WRAPPER_DEFAULT, 287_309_195_008),
    (DOTS_WRAPPER_SMALL, 173_033_648),
    (DOTS_WRAPPER_FLAT, 156_674_224),
    (DOTS_WRAPPER_DENSE, 172_937_264),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_param2moe_maps_its_blocks():
    m = load_model(PARAM2_DEFAULT)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 20
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.tied_embeddings) == (64, 6, 2048, 4096, 9216, True)
    assert (m.n_kv_heads, m.head_dim, m.rope_theta) == (8, 64, 500000.0)


def test_cohere_compass_maps_its_blocks():
    m = load_model(COMPASS_DEFAULT)
    assert m.parallel_block and m.norm == "layernorm" and m.tied_embeddings and not m.window_layers
    s = load_model(COMPASS_SMALL)
    assert (s.head_dim, s.sliding_window, s.window_layers) == (32, 1024, (False, True, True, False))
    w = load_model(COMPASS_WRAPPER)
    assert w.model_type == "cohere_compass" and not w.tied_embeddings
    assert w.extra_params == w.frozen_params == 608_632_560 - w.params


def test_minimax_m3_maps_its_blocks():
    m = load_model(M3_DEFAULT)
    assert all(g.moe for g in m.layers) and m.rotary_percent == 0.5
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (128, 4, 3072, 3072, 0)
    s = load_model(M3_SMALL)
    assert [g.moe for g in s.layers for _ in range(g.count)] == [False, True, True, False]
    assert s.ffn == 1024 and any("minimax_m3_sparse layers are timed" in a for a in s.assumed)


def test_dots3_note_maps_its_blocks():
    m = load_model(DOTS_DEFAULT)
    sliding = tuple(not (i < 2 or i % 4 == 1) for i in range(46))
    assert (m.sliding_window, m.window_layers) == (512, sliding)
    assert (m.n_heads, m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.head_dim, m.v_head_dim) == \
        (128, 1024, 512, 64, 192, 128)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (256, 8, 1536, 1536, 13824)
    assert any("main layers' MLA sizes" in a for a in m.assumed)
    w = load_model(DOTS_WRAPPER_DEFAULT)
    assert w.params == m.params and w.extra_params == w.frozen_params == 287_309_195_008 - m.params


@pytest.mark.parametrize("cfg, match", [
    ({**DOTS_SMALL, "per_layer_config": {"9": {"kv_lora_rank": 32}}}, "per_layer_config key '9' must be a layer index"),
    ({**DOTS_SMALL, "per_layer_config": {"1": {"intermediate_size": 32}}}, "per_layer_config key '1'"),
    ({**DOTS_SMALL, "per_layer_config": {"1": {"num_key_value_heads": 4}}}, "dots.3 Note's MLA needs as many"),
    ({**DOTS_SMALL, "layer_types": ["full_attention"] * 5}, "layer_types must list one of"),
    ({**M3_SMALL, "mlp_layer_types": ["dense", "moe", "sparse", "dense"]}, "mlp_layer_types .* must give dense or"),
    ({**DOTS_WRAPPER_SMALL, "vision_config": {**SMALL_VISION, "pyramid_num_routed": [4, 4]}},
     "pyramid_num_routed must give a count of experts"),
])
def test_malformed_lists_are_one_clear_error(cfg, match):
    with pytest.raises(GpuplanError, match=match):
        load_model(cfg)


# the wrapper's small decoder with its sliding layers small too: the released sliding-attention sizes beside a 512-wide
# model are no shape a model ships (their attention core is timed at the model's head dims, an HFU past 100 % under
# the megatron-core alternative); the released config itself evaluates (DOTS_WRAPPER_DEFAULT)
DOTS_WRAPPER_EVAL = {**DOTS_WRAPPER_SMALL, "text_config": {
    **DOTS_WRAPPER_SMALL["text_config"], **{k: v for k, v in DOTS_SMALL.items() if k.startswith("swa_")}}}


@pytest.mark.parametrize("cfg", [PARAM2_SMALL, COMPASS_SMALL, COMPASS_WRAPPER_SMALL, M3_SMALL, M3_WRAPPER_SMALL,
                                 DOTS_SMALL, DOTS_PER_LAYER, DOTS_WRAPPER_EVAL])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)
