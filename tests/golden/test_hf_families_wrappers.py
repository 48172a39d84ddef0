"""Golden parameter counts of Llama 4's image-text config.json (model_type llama4), DeepSeek-V3.2 (deepseek_v32),
Glm4MoeLite (glm4_moe_lite) and MiniCPM3 (minicpm3) — latent attention —, MiniMax-M2 (minimax_m2) and ERNIE 4.5 MoE
(ernie4_5_moe), read from config.json (issue 21, item 5). The reference
is transformers 5.24.0's own count on the meta device: ``Llama4ForConditionalGeneration(Llama4Config(...))`` for
llama4 (total, and its ``language_model`` parameters alone), ``AutoModelForCausalLM.from_config`` otherwise,
``sum(p.numel() for p in model.parameters())``."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "intermediate_size": 512, "vocab_size": 40000, "max_position_embeddings": 4096}
# meta-llama/Llama-4-Scout-17B-16E config.json vision_config shape keys; its text_config gives Llama4TextConfig's
# defaults (the Scout shape)
SCOUT_VISION = {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16,
                "image_size": 336, "patch_size": 14, "projector_input_dim": 4096, "projector_output_dim": 4096,
                "vision_output_dim": 4096, "pixel_shuffle_ratio": 0.5}
SMALL_TEXT = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
              "head_dim": 32, "intermediate_size": 128, "intermediate_size_mlp": 512, "vocab_size": 4000,
              "num_local_experts": 4, "interleave_moe_layer_step": 2}
SMALL_VISION = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                "image_size": 56, "patch_size": 14, "vision_output_dim": 192, "projector_input_dim": 192,
                "projector_output_dim": 192}


# (text_config, vision_config, transformers' language-model parameters, its total)
@pytest.mark.parametrize("text, vision, language, total", [
    ({}, SCOUT_VISION, 107_769_861_120, 108_641_793_536),          # Llama 4 Scout: 17B active, 109B total
    (SMALL_TEXT, SMALL_VISION, 4_608_256, 5_086_464),
    (SMALL_TEXT, {}, 4_608_256, 422_430_976),                       # Llama4VisionConfig's defaults
])
def test_llama4_image_text_config_reads_its_decoder_and_counts_the_tower_apart(text, vision, language, total):
    m = load_model({"model_type": "llama4", "text_config": text, "vision_config": vision})
    assert (m.params, m.params + m.extra_params) == (language, total)
    assert m.model_type == "llama4"
    assert any("vision tower" in a for a in m.assumed)
    # a shape key text_config leaves out takes Llama4TextConfig's default, said in assumed
    assert any(a.startswith("text_config.vocab_size not given") for a in m.assumed) == ("vocab_size" not in text)


MLA = {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16,
       "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "index_n_heads": 4,
       "index_head_dim": 32}
ERNIE = {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 128}
MLA_NO_INDEX = {k: v for k, v in MLA.items() if not k.startswith("index")}


@pytest.mark.parametrize("model_type, extra, params", [
    # the lightning indexer (wq_b, wk, k_norm with bias, weights_proj) in every block; no router bias parameter
    ("deepseek_v32", {**MLA, "first_k_dense_replace": 1}, 22_030_208),
    ("deepseek_v32", MLA, 22_323_072),                               # DeepseekV32Config: first 3 layers dense
    # Glm4MoeLite: MLA, one shared expert, MoE from the second layer; its router bias a buffer
    ("glm4_moe_lite", MLA_NO_INDEX, 21_960_320),
    ("glm4_moe_lite", {**MLA_NO_INDEX, "mlp_layer_types": ["dense", "sparse", "dense", "sparse"],
                       "n_shared_experts": 2}, 22_205_056),
    # MiniCPM3: dense MLA, tied embeddings, v_head_dim = hidden // heads unless given
    ("minicpm3", {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16}, 12_307_072),
    ("minicpm3", {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16,
                  "mlp_bias": True, "v_head_dim": 16, "tie_word_embeddings": False}, 22_404_736),
    ("minimax_m2", {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 32}, 27_565_824),
    ("ernie4_5_moe", ERNIE, 13_194_508),                             # 2 shared experts, MoE from layer 1
    ("ernie4_5_moe", {**ERNIE, "use_bias": True, "moe_layer_interval": 2, "moe_layer_start_index": 0,
                      "moe_num_shared_experts": 1}, 12_846_920),     # use_bias: the LM head's bias too
    ("ernie4_5_moe", {**ERNIE, "moe_layer_end_index": 2, "moe_num_shared_experts": 0}, 12_603_656),
    ("ernie4_5_moe", {**ERNIE, "use_bias": True, "tie_word_embeddings": False}, 23_481_164),
])
def test_each_family_holds_transformers_count(model_type, extra, params):
    assert load_model({"model_type": model_type, **SMALL, **extra}).params == params


def test_deepseek_v32_says_its_sparse_attention_is_timed_dense():
    m = load_model({"model_type": "deepseek_v32", **SMALL, **MLA})
    assert any("DeepSeek Sparse Attention" in a for a in m.assumed)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False, False, False, True]


def test_mlp_layer_types_must_name_each_layer():
    with pytest.raises(GpuplanError, match="mlp_layer_types"):
        load_model({"model_type": "glm4_moe_lite", **SMALL, **MLA_NO_INDEX, "mlp_layer_types": ["dense", "sparse"]})


# Qwen/Qwen2.5-VL-7B-Instruct config.json: its text keys at the top level, vision_config apart (transformers 5.24:
# Qwen2_5_VLForConditionalGeneration 8,292,166,656 parameters, 7,615,616,512 outside ``visual``)
QWEN25_VL_7B_TEXT = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                     "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False}
QWEN25_VL_7B_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                       "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "in_chans": 3}
SMALL_QVL_VISION = {"depth": 2, "hidden_size": 128, "intermediate_size": 320, "num_heads": 4, "out_hidden_size": 256,
                    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
SMALL_QVL_TEXT = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                  "intermediate_size": 512, "vocab_size": 4000}


@pytest.mark.parametrize("text, vision, language, total", [
    (QWEN25_VL_7B_TEXT, QWEN25_VL_7B_VISION, 7_615_616_512, 8_292_166_656),
    ({**SMALL_QVL_TEXT, "tie_word_embeddings": False}, SMALL_QVL_VISION, 3_164_160, 4_088_704),
    ({**SMALL_QVL_TEXT, "tie_word_embeddings": True}, SMALL_QVL_VISION, 2_140_160, 3_064_704),
])
def test_qwen2_5_vl_reads_its_qwen2_decoder_and_counts_the_vision_transformer_apart(text, vision, language, total):
    flat = load_model({"model_type": "qwen2_5_vl", **text, "vision_config": vision})
    assert (flat.params, flat.params + flat.extra_params) == (language, total)
    assert flat.model_type == "qwen2_5_vl" and any("vision tower" in a for a in flat.assumed)
    # transformers v5 saves the same keys inside text_config (the tie at the top): the same model
    nested = load_model({"model_type": "qwen2_5_vl", "tie_word_embeddings": text["tie_word_embeddings"],
                         "text_config": {k: v for k, v in text.items() if k != "tie_word_embeddings"},
                         "vision_config": vision})
    assert (nested.params, nested.extra_params) == (flat.params, flat.extra_params)


SMALL_Q3VL_TEXT = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                   "head_dim": 32, "intermediate_size": 512, "vocab_size": 4000}
SMALL_Q3VL_VISION = {"depth": 4, "hidden_size": 128, "intermediate_size": 320, "num_heads": 4, "out_hidden_size": 256,
                     "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                     "num_position_embeddings": 64, "deepstack_visual_indexes": [1, 2]}


# transformers 5.24 Qwen3VL(Moe)ForConditionalGeneration: (total, outside ``visual``)
@pytest.mark.parametrize("model_type, text, vision, tie, language, total", [
    ("qwen3_vl", SMALL_Q3VL_TEXT, SMALL_Q3VL_VISION, False, 3_163_520, 5_148_416),
    ("qwen3_vl", SMALL_Q3VL_TEXT, SMALL_Q3VL_VISION, True, 2_139_520, 4_124_416),
    ("qwen3_vl", SMALL_Q3VL_TEXT, {}, False, 3_163_520, 570_112_624),            # Qwen3VLVisionConfig's defaults
    ("qwen3_vl_moe", {**SMALL_Q3VL_TEXT, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128},
     SMALL_Q3VL_VISION, False, 3_165_568, 5_150_464),
])
def test_qwen3_vl_reads_its_qwen3_decoder_and_counts_the_vision_transformer_apart(model_type, text, vision, tie,
                                                                                  language, total):
    m = load_model({"model_type": model_type, "text_config": text, "tie_word_embeddings": tie, "vision_config": vision})
    assert (m.params, m.params + m.extra_params) == (language, total)
    assert m.model_type == model_type and m.moe == (model_type == "qwen3_vl_moe")


# Mistral-Small-3.1-24B shape keys (text_config: Mistral; vision_config: Pixtral) and small configs; transformers 5.24
# Mistral3ForConditionalGeneration: (total, outside the vision tower and the multi-modal projector)
M3_TEXT = {"model_type": "mistral", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 512, "vocab_size": 4000}
M3_VISION = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "patch_size": 14, "image_size": 224}
M3_24B_TEXT = {"model_type": "mistral", "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 32768, "vocab_size": 131072}
M3_24B_VISION = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                 "patch_size": 14, "image_size": 1540}


@pytest.mark.parametrize("text, vision, top, language, total", [
    (M3_24B_TEXT, M3_24B_VISION, {}, 23_572_403_200, 24_011_361_280),
    (M3_TEXT, M3_VISION, {}, 3_163_392, 3_730_944),
    (M3_TEXT, M3_VISION, {"multimodal_projector_bias": True, "vision_feature_layer": [-1, -2]}, 3_163_392, 3_764_224),
])
def test_mistral3_reads_its_mistral_decoder_and_counts_pixtral_apart(text, vision, top, language, total):
    m = load_model({"model_type": "mistral3", "tie_word_embeddings": False, "text_config": text,
                    "vision_config": vision, **top})
    assert (m.params, m.params + m.extra_params) == (language, total)
    assert m.model_type == "mistral3"


@pytest.mark.parametrize("top, text, tied", [
    ({}, {}, True),                                                      # Mistral3Config's default
    ({}, {"tie_word_embeddings": False}, False),                         # a v4 file: the key in text_config
    ({"tie_word_embeddings": False}, {}, False),                         # a v5 file: the key at the top
    ({"tie_word_embeddings": True}, {"tie_word_embeddings": False}, True),
])
def test_mistral3_head_tie_is_read_where_the_file_puts_it(top, text, tied):
    m = load_model({"model_type": "mistral3", "text_config": {**M3_TEXT, **text}, "vision_config": M3_VISION, **top})
    assert m.tied_embeddings == tied
    assert m.params + m.extra_params == (2_706_944 if tied else 3_730_944)  # transformers 5.24, tied and not


@pytest.mark.parametrize("layout, held", [
    ({"dp": 2, "zero": 1}, 1.0),          # every rank holds the whole frozen tower
    ({"dp": 2, "zero": 3}, 0.5),          # FSDP / ZeRO-3 shards it with the rest
])
def test_a_vision_tower_is_held_as_frozen_16_bit_weights(layout, held):
    from gpuplan.model.memory import model_states
    from gpuplan.spec.job import Training

    vlm = load_model({"model_type": "qwen2_5_vl", **QWEN25_VL_7B_TEXT, "vision_config": QWEN25_VL_7B_VISION})
    text = load_model({"model_type": "qwen2", **QWEN25_VL_7B_TEXT})
    assert vlm.frozen_params == vlm.extra_params == 676_550_144
    tr = Training(seq_len=4096, precision="bf16")
    z, nd = layout["zero"], layout["dp"]
    args = (tr, 1, 1, 1, 1, 0, z, nd, nd, "none", nd)
    a, b = model_states(vlm, *args), model_states(text, *args)
    assert a.weights - b.weights == pytest.approx(2 * 676_550_144 * held)
    assert (a.gradients, a.optimizer) == (b.gradients, b.optimizer)  # frozen: no gradient, no optimizer state


MLA_SMALL = {"hidden_size": 256, "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 8,
             "intermediate_size": 512, "moe_intermediate_size": 64, "n_routed_experts": 8, "num_experts_per_tok": 2,
             "kv_lora_rank": 64, "q_lora_rank": 96, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
             "vocab_size": 1000}


@pytest.mark.parametrize("mt, extra, total", [
    # transformers 5.24 Mistral4ForCausalLM: DeepSeek-V3's latent attention and routed + shared experts (every layer
    # routed by default, one shared expert, the router without a score-correction parameter)
    ("mistral4", {}, 3_638_816),
    ("mistral4", {"first_k_dense_replace": 2, "n_shared_experts": 2, "tie_word_embeddings": True}, 3_427_872),
    # GlmMoeDsaForCausalLM (GLM-5): DeepSeek-V3.2's indexer on every layer by default ...
    ("glm_moe_dsa", {"index_n_heads": 4, "index_head_dim": 32}, 3_593_056),
    # ... and none on the layers whose indexer_types entry is "shared" (F/S pattern, or every index_topk_freq-th)
    ("glm_moe_dsa", {"index_n_heads": 4, "index_head_dim": 32, "index_topk_pattern": "FFSFS"}, 3_549_920),
    ("glm_moe_dsa", {"index_n_heads": 4, "index_head_dim": 32, "index_topk_freq": 2}, 3_549_920),
    # DeepseekV3Config's defaults for what a config leaves out: 1 shared expert, the first 3 layers dense
    # (transformers counts 3,485,216: its score-correction bias is a buffer; the released checkpoint stores it,
    # as the count here does: + 2 MoE layers x 8)
    ("deepseek_v3", {}, 3_485_216 + 16),
    ("deepseek_v2", {}, 3_884_576),  # DeepseekV2Config: 2 shared experts
])
def test_latent_attention_families_count_as_transformers_does(mt, extra, total):
    assert load_model({"model_type": mt, **MLA_SMALL, **extra}).params == total


def test_glm5_shared_indexer_layers_are_read_and_a_bad_list_refused():
    m = load_model({"model_type": "glm_moe_dsa", **MLA_SMALL, "indexer_types": ["full", "shared"] * 2 + ["full"]})
    assert sum(lg.count for lg in m.layers if any(".indexer." in w.name for w in lg.weights)) == 3
    with pytest.raises(GpuplanError, match="indexer_types"):
        load_model({"model_type": "glm_moe_dsa", **MLA_SMALL, "indexer_types": ["full"]})
