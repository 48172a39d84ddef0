"""Golden parameter counts of transformers 5.25's new decoders LongCat-Flash (longcat_flash), MiMo-V2-Flash
(mimo_v2_flash), MiniCPM5 MoE (minicpm5_moe), Laguna (laguna) and Ergo (ergo). The reference count is transformers'
own: ``AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config))`` on the meta device with
transformers 5.25.0 (torch 2.13, CPU), ``sum(p.numel() for p in model.parameters())``. No released model's
config.json was at hand (no network): the config classes' defaults and small configs exercising each family's flags
(MoE layer patterns, shared experts, tied/untied heads, sliding-window layers)."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# LongcatFlashConfig defaults (28 layers of two MLA sublayers, 512 experts + 256 zero-computation experts, top 12)
LC_DEFAULT = {"model_type": "longcat_flash"}
# small, 4 zero-computation experts
LC_SMALL = {"model_type": "longcat_flash", "hidden_size": 512, "num_layers": 3, "num_attention_heads": 8,
            "q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
            "ffn_hidden_size": 1024, "expert_ffn_hidden_size": 128, "n_routed_experts": 8, "zero_expert_num": 4,
            "moe_topk": 2, "vocab_size": 32000}
# num_hidden_layers (2 x num_layers) given, no zero experts, biases (attention and router), tied
LC_FLAGS = {"model_type": "longcat_flash", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 64,
            "ffn_hidden_size": 768, "expert_ffn_hidden_size": 256, "n_routed_experts": 16, "zero_expert_num": 0,
            "moe_topk": 4, "vocab_size": 32000, "attention_bias": True, "router_bias": True,
            "tie_word_embeddings": True}

# MiMoV2FlashConfig defaults (48 layers, full attention on the first and each 6th, the first dense)
MIMO_DEFAULT = {"model_type": "mimo_v2_flash"}
MIMO_SMALL = {"model_type": "mimo_v2_flash", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "v_head_dim": 32, "intermediate_size": 1024,
              "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
# listed layer_types and mlp_layer_types, biases, tied, the window as sliding_window_size (+ 1)
MIMO_TYPES = {"model_type": "mimo_v2_flash", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 1, "head_dim": 64, "v_head_dim": 64, "intermediate_size": 1024,
              "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
              "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
              "mlp_layer_types": ["sparse", "dense", "sparse", "dense"], "attention_bias": True,
              "tie_word_embeddings": True, "sliding_window_size": 63}

# MiniCPM5MoeConfig defaults (28 layers, the first dense, 160 experts top 16, one shared expert)
CPM5_DEFAULT = {"model_type": "minicpm5_moe"}
# two dense layers (first_k_dense_replace), 2 shared experts' width
CPM5_SMALL = {"model_type": "minicpm5_moe", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "moe_intermediate_size": 128,
              "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2, "first_k_dense_replace": 2,
              "vocab_size": 32000}
# listed mlp_layer_types, no shared expert, head_dim 128 (the class default), biases, tied
CPM5_TYPES = {"model_type": "minicpm5_moe", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
              "num_key_value_heads": 4, "intermediate_size": 1024, "moe_intermediate_size": 128,
              "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 0,
              "mlp_layer_types": ["sparse", "dense", "sparse", "sparse"], "attention_bias": True,
              "tie_word_embeddings": True, "vocab_size": 32000}

# LagunaConfig defaults (40 full-attention layers, the first dense, 256 experts top 8 + a shared expert)
LAGUNA_DEFAULT = {"model_type": "laguna"}
# sliding-window layers, per-layer head counts
LAGUNA_SMALL = {"model_type": "laguna", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
                "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 1024, "moe_intermediate_size": 128,
                "shared_expert_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
                "sliding_window": 128, "num_attention_heads_per_layer": [8, 4, 8, 2]}
# a gate per channel, biases, tied, listed mlp_layer_types
LAGUNA_FLAGS = {"model_type": "laguna", "hidden_size": 512, "num_hidden_layers": 3, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 1024, "moe_intermediate_size": 128,
                "shared_expert_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 4,
                "vocab_size": 32000, "gating": "per-element", "attention_bias": True, "tie_word_embeddings": True,
                "mlp_layer_types": ["sparse", "sparse", "dense"]}

# ErgoConfig defaults (64 layers, full attention on each 4th, the first dense, 256 experts top 8 + a shared expert)
ERGO_DEFAULT = {"model_type": "ergo"}
# two dense layers, full attention on each 3rd
ERGO_SMALL = {"model_type": "ergo", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
              "num_key_value_heads": 2, "first_dense_intermediate_size": 1024, "moe_intermediate_size": 128,
              "shared_intermediate_size": 256, "num_experts": 8, "num_experts_per_tok": 2, "num_dense_blocks": 2,
              "global_attention_every_n_layers": 3, "vocab_size": 32000}
# listed layer_types and mlp_layer_types, the checkpoints' local_attention_window key, tie_word_embeddings (ignored)
ERGO_TYPES = {"model_type": "ergo", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 1, "first_dense_intermediate_size": 512, "moe_intermediate_size": 64,
              "shared_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 4, "vocab_size": 32000,
              "layer_types": ["full_attention", "sliding_attention", "full_attention", "sliding_attention"],
              "mlp_layer_types": ["sparse", "dense", "sparse", "sparse"], "local_attention_window": 256,
              "tie_word_embeddings": True}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.25.0 LongcatFlashForCausalLM(LongcatFlashConfig(**cfg)), meta device, sum of numel
    (LC_DEFAULT, 560_664_958_976),
    (LC_SMALL, 48_866_944),
    (LC_FLAGS, 35_577_952),
    # transformers 5.25.0 MiMoV2FlashForCausalLM(MiMoV2FlashConfig(**cfg)), meta device, sum of numel
    (MIMO_DEFAULT, 308_778_768_832),
    (MIMO_SMALL, 45_574_688),
    (MIMO_TYPES, 25_247_128),
    # transformers 5.25.0 MiniCPM5MoeForCausalLM(MiniCPM5MoeConfig(**cfg)), meta device, sum of numel
    (CPM5_DEFAULT, 15_002_552_320),
    (CPM5_SMALL, 43_528_704),
    (CPM5_TYPES, 31_095_296),
    # transformers 5.25.0 LagunaForCausalLM(LagunaConfig(**cfg)), meta device, sum of numel
    (LAGUNA_DEFAULT, 33_189_975_808),
    (LAGUNA_SMALL, 42_233_880),
    (LAGUNA_FLAGS, 26_237_664),
    # transformers 5.25.0 ErgoForCausalLM(ErgoConfig(**cfg)), meta device, sum of numel
    (ERGO_DEFAULT, 1_105_550_917_632),
    (ERGO_SMALL, 44_094_720),
    (ERGO_TYPES, 19_103_232),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_longcat_flash_maps_its_blocks():
    m = load_model(LC_DEFAULT)
    assert m.n_layers == 56 and [g.moe for g in m.layers for _ in range(g.count)] == [True, False] * 28
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_dim, m.head_dim, m.v_head_dim) == (1536, 512, 64, 192, 128)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (512, 12, 2048, 12288, 12288)
    assert any("zero-computation" in a for a in m.assumed)
    assert load_model(LC_FLAGS).n_layers == 4 and not any("zero-computation" in a for a in load_model(LC_FLAGS).assumed)


def test_mimo_v2_flash_maps_its_blocks():
    m = load_model(MIMO_DEFAULT)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 47
    assert m.sliding_window == 129 and m.window_layers == tuple(i != 0 and (i + 1) % 6 != 0 for i in range(48))
    assert (m.n_kv_heads, m.head_dim, m.v_head_dim, m.rotary_percent, m.shared_ffn) == (4, 192, 128, 0.334, 0)
    t = load_model(MIMO_TYPES)
    assert t.sliding_window == 64 and t.window_layers == (True, False, True, True) and t.tied_embeddings


def test_minicpm5_moe_maps_its_blocks():
    m = load_model(CPM5_DEFAULT)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False] + [True] * 27
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.head_dim) == (160, 16, 512, 512, 8192, 128)
    assert [g.moe for g in load_model(CPM5_SMALL).layers for _ in range(g.count)] == [False, False, True, True]
    assert load_model(CPM5_TYPES).shared_ffn == 0


def test_laguna_maps_its_blocks():
    m = load_model(LAGUNA_DEFAULT)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.rotary_percent) == (256, 8, 512, 512, 8192, 0.5)
    assert m.sliding_window == 0 and not m.window_layers
    s = load_model(LAGUNA_SMALL)
    assert s.sliding_window == 128 and s.window_layers == (False, True, True, False)
    assert any("own head counts (2 to 8)" in a for a in s.assumed)


def test_ergo_maps_its_blocks():
    m = load_model(ERGO_DEFAULT)
    assert not m.gated_mlp and m.activation == "relu2" and m.post_norms and not m.tied_embeddings
    assert m.sliding_window == 512 and m.window_layers == tuple((i + 1) % 4 != 0 for i in range(64))
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn, m.head_dim) == (256, 8, 4096, 8192, 32768, 128)
    t = load_model(ERGO_TYPES)
    assert t.sliding_window == 256 and t.window_layers == (False, True, False, True)
    assert any("keeps its own lm_head" in a for a in t.assumed)


@pytest.mark.parametrize("cfg, key, message", [
    (MIMO_SMALL, "layer_types", "layer_types must list one of full_attention, sliding_attention for each of the 6"),
    (MIMO_SMALL, "mlp_layer_types", "mlp_layer_types must list dense or sparse for each of the 6 layers"),
    (CPM5_SMALL, "mlp_layer_types", "mlp_layer_types must list dense or sparse for each of the 4 layers"),
    (LAGUNA_SMALL, "num_attention_heads_per_layer", "num_attention_heads_per_layer must list, for each of the 4"),
    (ERGO_SMALL, "layer_types", "layer_types must list one of full_attention, sliding_attention for each of the 6"),
])
def test_malformed_lists_are_named(cfg, key, message):
    with pytest.raises(GpuplanError, match=message):
        load_model({**cfg, key: ["sliding_attention", "bad"]})


def test_malformed_values_are_named():
    with pytest.raises(GpuplanError, match="gating = 'per-token' must be true, per-head or per-element"):
        load_model({**LAGUNA_FLAGS, "gating": "per-token"})
    with pytest.raises(GpuplanError, match="qk_head_dim = 64 is not qk_nope_head_dim"):
        load_model({**LC_SMALL, "qk_head_dim": 64})
    with pytest.raises(GpuplanError, match="requires gated attention|supports only gated attention"):
        load_model({**CPM5_SMALL, "use_gated_attention": False})


@pytest.mark.parametrize("cfg", [LC_SMALL, LC_FLAGS, MIMO_SMALL, MIMO_TYPES, CPM5_SMALL, CPM5_TYPES, LAGUNA_SMALL,
                                 LAGUNA_FLAGS, ERGO_SMALL, ERGO_TYPES])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 2048)
