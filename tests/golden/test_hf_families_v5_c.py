"""Golden parameter counts of transformers 5.25's Lara Mini (lara_mini), Kolibri 1.1 (kolibri1_1), Inkling
(inkling_text; its image/audio-text wrapper inkling_mm_model) and Inkling 2 (inkling2_text; its image-text wrapper
inkling2). The reference count is transformers' own: ``AutoModelForCausalLM.from_config(config)`` (the wrappers:
``AutoModelForImageTextToText``, which AutoModelForCausalLM does not take) on the meta device with transformers 5.25.0
(torch 2.13 CPU), ``sum(p.numel() for p in model.parameters())``. No released model's config.json was at hand (no
network): the config classes' defaults and small configs exercising each family's flags."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# LaraMiniConfig defaults (34 layers: linear, sliding, linear, full, sliding repeated; 128 experts of 512, tied)
LARA_DEFAULT = {"model_type": "lara_mini"}
# small: listed layer types, other gated-delta sizes, attention biases, untied
LARA_SMALL = {"model_type": "lara_mini", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "linear_num_value_heads": 8, "linear_num_key_heads": 4,
              "linear_key_head_dim": 64, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 3,
              "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
              "shared_expert_intermediate_size": 256, "vocab_size": 32000, "attention_bias": True,
              "tie_word_embeddings": False, "sliding_window": 128,
              "layer_types": ["linear_attention", "linear_attention", "sliding_attention", "full_attention",
                              "linear_attention", "full_attention"]}

# Kolibri1_1Config defaults (50 layers, indexed attention on each 5th, 6 of its 10 reading another's K/V)
KOLIBRI_DEFAULT = {"model_type": "kolibri1_1"}
# small: listed layer types and K/V sources, one dense layer, tied
KOLIBRI_SMALL = {"model_type": "kolibri1_1", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
                 "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
                 "moe_intermediate_size": 128, "shared_expert_intermediate_size": 256, "vocab_size": 32000,
                 "index_num_heads": 2, "mlp_only_layers": [0], "mlp_only_intermediate_size": 1024,
                 "tie_word_embeddings": True,
                 "layer_types": ["sliding_attention", "indexed_attention", "sliding_attention", "indexed_attention",
                                 "indexed_attention", "sliding_attention"],
                 "index_layers": [1, 4], "kv_source_layers": [0, 1, 2, 1, 4, 5]}
# small: the default layout on 10 layers, no dense layer, num_local_experts
KOLIBRI_MOE = {"model_type": "kolibri1_1", "hidden_size": 512, "num_hidden_layers": 10, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 16, "moe_intermediate_size": 64,
               "vocab_size": 32000, "index_num_heads": 2, "mlp_only_layers": []}

# InklingTextConfig defaults (66 layers, full attention on each 6th, 256 experts + 2 shared of 3072, all sparse)
INK_DEFAULT = {"model_type": "inkling_text"}
# small: other sliding-layer heads, one dense layer (dense_mlp_idx), smaller relative-bias bank and convolutions
INK_SMALL = {"model_type": "inkling_text", "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "swa_num_attention_heads": 8, "swa_num_key_value_heads": 4,
             "swa_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
             "intermediate_size": 512, "vocab_size": 1000, "dense_mlp_idx": 1, "d_rel": 8, "rel_extent": 256,
             "sliding_window_size": 64, "conv_kernel_size": 3}
# checkpoint keys: dense_intermediate_size (intermediate_size is then the experts' width), sconv_kernel_size,
# local_layer_ids, sliding_window, num_local_experts, listed mlp_layer_types
INK_CKPT = {"model_type": "inkling_text", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2,
            "swa_head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
            "intermediate_size": 64, "dense_intermediate_size": 768, "vocab_size": 1000, "sconv_kernel_size": 2,
            "local_layer_ids": [0, 2], "sliding_window": 128, "mlp_layer_types": ["sparse", "dense", "sparse", "dense"]}

# Inkling2TextConfig defaults (48 layers, full attention on each 6th, 384 experts of 2304, a 200,058-row head)
INK2_DEFAULT = {"model_type": "inkling2_text"}
# small: other sliding-layer heads, a smaller relative-bias bank, window and convolutions, a head of 900 rows
INK2_SMALL = {"model_type": "inkling2_text", "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "swa_num_attention_heads": 8, "swa_num_key_value_heads": 4,
              "swa_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
              "vocab_size": 1000, "unpadded_vocab_size": 900, "d_rel": 8, "rel_extent": 512,
              "sliding_window_size": 128, "conv_kernel_size": 3, "eos_token_id": 2}
# the config's aliases (num_local_experts, intermediate_size, sconv_kernel_size, sliding_window), listed layer types
# with a full first layer
INK2_KEYS = {"model_type": "inkling2_text", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 1, "head_dim": 64, "swa_num_attention_heads": 4, "swa_num_key_value_heads": 2,
             "swa_head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 96,
             "vocab_size": 1000, "unpadded_vocab_size": 1000, "sconv_kernel_size": 2, "sliding_window": 64,
             "eos_token_id": 2, "layer_types": ["hybrid", "hybrid_sliding", "hybrid", "hybrid_sliding"]}

# Inkling2Config: the Inkling 2 decoder and its vision tower (always built; its defaults here) counted apart
INK2_WRAPPER = {"model_type": "inkling2"}
INK2_WRAPPER_SMALL = {"model_type": "inkling2",
                      "text_config": {k: v for k, v in INK2_SMALL.items() if k != "model_type"},
                      "vision_config": {"hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
                                        "mlp_ratio": 2.5, "patch_size": 14, "posemb_grid_size": 16,
                                        "spatial_merge_size": 3, "projection_hidden_dim": 512, "projector_bias": True,
                                        "text_hidden_size": 256}}

# InklingConfig (inkling_mm_model): the Inkling decoder, its vision tower (folding projections whose widths
# transformers' plan_out_scales sets; the defaults give layers 614,400 wide) and audio embedding counted apart
INKMM_DEFAULT = {"model_type": "inkling_mm_model"}
INKMM_SMALL = {"model_type": "inkling_mm_model",
               "text_config": {k: v for k, v in INK_SMALL.items() if k != "model_type"},
               "vision_config": {"patch_size": 14, "temporal_patch_size": 2, "num_hidden_layers": 8},
               "audio_config": {"n_mel_bins": 16, "mel_vocab_size": 32}}
# other patch, frame and channel counts (the tower's text_hidden_size is the decoder's whatever it says); the
# config's aliases n_layers, num_codebooks and codebook_size
INKMM_CHANNELS = {**INKMM_SMALL, "vision_config": {"patch_size": 16, "temporal_patch_size": 3, "num_channels": 4,
                                                   "num_hidden_layers": 13, "text_hidden_size": 999}}
INKMM_ALIASES = {**INKMM_SMALL, "vision_config": {"patch_size": 10, "n_layers": 9},
                 "audio_config": {"num_codebooks": 8, "codebook_size": 64}}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.25.0 LaraMiniForCausalLM(LaraMiniConfig()), and a small config
    (LARA_DEFAULT, 7_281_684_672),
    (LARA_SMALL, 48_563_728),
    # transformers 5.25.0 Kolibri1_1ForCausalLM(Kolibri1_1Config()), and small configs
    (KOLIBRI_DEFAULT, 75_112_646_912),
    (KOLIBRI_SMALL, 31_622_336),
    (KOLIBRI_MOE, 62_887_616),
    # transformers 5.25.0 InklingForCausalLM(InklingTextConfig()), and small configs
    (INK_DEFAULT, 975_340_270_146),
    (INK_SMALL, 2_846_694),
    (INK_CKPT, 3_479_044),
    # transformers 5.25.0 Inkling2ForCausalLM(Inkling2TextConfig()), and small configs
    (INK2_DEFAULT, 593_718_478_848),
    (INK2_SMALL, 2_598_752),
    (INK2_KEYS, 3_982_080),
    # transformers 5.25.0 Inkling2ForConditionalGeneration (AutoModelForImageTextToText: AutoModelForCausalLM takes
    # no Inkling2Config) of Inkling2Config() and of a small config: language model + extra_params
    (INK2_WRAPPER, 594_046_172_160),
    (INK2_WRAPPER_SMALL, 3_876_512),
    # transformers 5.25.0 InklingForConditionalGeneration (AutoModelForImageTextToText) of InklingConfig() and of small
    # configs: language model + extra_params
    (INKMM_DEFAULT, 1_740_191_689_202),
    (INKMM_SMALL, 119_253_758),
    (INKMM_CHANNELS, 77_969_547_514),
    (INKMM_ALIASES, 1_512_228_414),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_lara_mini_maps_its_blocks():
    m = load_model(LARA_DEFAULT)
    kinds = ["gdn", "attention", "gdn", "attention", "attention"]
    assert [g.mixer for g in m.layers for _ in range(g.count)] == [kinds[i % 5] for i in range(34)]
    assert m.sliding_window == 512 and m.window_layers == tuple(i % 5 in (1, 4) for i in range(34))
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.tied_embeddings) == (128, 4, 512, 512, 0, True)
    assert m.ssm is not None and (m.ssm.heads, m.ssm.groups, m.ssm.state) == (16, 8, 128)
    assert any("no positional encoding" in a for a in m.assumed)


def test_kolibri1_1_maps_its_blocks():
    m = load_model(KOLIBRI_DEFAULT)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False, False] + [True] * 48
    assert m.sliding_window == 513 and m.window_layers == tuple((i + 1) % 5 != 0 for i in range(50))
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.post_norms) == (384, 6, 512, 512, 3584, True)
    assert any("6 layers read an earlier layer's keys" in a for a in m.assumed)
    with pytest.raises(GpuplanError, match="kv_source_layers must give"):
        load_model({**KOLIBRI_SMALL, "kv_source_layers": [0, 1, 2, 2, 4, 5]})
    with pytest.raises(GpuplanError, match="mlp_only_layers must list layer indices"):
        load_model({**KOLIBRI_SMALL, "mlp_only_layers": [9]})


def test_inkling_text_maps_its_blocks():
    m = load_model(INK_DEFAULT)
    assert m.sliding_window == 512 and m.window_layers == tuple((i + 1) % 6 != 0 for i in range(66))
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.position, m.tied_embeddings) == (64, 16, 128, "none", False)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (256, 6, 3072, 6144, 0)
    assert any("full layers' own (64 heads, 8 key/value" in a for a in m.assumed)
    ck = load_model(INK_CKPT)
    assert [g.moe for g in ck.layers for _ in range(g.count)] == [True, False, True, False]
    assert (ck.ffn, ck.moe_ffn, ck.window_layers) == (768, 64, (True, False, True, False))
    wrapped = load_model(INKMM_DEFAULT)
    assert wrapped.params == m.params and wrapped.extra_params == wrapped.frozen_params == 764_851_419_056
    with pytest.raises(GpuplanError, match="fewer than the 4 scales of the patch"):
        load_model({**INKMM_SMALL, "vision_config": {"patch_size": 14, "num_hidden_layers": 3}})
    with pytest.raises(GpuplanError, match="tie between two scales"):
        load_model({**INKMM_SMALL, "vision_config": {"patch_size": 2, "num_channels": 1, "num_hidden_layers": 6}})
    with pytest.raises(GpuplanError, match="layer_types must list hybrid or hybrid_sliding"):
        load_model({**INK_SMALL, "layer_types": ["hybrid"] * 5})


def test_inkling2_text_maps_its_blocks():
    m = load_model(INK2_DEFAULT)
    assert m.sliding_window == 1024 and m.window_layers == tuple((i + 1) % 6 != 0 for i in range(48))
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.vocab, m.position) == (48, 8, 128, 200058, "none")
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (384, 8, 2304, 0, 0)
    assert all(g.moe for g in m.layers) and any("block attention residuals" in a for a in m.assumed)
    keys = load_model(INK2_KEYS)
    assert (keys.n_kv_heads, keys.moe_ffn, keys.window_layers) == (2, 96, (False, True, False, True))
    wrapped = load_model(INK2_WRAPPER)
    assert wrapped.params == m.params and wrapped.extra_params == wrapped.frozen_params == 327_693_312
    with pytest.raises(GpuplanError, match="layer_types must list hybrid or hybrid_sliding"):
        load_model({**INK2_KEYS, "layer_types": ["hybrid", "sliding_attention", "hybrid", "hybrid"]})


@pytest.mark.parametrize("cfg", [LARA_SMALL, KOLIBRI_SMALL, KOLIBRI_MOE, INK_SMALL, INK_CKPT, INK2_SMALL, INK2_KEYS,
                                 INK2_WRAPPER_SMALL, INKMM_SMALL])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)
