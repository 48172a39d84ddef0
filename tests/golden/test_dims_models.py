"""A model given by its dimensions (a paper's table, Megatron-LM's arguments, MPT's keys) without a model_type."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError


def test_a_papers_gpt_row_reads_as_megatrons_gpt():
    # Narayanan et al. 2021 (arXiv:2104.04473) eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)); GPT 1.7B of
    # Table 1 (l 24, h 2304, V 51200, s 2048): 1,652,226,048 — plus the final LayerNorm (2h) the equation leaves out
    spec = load_model({"name": "GPT 1.7B", "arch": "gpt (MHA, GeLU MLP)", "layers": 24, "hidden": 2304, "heads": 24,
                       "kv_heads": 24, "ffn": 9216, "vocab": 51200, "seq_len": 2048, "params_b": 1.7})
    assert spec.params == 1_652_226_048 + 2 * 2304
    assert spec.model_type == "gpt2" and spec.name == "GPT 1.7B"
    assert any("GPT-shaped" in a and "tied" in a for a in spec.assumed)


def test_megatron_arguments_with_swiglu_and_query_groups_read_as_a_llama_decoder():
    # Llama 3 70B in Megatron-LM's argument names: the same parameters as its Hugging Face config
    spec = load_model({"num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 8,
                       "ffn_hidden_size": 28672, "padded_vocab_size": 128256, "swiglu": True, "seq_length": 8192,
                       "untie_embeddings_and_output_weights": True})
    assert spec.params == load_model("llama-3-70b").params
    assert spec.model_type == "llama" and spec.n_kv_heads == 8


@pytest.mark.parametrize("dims, style", [
    ({"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336}, "llama"),  # GQA
    ({"layers": 32, "hidden": 4096, "heads": 32, "ffn": 11008}, "llama"),                # not 4h: gated
    ({"layers": 80, "hidden": 8192, "heads": 64, "arch": "Llama (SwiGLU)"}, "llama"),
    ({"n_layers": 32, "d_model": 4096, "n_heads": 32}, "gpt2"),                          # MPT's keys, plain MLP
    ({"layers": 24, "hidden": 2048, "heads": 16, "activation": "gelu", "ffn": 5461}, "gpt2"),  # said: GeLU
])
def test_the_decoder_style_follows_what_the_dimensions_say(dims, style):
    assert load_model(dims).model_type == style


def test_a_gated_mlp_without_its_width_is_llamas_8h_over_3():
    # Llama's FFN rule: 8h/3 rounded up to a multiple of 256 (4096 -> 11008)
    spec = load_model({"layers": 32, "hidden": 4096, "heads": 32, "swiglu": True})
    assert spec.ffn == 11008


def test_inconsistent_dimensions_are_one_line():
    with pytest.raises(GpuplanError, match="heads 24 must divide hidden 2300"):
        load_model({"layers": 24, "hidden": 2300, "heads": 24})
    with pytest.raises(GpuplanError, match="neither model_type nor params"):
        load_model({"layers": 24, "hidden": 2304})  # no heads: not a decoder's dimensions


def test_dimensions_without_a_sequence_length_take_the_runs():
    # learned positions sized to what the run trains at, so no 'beyond its positions' note for a model of one's own
    from gpuplan.api import evaluate_scenario
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": {"layers": 24, "hidden": 2304, "heads": 24}, "hardware": {"gpu": "h100-sxm",
                         "gpus": 8}, "training": {"seq_len": 8192}})
    assert sc.model.params == load_model({"layers": 24, "hidden": 2304, "heads": 24, "seq_len": 8192}).params
    assert sc.model_ref == {"layers": 24, "hidden": 2304, "heads": 24}  # the echo is the input as given
    est = evaluate_scenario(sc).to_json()
    assert not any("positions" in str(n) for n in est.get("notes", []))
