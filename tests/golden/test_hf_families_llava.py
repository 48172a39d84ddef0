"""Golden parameter counts of LLaVA (model_type llava), LLaVA-NeXT (llava_next), LLaVA-OneVision (llava_onevision),
PaliGemma (paligemma), Idefics3 and SmolVLM (idefics3, smolvlm) read from config.json: the decoder of text_config,
the vision tower (CLIP or SigLIP) and the projector counted apart. The reference is transformers 5.24.0's own count
on the meta device, ``AutoModelForImageTextToText.from_config(LlavaConfig(...))`` (and the other config classes),
``sum(p.numel() for p in model.parameters())``, split by the names under the vision tower and projector."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# llava-hf/llava-1.5-7b-hf config.json shape keys: a Vicuna-7B (Llama) decoder of 32,064 tokens, CLIP ViT-L/14-336
LLAVA15_TEXT = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
                "max_position_embeddings": 4096, "tie_word_embeddings": False}
CLIP_L336 = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
             "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
             "projection_dim": 768}
SMALL_TEXT = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 40000}
SMALL_SIGLIP = {"model_type": "siglip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 64, "patch_size": 16}
SMALL_GEMMA = {"model_type": "gemma", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
               "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 40000, "head_dim": 32}
SMALL_VISION = {"model_type": "clip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 64, "patch_size": 16}


@pytest.mark.parametrize("config, language, apart", [
    # LLaVA-1.5-7B: 7,063,427,072 = the decoder + 303,507,456 (CLIP tower) + 20,979,712 (projector)
    ({"model_type": "llava", "text_config": LLAVA15_TEXT, "vision_config": CLIP_L336}, 6_738_939_904, 324_487_168),
    # LlavaConfig's defaults: a Llama-7B decoder of 32,000 tokens, the same tower
    ({"model_type": "llava"}, 6_738_415_616, 324_487_168),
    ({"model_type": "llava", "text_config": SMALL_TEXT, "vision_config": SMALL_VISION}, 22_841_600, 597_376),
    ({"model_type": "llava", "text_config": {**SMALL_TEXT, "model_type": "mistral"}, "vision_config": SMALL_VISION},
     22_841_600, 597_376),
    # two feature layers into a bias-free projector: 2 x 128 x 256 + 256 x 256
    ({"model_type": "llava", "text_config": SMALL_TEXT, "vision_config": SMALL_VISION,
      "multimodal_projector_bias": False, "vision_feature_layer": [-2, -1]}, 22_841_600, 629_632),
    # LLaVA-NeXT adds its image_newline vector (text width)
    ({"model_type": "llava_next", "text_config": SMALL_TEXT, "vision_config": SMALL_VISION}, 22_841_600, 597_632),
    # a vision_config that leaves keys out takes CLIPVisionConfig's defaults (ViT-B/32 at 224 px), not LLaVA's tower
    ({"model_type": "llava", "text_config": SMALL_TEXT, "vision_config": {"model_type": "clip_vision_model"}},
     22_841_600, 87_456_000 + 769 * 256 + 257 * 256),
    # LLaVA-OneVision's defaults: Qwen2Config's decoder, SigLIP so400m at 384 px without its head: 12,469,102,112
    ({"model_type": "llava_onevision"}, 12_049_846_272, 419_255_840),
    # a given SigLIP config without vision_use_head keeps the attention-pooling head (132,352 here)
    ({"model_type": "llava_onevision", "text_config": {**SMALL_TEXT, "model_type": "qwen2"},
      "vision_config": SMALL_SIGLIP}, 22_843_648, 729_600),
    # PaliGemma's defaults: a Gemma-2B-shaped decoder, SigLIP so400m at 224 px, one linear to 2,048: 2,910,390,528
    ({"model_type": "paligemma"}, 2_508_531_712, 401_858_816),
    ({"model_type": "paligemma", "text_config": SMALL_GEMMA, "vision_config": SMALL_SIGLIP}, 12_601_600, 894_720),
    # Idefics3 / SmolVLM: a SigLIP tower without its pooling head and the connector's bias-free 4 x 128 -> 256
    # projection (scale_factor 2): 23,470,848; at their defaults 6,909,685,760
    ({"model_type": "idefics3", "text_config": SMALL_TEXT, "vision_config": SMALL_SIGLIP}, 22_841_600, 629_248),
    ({"model_type": "smolvlm", "text_config": SMALL_TEXT, "vision_config": SMALL_SIGLIP}, 22_841_600, 629_248),
    ({"model_type": "smolvlm"}, 6_738_415_616, 171_270_144),
])
def test_llava_reads_its_decoder_and_counts_the_tower_apart(config, language, apart):
    m = load_model(config)
    assert (m.params, m.extra_params, m.frozen_params) == (language, apart, apart)
    assert any("counted apart" in a for a in m.assumed)


def test_a_decoder_gpuplan_does_not_read_is_refused_with_the_fix():
    with pytest.raises(GpuplanError, match="give {params: N}"):
        load_model({"model_type": "llava", "text_config": {**SMALL_TEXT, "model_type": "t5"}})


MLLAMA_SMALL_TEXT = {"hidden_size": 256, "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
                     "intermediate_size": 512, "vocab_size": 40000, "cross_attention_layers": [1, 3]}
MLLAMA_SMALL_VISION = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3, "num_global_layers": 2,
                       "image_size": 56, "patch_size": 14, "max_num_tiles": 2, "vision_output_dim": 640,
                       "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]}


@pytest.mark.parametrize("config, total, apart", [
    # MllamaConfig's defaults (Llama 3.2 11B Vision): transformers' 10,642,941,475, of which the tower (32 local and
    # 8 gated global blocks, tiled position embeddings) and projector 867,749,395
    ({"model_type": "mllama"}, 10_642_941_475, 867_749_395),
    ({"model_type": "mllama", "text_config": MLLAMA_SMALL_TEXT, "vision_config": MLLAMA_SMALL_VISION},
     24_355_595, 921_479),
])
def test_mllama_reads_its_cross_attention_blocks_and_counts_the_tower_apart(config, total, apart):
    m = load_model(config)
    assert (m.params + m.extra_params, m.extra_params) == (total, apart)
    assert sum(g.count for g in m.layers) == m.n_layers and len(m.layers) > 1  # two kinds of blocks, in layer order
    assert any("cross-attention blocks are timed" in a for a in m.assumed)


INTERNVIT_SMALL = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
                   "image_size": [56, 56], "patch_size": [14, 14]}


@pytest.mark.parametrize("config, total", [
    # InternVLConfig's defaults: InternViT-300M, the pixel-shuffle projector, a Qwen2 decoder whose head the wrapper's
    # own tie_word_embeddings (default true) ties: transformers' 11,765,025,792
    ({"model_type": "internvl"}, 11_765_025_792),
    ({"model_type": "internvl", "text_config": SMALL_TEXT, "vision_config": INTERNVIT_SMALL}, 13_274_496),
    # RMSNorm blocks with q/k norms and q/k/v biases, the head untied at the top level
    ({"model_type": "internvl", "text_config": SMALL_TEXT, "tie_word_embeddings": False,
      "vision_config": {**INTERNVIT_SMALL, "norm_type": "rms_norm", "use_qk_norm": True, "attention_bias": True}},
     23_515_648),
])
def test_internvl_reads_its_decoder_and_counts_internvit_apart(config, total):
    m = load_model(config)
    assert m.params + m.extra_params == total and m.extra_params == m.frozen_params > 0
