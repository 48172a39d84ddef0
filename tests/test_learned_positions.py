"""A learned position table has one row per position: a run past the model's ``max_positions`` trains a longer table
(spec/model.py ``with_positions``), said under the model's ``assumed``; RoPE models keep their count and the note
that the sequence is beyond their training length."""

from __future__ import annotations

from dataclasses import replace

from gpuplan.api import evaluate_scenario
from gpuplan.catalog.models import load_model
from gpuplan.io.scenario import parse_scenario
from gpuplan.spec.model import with_positions


def _scenario(model: str, seq: int):
    return parse_scenario({"model": model, "hardware": {"gpu": "a100-80gb", "gpus": 8},
                           "training": {"seq_len": seq, "tokens": 1e9}})


def test_a_sequence_past_the_table_grows_it_by_one_row_of_hidden_per_position():
    # GPT-2 small: n_positions 1024, n_embd 768; 124,439,808 parameters (the HF checkpoint)
    base = load_model("gpt2")
    assert base.params == 124_439_808
    sc = _scenario("gpt2", 4096)
    assert sc.model.params == 124_439_808 + (4096 - 1024) * 768
    assert sc.model.max_positions == 4096
    assert any("1,024 positions" in a and "+2,359,296 parameters" in a for a in sc.model.assumed)


def test_within_the_table_nothing_changes():
    sc = _scenario("gpt2", 1024)
    assert sc.model == load_model("gpt2") and sc.model.assumed == ()


def test_llm_foundry_numparams_grow_with_the_sequence_as_published():
    # llm-foundry scripts/train/benchmarking/README.md (commit 8c8dd48f72): MPT-125m's NumParams is 125,311,488 at
    # sequence length 2048 and 174,070,272 at 65536 (the learned table is sized to max_seq_len)
    assert _scenario("mpt-125m", 2048).model.params == 125_311_488
    assert _scenario("mpt-125m", 65536).model.params == 174_070_272
    # MPT-350m at 2048: 355,985,408 (same table)
    assert _scenario("mpt-350m", 2048).model.params == 355_985_408


def test_rope_models_keep_their_count_and_say_the_sequence_is_beyond_training():
    sc = _scenario("llama-3.1-8b", 262144)
    assert sc.model == load_model("llama-3.1-8b")
    est = evaluate_scenario(sc)
    assert any("beyond the 131,072 positions" in n for n in est.to_json()["notes"])


def test_an_exact_count_from_weights_grows_by_the_same_rows():
    m = load_model("gpt2")
    given = replace(m, params_override=124_439_808, params_source="safetensors")
    grown = with_positions(given, 2048)
    assert grown.params == 124_439_808 + 1024 * 768
