"""Golden parameter counts of the newer decoder families read from config.json (issue 21, item 5): gpt-oss,
Llama 4 (text), GLM-4 / GLM-4.5, dots.llm1, Seed-OSS, ERNIE 4.5, EXAONE 4, Apertus, Ministral, Hunyuan dense and MoE,
Granite-MoE and PhiMoE. The reference count is transformers' own: ``AutoModelForCausalLM.from_config(config)``
on the meta device with transformers 5.24.0, ``sum(p.numel() for p in model.parameters())``. The released
models' shape keys are written as their config.json has them (no network); the small configs exercise each
family's flags."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model

# openai/gpt-oss-20b and -120b config.json shape keys (model card: 21B / 117B parameters)
GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 2880, "num_experts_per_tok": 4, "vocab_size": 201088,
           "sliding_window": 128, "attention_bias": True, "tie_word_embeddings": False}
GPT_OSS_20B = {**GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32}
GPT_OSS_120B = {**GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128}
# meta-llama/Llama-4-Scout-17B-16E and -Maverick-17B-128E text_config shape keys (17B active)
LLAMA4 = {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
          "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
          "num_experts_per_tok": 1, "vocab_size": 202048, "tie_word_embeddings": False}
LLAMA4_SCOUT = {**LLAMA4, "num_local_experts": 16, "interleave_moe_layer_step": 1}
LLAMA4_MAVERICK = {**LLAMA4, "num_local_experts": 128, "interleave_moe_layer_step": 2}
# zai-org/GLM-4.5-Air config.json shape keys (106B total, 12B active)
GLM45_AIR = {"model_type": "glm4_moe", "hidden_size": 4096, "num_hidden_layers": 46, "num_attention_heads": 96,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
             "n_routed_experts": 128, "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 1,
             "vocab_size": 151552, "attention_bias": True, "use_qk_norm": False, "partial_rotary_factor": 0.5,
             "tie_word_embeddings": False}


# tencent/Hunyuan-A13B-Instruct config.json shape keys (model card: 80B total, 13B active)
HUNYUAN_A13B = {"model_type": "hunyuan_v1_moe", "hidden_size": 4096, "intermediate_size": 3072,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128167,
                "num_experts": 64, "moe_topk": [8] * 32, "num_shared_expert": [1] * 32,
                "moe_intermediate_size": [3072] * 32, "use_qk_norm": True, "head_dim": 128,
                "tie_word_embeddings": True}


# total: transformers' count; active: the publisher's figure in billions, which leaves out ``tables`` of the
# vocab x hidden tables: OpenAI's gpt-oss model card 3.6B / 5.1B (the input embedding left out), Meta's Llama 4
# 17B (both counted), Z.ai's GLM-4.5-Air 12B (neither)
@pytest.mark.parametrize("cfg, params, active_b, tables", [
    (GPT_OSS_20B, 20_914_757_184, 3.6, 1),
    (GPT_OSS_120B, 116_829_156_672, 5.1, 1),
    (LLAMA4_SCOUT, 107_769_861_120, 17, 0),
    (LLAMA4_MAVERICK, 400_711_848_960, 17, 0),
    (GLM45_AIR, 106_852_245_504, 12, 2),
    (HUNYUAN_A13B, 80_393_183_232, 13, 0),
])
def test_released_models_hold_transformers_count(cfg, params, active_b, tables):
    m = load_model(cfg)
    assert m.params == params
    active = m.params_active - tables * m.vocab * m.hidden
    assert round(active / 1e9, 1 if active_b < 10 else 0) == active_b


# small configs (hidden 256, 4 layers, 8 heads, 4 kv heads, MLP 512, vocab 40,000) and transformers 5.24's count
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "intermediate_size": 512, "vocab_size": 40000, "max_position_embeddings": 4096}
EXPERTS = {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}


@pytest.mark.parametrize("model_type, extra, params", [
    ("seed_oss", {}, 25_209_088),                                       # q/k/v biases on by default, head_dim 128
    ("ernie4_5", {}, 14_960_896),                                       # tied embeddings
    ("ernie4_5", {"use_bias": True}, 14_975_232),
    ("glm", {}, 25_209_088),                                            # fused gate_up, q/k/v biases
    ("glm4", {}, 25_211_136),                                           # and four norms per block
    ("exaone4", {}, 22_841_856),                                        # q/k norms, post-norms
    ("apertus", {}, 22_317_576),                                        # xIELU two-matrix MLP, q/k norms
    ("ministral", {"head_dim": 32}, 22_841_600),
    ("hunyuan_v1_dense", {"head_dim": 32}, 22_841_856),
    ("hunyuan_v1_dense", {"head_dim": 32, "attention_bias": True}, 22_844_928),
    ("hunyuan_v1_moe", {"num_experts": 4, "moe_topk": 2, "head_dim": 32}, 29_137_408),  # + one shared MLP
    ("hunyuan_v1_moe", {"num_experts": 4, "moe_topk": [2] * 4, "head_dim": 32, "attention_bias": True}, 29_140_480),
    ("granitemoe", {"num_local_experts": 4, "num_experts_per_tok": 2}, 27_564_288),
    ("phimoe", {"num_local_experts": 4, "num_experts_per_tok": 2}, 27_566_592),   # LayerNorms with a bias
    ("gpt_oss", {"num_local_experts": 4, "num_experts_per_tok": 2}, 28_376_368),  # sinks, biased experts
    ("llama4_text", {"num_local_experts": 4, "intermediate_size_mlp": 768, "interleave_moe_layer_step": 2},
     28_741_888),
    ("llama4_text", {"num_local_experts": 4, "intermediate_size_mlp": 768}, 31_496_448),
    ("glm4_moe", {**EXPERTS, "first_k_dense_replace": 1, "n_shared_experts": 1, "head_dim": 32}, 23_139_584),
    ("glm4_moe", {**EXPERTS, "first_k_dense_replace": 2, "n_shared_experts": 2, "use_qk_norm": True,
                  "attention_bias": True}, 23_239_168),
    ("dots1", {**EXPERTS, "first_k_dense_replace": 1, "n_shared_experts": 1}, 23_139_840),
])
def test_each_family_holds_transformers_count(model_type, extra, params):
    assert load_model({"model_type": model_type, **SMALL, **extra}).params == params


def test_gpt_oss_alternates_its_128_token_window_and_routes_four_of_32(tmp_path):
    m = load_model(GPT_OSS_20B)
    # GptOssConfig.layer_types: sliding_attention where (i + 1) % 2, full_attention on every second layer
    assert m.sliding_window == 128 and m.window_layers == tuple(i % 2 == 0 for i in range(24))
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn) == (32, 4, 2880, 0)
    est = evaluate_config_json(GPT_OSS_20B, tmp_path, 4096)
    assert est["model"]["params_active"] == load_model(GPT_OSS_20B).params_active


def test_llama4_dense_layers_take_intermediate_size_mlp():
    m = load_model(LLAMA4_MAVERICK)
    assert (m.ffn, m.moe_ffn, m.shared_ffn, m.n_experts) == (16384, 8192, 8192, 128)
    # interleave_moe_layer_step 2: moe_layers = 1, 3, ..., 47 (Llama4TextConfig)
    assert [g.moe for g in m.layers for _ in range(g.count)] == [False, True] * 24
    assert any("chunked local attention" in a for a in m.assumed)


def test_hunyuan_moe_layers_that_route_differently_are_refused_with_the_fix():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="moe_topk differs between layers"):
        load_model({**HUNYUAN_A13B, "moe_topk": [8] * 31 + [4]})
    with pytest.raises(GpuplanError, match="one per layer"):
        load_model({**HUNYUAN_A13B, "moe_topk": [8] * 3})
