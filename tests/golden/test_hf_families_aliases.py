"""Golden parameter counts of decoder families read through the existing builders (issue 21, item 5: "inputs as
users have them"): EXAONE 3.x (its own key names), InternLM3, IQuest-Coder, Ministral 3, CWM, VaultGemma,
Granite-MoE-Shared, Sarvam MoE / MLA, GPT-SW3, FlexOlmo, nanochat, Solar Open, EXAONE MoE, LFM2-MoE, AFMoE, BitNet,
Mellum, HY-V3, Flint, Kolibri, Beam, Granite SWA, Apertus 1.5 and Jais 2. The reference is transformers 5.24.0's
own count: ``AutoModelForCausalLM.from_config(config)`` on the meta device, ``sum(p.numel() for p in
model.parameters())`` (the config classes' defaults where a key is absent)."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# hidden 256, 4 layers, 8 heads, 4 kv heads, MLP 512, vocab 40,000 (as tests/golden/test_hf_families_2026.py)
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "intermediate_size": 512, "vocab_size": 40000, "max_position_embeddings": 4096}
EXPERTS = {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}
CWM_TYPES = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]


@pytest.mark.parametrize("model_type, extra, params", [
    # ExaoneConfig: head_dim hidden // heads, untied; released configs say num_layers (its attribute_map)
    ("exaone", {}, 22_841_600),
    ("exaone", {"tie_word_embeddings": True, "head_dim": 64}, 13_388_032),
    # InternLM3Config, IQuestCoderConfig, Ministral3Config, CwmConfig: head_dim 128 by default
    ("internlm3", {}, 25_200_896),
    ("internlm3", {"qkv_bias": True, "bias": True}, 25_215_232),        # q/k/v biases; o and MLP biases
    ("iquestcoder", {}, 25_200_896),
    ("ministral3", {}, 25_200_896),
    ("cwm", {"layer_types": CWM_TYPES}, 25_200_896),
    # VaultGemmaConfig: head_dim 256, tied, two pre-norms per block
    ("vaultgemma", {}, 18_106_624),
    # GraniteMoeSharedConfig: Granite-MoE plus a gated shared expert of shared_intermediate_size
    ("granitemoeshared", {"num_local_experts": 4, "shared_intermediate_size": 384}, 28_743_936),
    # SarvamMoEConfig (Glm4MoeForCausalLM): head_dim 64, q/k norms on, the first layer dense, one shared expert
    ("sarvam_moe", EXPERTS, 23_926_528),
    # SarvamMLAConfig (DeepseekV3ForCausalLM): MLA, the first layer dense, the router's bias a buffer
    ("sarvam_mla", {**EXPERTS, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                    "q_lora_rank": 96}, 23_074_688),
    # FlexOlmoConfig: OLMoE's block with post-norms, fused experts
    ("flex_olmo", {"num_experts": 4, "num_experts_per_tok": 2}, 27_565_824),
    # NanoChatConfig: no norm weights, fc1/fc2 squared-ReLU MLP, untied
    ("nanochat", {}, 22_315_008),
    # SolarOpenConfig: shared + routed experts on every layer, head_dim 128
    ("solar_open", EXPERTS, 25_598_208),
    # ExaoneMoeConfig: num_experts / num_shared_experts (its key names), first layer dense; or mlp_layer_types
    ("exaone_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}, 23_139_840),
    ("exaone_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                    "mlp_layer_types": ["sparse", "dense", "sparse", "dense"], "num_shared_experts": 2}, 23_237_120),
    # Lfm2MoeConfig: LFM2's conv and attention blocks, a top-k MoE after num_dense_layers (intermediate_size as given)
    ("lfm2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "num_dense_layers": 1,
                  "layer_types": ["conv", "full_attention", "conv", "conv"]}, 12_803_648),
    # AfmoeConfig (Arcee Trinity): gated attention, head_dim 128, the router's expert bias a parameter, 2 shared
    ("afmoe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "num_dense_layers": 1},
     26_845_452),
    # BitNetConfig: the sub-norms before o_proj and down_proj
    ("bitnet", {}, 22_844_672),
    # MellumConfig: routed experts on every layer (or as mlp_layer_types says), no shared one
    ("mellum", {"moe_intermediate_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2}, 25_206_016),
    ("mellum", {"moe_intermediate_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2,
                "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]}, 25_204_992),
    # HYV3Config: the first layer dense, one shared expert, q/k norms
    ("hy_v3", {"moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2}, 25_499_904),
    # Granite SWA / Granite-MoE SWA: attention sinks; Apertus 1.5; Jais 2 (biased LayerNorms, q/k/v/o and MLP)
    ("granite_swa", {}, 12_601_632), ("granitemoe_swa", {"num_local_experts": 4}, 27_564_320),
    ("apertus1p5_text", {}, 22_317_576), ("jais2", {}, 22_325_760),
    # Kolibri1Config: four norms per block, a shared expert of shared_expert_intermediate_size on every layer
    ("kolibri1", {"moe_intermediate_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2,
                  "shared_expert_intermediate_size": 192}, 25_797_888),
    # BeamConfig: a gated attention output with a bias per head, routed experts per mlp_layer_types
    ("beam", {"moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2, "n_group": 1,
              "topk_group": 1, "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"]}, 26_255_648),
    # FlintConfig: attention sinks, an ungated shared expert, dense on mlp_only_layers
    ("flint", {"moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2,
               "shared_expert_intermediate_size": 192, "mlp_only_layers": [0]}, 25_647_392),
])
def test_counts_as_transformers_does(model_type, extra, params):
    cfg = {"model_type": model_type, **SMALL, **extra}
    if model_type == "exaone":
        cfg["num_layers"] = cfg.pop("num_hidden_layers")
    assert load_model(cfg).params == params


def test_windows_follow_layer_types_and_the_config_class():
    # CWM: the layers layer_types calls sliding attend within sliding_window (CwmConfig default 8192)
    cwm = load_model({"model_type": "cwm", **SMALL, "layer_types": CWM_TYPES})
    assert (cwm.sliding_window, cwm.window_layers) == (8192, (False, True, True, True))
    # VaultGemma: every other layer (from the first) within 4096 tokens; Ministral 3: no window unless given
    vg = load_model({"model_type": "vaultgemma", **SMALL})
    assert (vg.sliding_window, vg.window_layers) == (4096, (True, False, True, False))
    assert load_model({"model_type": "ministral3", **SMALL}).window_layers == ()


def test_gpt_sw3_reads_as_gpt2():
    # AI Sweden's GPT-SW3 configs say model_type gpt-sw3 for transformers' GPT2LMHeadModel: 12 layers of 768 over
    # 50,257 tokens, 1,024 positions — GPT-2 small's 124,439,808
    m = load_model({"model_type": "gpt-sw3", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                    "n_positions": 1024})
    assert m.params == 124_439_808


def test_a_wrong_mlp_layer_list_is_named():
    with pytest.raises(GpuplanError, match="mlp_layer_types must give dense or sparse for each of the 4 layers"):
        load_model({"model_type": "exaone_moe", **SMALL, "num_experts": 4, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 128, "mlp_layer_types": ["dense", "moe", "sparse", "sparse"]})


def test_qwen2_vl_is_its_qwen2_decoder_and_the_vision_tower_apart():
    # Qwen/Qwen2-VL-7B-Instruct: transformers 5.24 counts 8,291,375,616 — the Qwen2 decoder 7,615,616,512 and the
    # vision transformer with its patch merger 675,759,104 (Qwen2VLVisionConfig's defaults: 32 blocks of 1,280)
    m = load_model({"model_type": "qwen2_vl", "text_config": {
        "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
        "intermediate_size": 18944, "vocab_size": 152064}})
    assert (m.params, m.extra_params, m.frozen_params) == (7_615_616_512, 675_759_104, 675_759_104)
    # a small tower: 2 blocks of 128, mlp_ratio 2, merged into a 256-wide decoder (transformers: 809,728)
    small = load_model({"model_type": "qwen2_vl", "vision_config": {"depth": 2, "embed_dim": 128, "num_heads": 4,
                                                                    "hidden_size": 256, "mlp_ratio": 2},
                        "text_config": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                                        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000}})
    assert (small.params, small.extra_params) == (1_628_160, 809_728)


def test_jetmoe_routes_its_attention_and_mlp_experts():
    # JetMoE-8B (jetmoe/jetmoe-8b config.json shape keys): transformers 5.24 counts 8,522,237,952; a token takes 2
    # of the 8 query/output experts and 2 of the 8 MLP experts: 2,331,445,248 active (JetMoE's "2.2B" leaves out
    # the tied 65.5M embedding)
    m = load_model({"model_type": "jetmoe", "hidden_size": 2048, "num_hidden_layers": 24, "num_key_value_heads": 16,
                    "kv_channels": 128, "vocab_size": 32000, "intermediate_size": 5632, "num_local_experts": 8,
                    "num_experts_per_tok": 2})
    assert (m.params, m.params_active) == (8_522_237_952, 2_331_445_248)
    # mixture of attention heads: 16 key/value heads, 16 x 2 query heads of 128
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.n_experts, m.top_k) == (32, 16, 128, 8, 2)
    small = load_model({"model_type": "jetmoe", "hidden_size": 256, "num_hidden_layers": 2, "num_key_value_heads": 4,
                        "vocab_size": 1000, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
                        "kv_channels": 32})
    assert small.params == 4_063_488


@pytest.mark.parametrize("cfg, params", [
    # GPTNeoConfig: local attention (window 256) on every other layer; EleutherAI/gpt-neo-1.3B's shape keys
    ({"model_type": "gpt_neo", "hidden_size": 2048, "num_layers": 24, "num_heads": 16, "vocab_size": 50257,
      "attention_types": [[["global", "local"], 12]]}, 1_315_575_808),
    # CodeGen is GPT-J's block (fused bias-free qkv_proj, a biased untied head)
    ({"model_type": "codegen", "n_embd": 256, "n_layer": 2, "n_head": 8, "vocab_size": 1000, "rotary_dim": 16},
     2_089_960),
    # Persimmon: q/k LayerNorms with bias over the head, squared-ReLU MLP with biases, untied
    ({"model_type": "persimmon", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "intermediate_size": 1024}, 2_092_288),
    # XGLM: fairseq blocks, sinusoidal positions (no parameters), tied
    ({"model_type": "xglm", "d_model": 256, "num_layers": 2, "attention_heads": 8, "vocab_size": 1000,
      "ffn_dim": 1024}, 1_836_032),
    # BioGPT: fairseq blocks, learned positions offset by 2, tied
    ({"model_type": "biogpt", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "intermediate_size": 1024}, 2_098_688),
])
def test_gpt_style_decoders_count_as_transformers_does(cfg, params):
    assert load_model(cfg).params == params


def test_gpt_neo_attends_locally_on_its_local_layers():
    m = load_model({"model_type": "gpt_neo", "hidden_size": 256, "num_layers": 4, "num_heads": 8,
                    "vocab_size": 1000, "attention_types": [[["global", "local"], 2]]})
    assert (m.sliding_window, m.window_layers) == (256, (False, True, False, True))
    with pytest.raises(GpuplanError, match="attention_types must expand to global or local for each of the 4"):
        load_model({"model_type": "gpt_neo", "hidden_size": 256, "num_layers": 4, "num_heads": 8,
                    "attention_types": [[["global", "local"], 1]]})


def test_granite_swa_windows_three_layers_of_each_four():
    # GraniteSWAConfig's default layer_types: full attention on layers 0, 4, ..., a 128-token window elsewhere
    m = load_model({"model_type": "granite_swa", **SMALL, "num_hidden_layers": 8})
    assert (m.sliding_window, m.window_layers) == (128, (False, True, True, True) * 2)


def test_youtu_is_dense_latent_attention():
    # YoutuConfig (Tencent Youtu-LLM): DeepSeek-V2's latent attention with a dense MLP in every layer, tied; the
    # transformers 5.24 count of a small config
    m = load_model({"model_type": "youtu", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
                    "vocab_size": 1000, "intermediate_size": 512, "kv_lora_rank": 32, "q_lora_rank": 48,
                    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16})
    assert (m.params, m.kv_lora_rank, m.n_experts, m.tied_embeddings) == (1_189_280, 32, 0, True)


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "persimmon", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "intermediate_size": 1024, "rope_parameters": {"partial_rotary_factor": "x"}},
     "partial_rotary_factor = 'x' must be a positive number"),
    ({"model_type": "persimmon", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
      "vocab_size": 1000, "intermediate_size": 1024, "partial_rotary_factor": 5},
     "at most 1"),
    # a repeat count far past the layers is refused before anything is expanded
    ({"model_type": "gpt_neo", "hidden_size": 256, "num_layers": 2, "num_heads": 8,
      "attention_types": [[["global", "local"], 10**10]]}, "attention_types must expand"),
])
def test_a_malformed_value_is_one_line(cfg, message):
    with pytest.raises(GpuplanError, match=message):
        load_model(cfg)
