"""Activation memory against Korthikanti et al. 2022."""

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.model.activations import ActShape, korthikanti_layer_bytes, layer_bytes, layer_terms

# GPT-3 175B shape: Brown et al. 2020, Table 2.1 (96 layers, h 12288, 96 heads, 4h MLP)
GPT3 = {"model_type": "gpt2", "n_layer": 96, "n_embd": 12288, "n_head": 96, "n_positions": 2048,
        "vocab_size": 50257}


def shape(t=1, sp=False, s=2048, b=1, dropout=True, flash=False):
    return ActShape(s=s, b=b, t=t, sp=sp, dropout=dropout, flash=flash, elem=2, linear_in=2)


@pytest.mark.parametrize(("t", "sp"), [(1, False), (2, False), (8, False), (8, True), (4, True)])
def test_gpt_layer_equals_korthikanti_equations(t, sp):
    # source: Korthikanti et al. 2022 (arXiv:2205.05198) Eq. 1, 2 and 4:
    # s·b·h·(34 + 5as/h), s·b·h·(10 + 24/t + 5as/(ht)), s·b·h·(34/t + 5as/(ht))
    m = load_model(GPT3)
    ours = layer_bytes(m, False, shape(t, sp), "none")
    assert ours == pytest.approx(korthikanti_layer_bytes(2048, 1, 12288, 96, t, sp), rel=1e-12)


def test_selective_recompute_leaves_34sbh_over_t():
    # source: Korthikanti et al. 2022 Sec. 5 / Eq. 6: with selective recomputation and sequence
    # parallelism the activations are 34·s·b·h/t per layer.
    m = load_model(GPT3)
    ours = layer_bytes(m, False, shape(8, True), "selective")
    assert ours == pytest.approx(34 * 2048 * 12288 / 8, rel=1e-12)


def test_full_recompute_keeps_2sbh():
    # source: Korthikanti et al. 2022 Sec. 5: full recomputation stores only the layer input, 2·s·b·h
    m = load_model(GPT3)
    assert layer_bytes(m, False, shape(1, False), "full") == 2 * 2048 * 12288


def test_gqa_and_swiglu_terms_of_llama_3_8b():
    # Llama 3.1 8B: h 4096, 32 heads, 8 KV heads of 128, SwiGLU f 14336; flash attention, no dropout.
    m = load_model("llama-3.1-8b")
    s, b, h, f = 4096, 1, 4096, 14336
    terms = layer_terms(m, False, shape(s=s, dropout=False, flash=True))
    assert terms["k"] == terms["v"] == 2 * s * b * 8 * 128
    assert terms["mlp"] == 8 * s * b * f
    assert terms["attn_core"] == 4 * 32 * s * b
    expected = 2 * s * b * h * 6 + 4 * s * b * 1024 + 8 * s * b * f + 4 * 32 * s * b
    assert sum(terms.values()) == expected


@pytest.mark.parametrize(("elem", "dropout", "fp32_softmax", "per_score"), [
    # Korthikanti et al. 2022 Sec. 4.1: the softmax output (2 B), with dropout its mask (1 B) and output (2 B)
    (2, False, False, 2), (2, True, False, 5),
    # Hugging Face's eager_attention_forward (transformers models/llama/modeling_llama.py):
    # softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype) — autograd keeps the fp32 output for the softmax's
    # backward and the bf16 cast for P·V (6 B); with dropout its 1-byte mask and its output instead of the cast (7 B)
    (2, False, True, 6), (2, True, True, 7),
    # fp32 training: the cast is the softmax's own output (4 B); dropout adds its mask and fp32 output (9 B)
    (4, False, True, 4), (4, True, True, 9),
])
def test_eager_attention_keeps_the_bytes_its_softmax_saves(elem, dropout, fp32_softmax, per_score):
    m = load_model("llama-3.1-8b")
    s, b = 4096, 1
    x = ActShape(s=s, b=b, t=1, sp=False, dropout=dropout, flash=False, elem=elem, linear_in=elem,
                 softmax_fp32=fp32_softmax)
    assert layer_terms(m, False, x)["attn_core"] == per_score * 32 * s * s * b


def test_a_hugging_face_eager_run_keeps_three_times_megatrons_scores():
    from gpuplan.catalog.hardware import make_hardware
    from gpuplan.model.memory import memory
    from gpuplan.spec import Layout, Training

    m, hw, lay = load_model("llama-3.1-8b"), make_hardware("h200", 1), Layout(recompute="none")
    act = {(fw, att): memory(m, hw, Training(seq_len=4096, global_batch=1, framework=fw, attention=att), lay).peak
           .activations for fw, att in (("hf-trainer", "eager"), ("hf-trainer", "flash"), ("megatron-core", "eager"),
                                        ("megatron-core", "flash"))}
    scores = 32 * 32 * 4096 * 4096  # layers x heads x s^2
    assert act[("hf-trainer", "eager")] - act[("hf-trainer", "flash")] == pytest.approx(scores * 6 - 32 * 4 * 32 * 4096)
    assert act[("megatron-core", "eager")] - act[("megatron-core", "flash")] == \
        pytest.approx(scores * 2 - 32 * 4 * 32 * 4096)
