"""Sequence parallelism as PyTorch's DTensor plan runs it (torchtitan apply_tp): the block input is redistributed
Shard(1) -> Replicate before the column-parallel linears (wq/wk/wv, w1/w3, the LM head), and F.linear saves that
all-gathered input for the weight gradient — s·b·h per block each, where Megatron keeps the sequence shard and
all-gathers it again in backward (Korthikanti et al. 2022, Sec. 4.2.2: s·b·h/t)."""

from __future__ import annotations

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.framework_memory import keeps_gathered_sp_input
from gpuplan.catalog.models import load_model as get_model
from gpuplan.model import act_parts
from gpuplan.model.activations import ActShape, layer_terms

S, B, T = 4096, 1, 4


def _memory(framework: str, monkeypatch=None, gathered: bool | None = None) -> dict:
    if monkeypatch is not None:
        monkeypatch.setattr(act_parts, "keeps_gathered_sp_input", lambda fw: gathered)
        act_parts.activation_parts.cache_clear()
    sc = make("llama-3.1-8b", "h100-sxm", T, training={"seq_len": S, "framework": framework, "tokens": 1e9,
                                                       "global_batch": 8},
              layout={"dp": 1, "tp": T, "micro_batch": B, "recompute": "none", "sequence_parallel": True})
    try:
        return evaluate(sc).to_json()["memory"]
    finally:
        act_parts.activation_parts.cache_clear()


def test_which_frameworks_keep_the_gathered_input():
    assert keeps_gathered_sp_input("torchtitan")
    assert not any(keeps_gathered_sp_input(f) for f in ("megatron-core", "megatron-lm", "nanotron", "generic"))


def test_torchtitan_keeps_each_block_input_whole_twice(monkeypatch):
    kept = _memory("torchtitan")
    shard = _memory("torchtitan", monkeypatch, gathered=False)
    # Llama 3.1 8B: 32 blocks, h 4096; bf16 inputs of the attention and MLP linears, (1 - 1/t) more of each
    per_block = 2 * 2 * S * B * 4096 * (1 - 1 / T)
    assert kept["activations_per_microbatch"] - shard["activations_per_microbatch"] == pytest.approx(32 * per_block)
    # the LM head's input is the final norm's output all-gathered as well (one stage: it is this rank's)
    assert kept["activations"] - shard["activations"] == pytest.approx(32 * per_block + 2 * S * B * 4096 * 0.75)


def test_megatron_keeps_the_shard():
    m = get_model("llama-3.1-8b")
    x = ActShape(s=S, b=B, t=T, sp=True, dropout=False, flash=True, elem=2, linear_in=2)
    terms = layer_terms(m, 0, x)
    # Korthikanti et al. 2022 Eq. 4: the linears' inputs divide by t with sequence parallelism
    assert terms["qkv_input"] == 2 * S * B * 4096 / T
    assert terms["mlp_input"] == 2 * S * B * 4096 / T


@settings(max_examples=60, deadline=None)
@given(t=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), fp8=st.booleans(), b=st.integers(1, 8))
def test_gathering_never_saves_and_only_matters_under_sequence_parallelism(t, sp, fp8, b):
    m = get_model("llama-3.1-8b")
    common = dict(s=1024, b=b, t=t, sp=sp, dropout=False, flash=True, elem=2, linear_in=1 if fp8 else 2)
    whole = sum(layer_terms(m, 0, ActShape(**common, gathered=True)).values())
    shard = sum(layer_terms(m, 0, ActShape(**common, gathered=False)).values())
    assert whole >= shard
    assert (whole == shard) == (not sp or t == 1)
