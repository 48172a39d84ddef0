"""Remote-code decoders (catalog/families_remote.py): Qwen v1 and ChatGLM2/3 / GLM-4, read from their
config.json as Llama-shaped blocks under their own names. Each count is the block's arithmetic written out
(modeling_qwen.py / modeling_chatglm.py shapes), checked against the publisher's rounded figure."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# Qwen/Qwen-7B config.json shape keys
QWEN_7B = {"model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "kv_channels": 128,
           "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 151936, "no_bias": True,
           "seq_length": 8192, "layer_norm_epsilon": 1e-6, "tie_word_embeddings": False}
# THUDM/chatglm2-6b config.json shape keys
CHATGLM2_6B = {"model_type": "chatglm", "num_layers": 28, "padded_vocab_size": 65024, "hidden_size": 4096,
               "ffn_hidden_size": 13696, "kv_channels": 128, "num_attention_heads": 32, "seq_length": 32768,
               "multi_query_attention": True, "multi_query_group_num": 2, "add_qkv_bias": True,
               "add_bias_linear": False, "rmsnorm": True, "post_layer_norm": True}
# THUDM/glm-4-9b config.json: ChatGLM2's block, 40 layers, GLM-4's 151,552-token vocabulary
GLM4_9B = {**CHATGLM2_6B, "num_layers": 40, "padded_vocab_size": 151552, "seq_length": 8192}


def _qwen_count(h: int, L: int, V: int, inter: int, bias: bool = False) -> int:
    # wte + lm_head; per block c_attn (3h x h + 3h bias), c_proj (h x h), w1/w2/c_proj (3 x h x inter/2), ln_1, ln_2;
    # ln_f
    per = h * 3 * h + 3 * h + h * h + 3 * h * (inter // 2) + 2 * h
    if bias:
        per += h + 2 * (inter // 2) + h
    return 2 * V * h + L * per + h


def _glm_count(h: int, L: int, V: int, ffn: int, heads: int, groups: int, d: int) -> int:
    # embedding + output_layer; per block query_key_value ((heads + 2 groups) x d, with its bias), dense (h x h),
    # dense_h_to_4h (2 ffn x h), dense_4h_to_h (h x ffn), two RMSNorms; the final RMSNorm
    qkv = (heads + 2 * groups) * d
    return 2 * V * h + L * (h * qkv + qkv + h * heads * d + 3 * h * ffn + 2 * h) + h


@pytest.mark.parametrize("cfg, count, published_b", [
    # Qwen-7B: 7.72B (Hugging Face model page, safetensors); ChatGLM2-6B: 6.24B; GLM-4-9B: 9.40B
    (QWEN_7B, _qwen_count(4096, 32, 151936, 22016), 7.72),
    (CHATGLM2_6B, _glm_count(4096, 28, 65024, 13696, 32, 2, 128), 6.24),
    (GLM4_9B, _glm_count(4096, 40, 151552, 13696, 32, 2, 128), 9.40),
])
def test_released_remote_code_models_hold_their_count(cfg, count, published_b):
    m = load_model(cfg)
    assert m.params == count
    assert round(m.params / 1e9, 2) == published_b
    assert any("remote code" in a for a in m.assumed)


def test_qwen_biases_follow_no_bias():
    with_bias = load_model({**QWEN_7B, "no_bias": False})
    assert with_bias.params == _qwen_count(4096, 32, 151936, 22016, bias=True)


def test_chatglm_groups_are_its_key_value_heads():
    m = load_model(CHATGLM2_6B)
    assert (m.n_heads, m.n_kv_heads, m.head_dim, m.ffn, m.vocab) == (32, 2, 128, 13696, 65024)
    assert load_model({**CHATGLM2_6B, "multi_query_attention": False}).n_kv_heads == 32


@pytest.mark.parametrize("cfg, words", [
    ({"model_type": "chatglm", "hidden_size": 4096, "num_layers": 28, "num_attention_heads": 32,
      "vocab_size": 130528, "inner_hidden_size": 16384}, "ChatGLM-6B (v1"),
    ({**CHATGLM2_6B, "rmsnorm": False}, "rmsnorm = false"),
    ({**QWEN_7B, "intermediate_size": 22015}, "must be even"),
])
def test_shapes_outside_the_block_are_refused_with_the_fix(cfg, words):
    with pytest.raises(GpuplanError, match=words.replace("(", r"\(")):
        load_model(cfg)
