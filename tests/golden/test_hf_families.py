"""Golden parameter counts of the Hugging Face families read since issue 21 (Nemotron, StarCoder2, Cohere,
Gemma 3 image-text, Arcee): each config is the model's own config.json, written here (no network); the
count is checked to the parameter against the weight list written out tensor by tensor, and against the
published figure to the rounding it is published with (source on the line above)."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json, make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.models import load_model

# huggingface.co/nvidia/Minitron-8B-Base/blame/main/config.json (transformers 4.44.0)
MINITRON_8B = {"model_type": "nemotron", "hidden_act": "relu2", "hidden_size": 4096, "intermediate_size": 16384,
               "max_position_embeddings": 4096, "num_attention_heads": 48, "num_hidden_layers": 32,
               "num_key_value_heads": 8, "norm_eps": 1e-05, "rope_theta": 10000, "partial_rotary_factor": 0.5,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 256000, "head_dim": 128}
# huggingface.co/mgoin/Nemotron-4-340B-Base-hf/blob/6c78d6f7e50e0a654eddba595b45d7fbacc84452/config.json
NEMOTRON_4_340B = {"model_type": "nemotron", "attention_bias": False, "head_dim": 192, "hidden_act": "relu2",
                   "hidden_size": 18432, "intermediate_size": 73728, "max_position_embeddings": 4096,
                   "mlp_bias": False, "norm_eps": 1e-05, "num_attention_heads": 96, "num_hidden_layers": 96,
                   "num_key_value_heads": 8, "rope_theta": 10000, "tie_word_embeddings": False, "vocab_size": 256000}
# huggingface.co/bigcode/starcoder2-3b/blob/refs%2Fpr%2F3/config.json (no tie_word_embeddings: tied, the default)
STARCODER2_3B = {"model_type": "starcoder2", "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072,
                 "intermediate_size": 12288, "max_position_embeddings": 16384, "norm_epsilon": 1e-05,
                 "num_attention_heads": 24, "num_hidden_layers": 30, "num_key_value_heads": 2,
                 "rope_theta": 999999.4420358813, "sliding_window": 4096, "use_bias": True, "vocab_size": 49152}
# CohereForAI/c4ai-command-r-v01 config.json (as copied in huggingface.co/CohereForAI/c4ai-command-r-v01-4bit
# commit d1d5cc4): 40 layers of 8192, 64 heads and 64 key/value heads, SwiGLU 22528, vocab 256000, tied
COMMAND_R = {"model_type": "cohere", "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 22528,
             "layer_norm_eps": 1e-05, "logit_scale": 0.0625, "max_position_embeddings": 8192,
             "num_attention_heads": 64, "num_hidden_layers": 40, "num_key_value_heads": 64, "rope_theta": 8000000.0,
             "tie_word_embeddings": True, "use_qk_norm": False, "vocab_size": 256000}
# google/gemma-3-4b-pt config.json: text_config gives only what differs from Gemma3TextConfig
GEMMA3_4B = {"model_type": "gemma3", "mm_tokens_per_image": 256,
             "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                             "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                             "sliding_window": 1024},
             "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                               "model_type": "siglip_vision_model", "num_attention_heads": 16,
                               "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}
# an AFM-4.5B config.json (huggingface.co/Delta-Vector/Austral-AFM-SFT/blob/main/config.json, a fine-tune of
# arcee-ai/AFM-4.5B with its shape)
ARCEE_AFM = {"model_type": "arcee", "attention_bias": False, "head_dim": 128, "hidden_act": "relu2",
             "hidden_size": 2560, "intermediate_size": 18432, "max_position_embeddings": 65536, "mlp_bias": False,
             "num_attention_heads": 20, "num_hidden_layers": 36, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
             "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 128005}


def _by_hand(*, h: int, L: int, q: int, kv: int, mlp: int, norms: int, V: int, tied: bool, final: int) -> int:
    """Embedding (+ untied head) + L × (q, k, v, o weights, the MLP, the block's norms) + the final norm."""
    return V * h * (1 if tied else 2) + L * (2 * h * q + 2 * h * kv + mlp + norms) + final


def test_nemotron_minitron_8b():
    spec = load_model(MINITRON_8B)
    # LayerNorm1P has weight and bias: 2 norms × 2h per block and 2h at the end; q is 48 × 128 = 6144 wide
    assert spec.params == _by_hand(h=4096, L=32, q=6144, kv=1024, mlp=2 * 4096 * 16384, norms=4 * 4096, V=256000,
                                   tied=False, final=2 * 4096) == 8_271_699_968
    # huggingface.co/nvidia/Minitron-8B-Base/tree/refs%2Fpr%2F4: model.safetensors 16.5 GB in bfloat16
    # (2 bytes a parameter; the size is rounded to 0.1 GB, so ±0.025e9 parameters)
    assert abs(spec.params - 16.5e9 / 2) <= 0.025e9
    assert (spec.gated_mlp, spec.activation, spec.norm, spec.norm_zero_centered, spec.rotary_percent) == \
        (False, "relu2", "layernorm", True, 0.5)
    assert [w.name for w in spec.layers[0].weights if w.group == "mlp"] == ["mlp.up_proj", "mlp.down_proj"]


def test_nemotron_4_340b():
    spec = load_model(NEMOTRON_4_340B)
    assert spec.params == _by_hand(h=18432, L=96, q=18432, kv=1536, mlp=2 * 18432 * 73728, norms=4 * 18432,
                                   V=256000, tied=False, final=2 * 18432) == 341_029_195_776
    # huggingface.co/nvidia/Nemotron-4-340B-Base model card: "This model has 340 billion parameters" (2 figures)
    assert abs(spec.params - 340e9) <= 5e9


def test_starcoder2_3b():
    spec = load_model(STARCODER2_3B)
    # every linear and both LayerNorms carry biases (use_bias); embeddings tied
    per_block_bias = 3072 + 2 * 256 + 3072 + 12288 + 3072 + 4 * 3072
    assert spec.params == _by_hand(h=3072, L=30, q=3072, kv=256, mlp=2 * 3072 * 12288 + per_block_bias, norms=0,
                                   V=49152, tied=True, final=2 * 3072) == 3_030_371_328
    # promptlayer.com/models/starcoder2-3b (the Hub's count): "Parameter Count 3.03B"
    assert abs(spec.params - 3.03e9) <= 0.005e9
    assert (spec.sliding_window, spec.windowed_layers, spec.activation, spec.gated_mlp) == \
        (4096, 30, "gelu_pytorch_tanh", False)


def test_cohere_command_r():
    spec = load_model(COMMAND_R)
    # one weight-only LayerNorm per block, SwiGLU, tied
    assert spec.params == _by_hand(h=8192, L=40, q=8192, kv=8192, mlp=3 * 8192 * 22528, norms=8192, V=256000,
                                   tied=True, final=8192) == 34_980_831_232
    # huggingface.co/CohereForAI/c4ai-command-r-v01 model card: "a research release of a 35 billion parameter
    # highly performant generative model"
    assert abs(spec.params - 35e9) <= 0.5e9
    assert spec.parallel_block and spec.tied_embeddings and spec.norm == "layernorm"


def test_gemma3_image_text_4b():
    spec = load_model(GEMMA3_4B)
    embedding = 262208 * 2560  # Gemma3TextConfig vocab_size 262208 (text_config leaves it out)
    # Gemma 3 Technical Report (arXiv:2503.19786) Table 1, 4B: vision encoder 417M, embedding 675M,
    # non-embedding 3,209M (the checkpoint's 262,208-row embedding is 671M: the report rounds another count)
    assert round((spec.params - embedding) / 1e6) == 3209
    siglip = spec.extra_params - (1152 * 2560 + 1152)  # less the projector (mm_input_projection, soft-emb norm)
    assert round(siglip / 1e6) == 417
    assert spec.params + spec.extra_params == 4_300_079_472  # the whole checkpoint
    assert spec.model_type == "gemma3" and spec.sliding_window == 1024 and spec.windowed_layers == 34 - 5
    assert any("vision tower" in a for a in spec.assumed)
    # transformers Gemma3TextConfig: max_position_embeddings=131_072 (a 128K model, not LlamaConfig's 2,048)
    assert spec.max_positions == 131072


def test_a_frozen_vision_tower_is_no_untrained_module_of_the_step():
    # the image-text model's vision tower and projector are counted apart and frozen (their own assumed line): no note
    # calls them a multi-token-prediction module left out of the step
    from gpuplan.api import evaluate_scenario
    from gpuplan.io.scenario import parse_scenario

    est = evaluate_scenario(parse_scenario({"model": GEMMA3_4B, "hardware": {"gpu": "h100-sxm", "gpus": 8},
                                            "training": {"seq_len": 4096}}))
    assert not [n for n in est.to_json()["notes"] if "multi-token" in str(n)]


def test_gemma3_27b_non_embedding():
    cfg = {**GEMMA3_4B, "text_config": {"hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
                                        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                                        "query_pre_attn_scalar": 168, "sliding_window": 1024}}
    spec = load_model(cfg)
    # Gemma 3 Technical Report Table 1, 27B: non-embedding 25,600M
    assert round((spec.params - 262208 * 5376) / 1e6) == 25600


def test_arcee_is_llama_with_a_two_matrix_relu2_mlp():
    spec = load_model(ARCEE_AFM)
    # transformers docs, model_doc/arcee: "based on the Llama architecture with a key modification: it uses ReLU²
    # (ReLU-squared) activation in the MLP blocks instead of SiLU" (ArceeMLP: up_proj, down_proj)
    assert spec.params == _by_hand(h=2560, L=36, q=2560, kv=512, mlp=2 * 2560 * 18432, norms=2 * 2560, V=128005,
                                   tied=False, final=2560) == 4_619_189_760
    assert (spec.gated_mlp, spec.activation, spec.norm) == (False, "relu2", "rmsnorm")


@pytest.mark.parametrize("cfg", [MINITRON_8B, STARCODER2_3B, COMMAND_R, GEMMA3_4B, ARCEE_AFM,
                                 {**COMMAND_R, "model_type": "cohere2", "num_hidden_layers": 8}],
                         ids=["nemotron", "starcoder2", "cohere", "gemma3", "arcee", "cohere2"])
def test_each_config_evaluates(cfg, tmp_path):
    evaluate_config_json(cfg, tmp_path, 8192)  # a model folder's config.json, as a user has it


def test_squared_relu_costs_what_a_gelu_mlp_costs():
    # two matrices and one elementwise activation: the same weights, FLOPs and saved activations as a GeLU MLP
    relu2 = evaluate(make(MINITRON_8B, "h100-sxm", 8, layout={"zero": 3})).to_json()
    gelu = evaluate(make({**MINITRON_8B, "hidden_act": "gelu"}, "h100-sxm", 8, layout={"zero": 3})).to_json()
    assert relu2["memory"] == gelu["memory"] and relu2["time"]["step_s"] == gelu["time"]["step_s"]
    swiglu = load_model({**MINITRON_8B, "model_type": "llama", "hidden_act": "silu"})
    # a third matrix per block (RMSNorm has no bias, LayerNorm1P does: 2 per block and the final one)
    assert swiglu.params - load_model(MINITRON_8B).params == 32 * 4096 * 16384 - (32 * 2 + 1) * 4096


def test_sliding_windows_cost_less_attention_past_the_window():
    from gpuplan.model.flops import attention_flops

    sc2 = load_model(STARCODER2_3B)
    full = load_model({**STARCODER2_3B, "sliding_window": None})
    # at or below the window nothing changes; at 16K a 4K window keeps w − w²/(2s) = 3,584 of 8,192 keys a query
    assert attention_flops(sc2, 4096, True) == attention_flops(full, 4096, True)
    assert attention_flops(sc2, 16384, True) / attention_flops(full, 16384, True) == pytest.approx(3584 / 8192)
    g3 = load_model(GEMMA3_4B)  # 5 of 6 layers windowed (1024)
    g3_full = load_model({**GEMMA3_4B, "text_config": {**GEMMA3_4B["text_config"], "sliding_window": None}})
    ratio = attention_flops(g3, 32768, False) / attention_flops(g3_full, 32768, False)
    # 34 layers: 5 full (s/2 = 16,384 keys), 29 windowed (1024 − 1024²/65,536 = 1,008)
    assert ratio == pytest.approx((5 * 16384 + 29 * 1008) / 34 / 16384)
