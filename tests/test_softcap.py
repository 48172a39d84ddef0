"""Gemma 2's logit soft-capping, cap·tanh(x/cap), under eager PyTorch: tanh's backward reads its output (1 − y²), so
autograd keeps one more tensor the size of its input — the attention scores (transformers' eager_attention_forward:
``attn_weights = torch.tanh(attn_weights / softcap) * softcap``) and the LM head's logits (Gemma2ForCausalLM.forward:
``logits = torch.tanh(logits / final_logit_softcapping) * final_logit_softcapping``)."""

import dataclasses
import json

import pytest

from gpuplan.catalog.hardware import make_hardware
from gpuplan.catalog.models import load_model
from gpuplan.model.memory import memory
from gpuplan.spec import Layout, Training


def test_gemma2_reads_its_caps_and_the_config_class_defaults():
    m = load_model("gemma-2-9b")
    assert (m.attn_softcap, m.final_softcap) == (50.0, 30.0)
    assert (load_model("gemma-3-1b").attn_softcap, load_model("llama-3.1-8b").final_softcap) == (0.0, 0.0)
    cfg = json.loads(json.dumps({k: v for k, v in _gemma2_config().items()
                                 if k not in ("attn_logit_softcapping", "final_logit_softcapping")}))
    # source: transformers Gemma2Config.__init__ defaults final_logit_softcapping=30.0, attn_logit_softcapping=50.0
    assert (load_model(cfg).attn_softcap, load_model(cfg).final_softcap) == (50.0, 30.0)
    off = load_model({**cfg, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (off.attn_softcap, off.final_softcap) == (0.0, 0.0)


def _gemma2_config():
    return {"model_type": "gemma2", "hidden_size": 2304, "num_hidden_layers": 26, "num_attention_heads": 8,
            "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 9216, "vocab_size": 256000,
            "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096}


@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_eager_soft_caps_keep_one_16_bit_tensor_per_score_and_per_logit(attention):
    capped = load_model("gemma-2-9b")
    plain = dataclasses.replace(capped, attn_softcap=0.0, final_softcap=0.0)
    hw, lay = make_hardware("h200", 1), Layout(recompute="none")
    tr = Training(seq_len=2048, global_batch=1, framework="hf-trainer", attention=attention, method="lora")
    a, b = memory(capped, hw, tr, lay).peak, memory(plain, hw, tr, lay).peak
    s, layers, heads, vocab = 2048, 42, 16, 256000
    # eager: the scores' tanh output, 2 B each (bf16), layers x heads x s^2; FlashAttention-2 caps inside the kernel
    assert a.activations - b.activations == (2 * layers * heads * s * s if attention == "eager" else 0)
    # the logits' tanh output, 2 B per logit, whatever the attention
    assert a.logits - b.logits == 2 * s * vocab
