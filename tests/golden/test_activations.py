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
