"""The Muon optimizer (model/muon.py): Newton–Schulz FLOPs, the share of parameters it updates, its optimizer-step
time under sharding, and the library words for optimizers (catalog/stacks.json optimizer_words)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.api import evaluate
from gpuplan.catalog.models import load_model
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.muon import NS_STEPS, _ns_flops, muon_split
from gpuplan.model.states import state_bytes


def test_newton_schulz_flops_per_matrix():
    # torch/optim/_muon.py _zeropower_via_newtonschulz: 5 iterations of X·Xᵀ (2m²n), b·A + c·A·A (2m³),
    # a·X + B·X (2m²n) on the matrix transposed to m ≤ n
    assert NS_STEPS == 5
    assert _ns_flops(4096, 4096) == 5 * 6 * 4096 ** 3
    assert _ns_flops(1024, 4096) == _ns_flops(4096, 1024) == 5 * (4 * 1024 ** 2 * 4096 + 2 * 1024 ** 3)


def test_llama_3_1_8b_split():
    m = load_model("llama-3.1-8b")
    h, f, kv, L = 4096, 14336, 1024, 32
    matrices = L * (2 * h * h + 2 * kv * h + 3 * f * h)  # q, o; k, v; gate, up, down
    share, per_dense, per_expert = muon_split(m)
    assert share == matrices / m.params
    flops = L * (2 * _ns_flops(h, h) + 2 * _ns_flops(kv, h) + 3 * _ns_flops(f, h))
    assert per_dense == pytest.approx(flops / m.params, rel=1e-12) and per_expert == 0
    # one fp32 momentum on the matrices, AdamW's two fp32 moments on the rest (embedding, head, norms)
    assert state_bytes("bf16", "muon", m).states * m.params == pytest.approx(4 * matrices + 8 * (m.params - matrices))


def _opt_s(zero: int, optimizer: str = "muon", gpus: int = 8) -> float:
    est = evaluate({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                    "training": {"seq_len": 4096, "optimizer": optimizer, "framework": "deepspeed"},
                    "layout": {"dp": gpus, "zero": zero, "micro_batch": 1}})
    return est.time.step.optimizer_s


@given(st.sampled_from([2, 4, 8]))
def test_a_sharded_muon_splits_its_newton_schulz_over_the_data_parallel_ranks(gpus):
    assert _opt_s(1, gpus=gpus) == pytest.approx(_opt_s(0, gpus=gpus) / gpus, rel=1e-9)


def test_newton_schulz_is_what_muon_adds_to_the_step():
    m = load_model("llama-3.1-8b")
    # unsharded: every rank orthogonalises all 7.0B matrix parameters' worth, ~6.7e14 FLOPs, at a bf16 GEMM rate
    extra = _opt_s(0) - _opt_s(0, "adamw")
    flops = muon_split(m)[1] * m.params
    assert 6.6e14 < flops < 6.8e14
    assert flops / 989e12 < extra < flops / (0.5 * 989e12)


@pytest.mark.parametrize("word, optimizer, impl", [
    ("paged_adamw_8bit", "adamw-8bit", "paged"),        # bitsandbytes' paged optimizer: states in unified memory
    ("adamw_torch", "adamw", "foreach"),
    ("adamw_torch_fused", "adamw", "fused"),
    ("torch.optim.Muon", "muon", "fused"),
    ("lion_32bit", "lion", "fused"),
])
def test_library_words_for_optimizers(word, optimizer, impl):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "training": {"optimizer": word}})
    assert (sc.training.optimizer, sc.training.optimizer_impl) == (optimizer, impl)
    assert [r[1] for r in sc.read_as] == [word.lower()]


def test_a_given_kernel_wins_over_the_words_kernel():
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                         "training": {"optimizer": "adamw_torch", "optimizer_impl": "fused"}})
    assert sc.training.optimizer_impl == "fused"


@pytest.mark.parametrize("optimizer", ["muon", "adafactor", "adamw"])
def test_under_lora_the_adapters_states_follow_the_adapters_shapes(optimizer):
    # every adapter is a matrix (A: r x in, B: out x r): Muon keeps one fp32 momentum per adapter parameter,
    # Adafactor r + in and out + r factors per pair, AdamW two moments — not the full model's mix
    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 1},
                         "training": {"method": "lora", "lora_rank": 16, "optimizer": optimizer, "seq_len": 1024}})
    est = evaluate(sc)
    adapters = est.params_trainable
    m = load_model("llama-3.2-1b")
    targets = [(lg.count * w.count, w.shape) for lg in m.layers for w in lg.weights
               if w.is_matrix and w.group in ("attention", "mlp")]
    per_param = {"muon": 4.0, "adamw": 8.0,
                 "adafactor": 4.0 * sum(n * (32 + o + i) for n, (o, i) in targets)
                 / sum(n * 16 * (o + i) for n, (o, i) in targets)}[optimizer]
    assert est.memory.peak.states.optimizer == pytest.approx(adapters * per_param, rel=1e-9)
