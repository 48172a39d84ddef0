"""Hybrid decoders (issue 21, item 5): the blocks' token mixers costed one kind at a time — Mamba-2 and gated
delta-rule scans (model/ssm.py), attention only on attention blocks, an MLP only where a block has one, tensor
parallelism's reductions one per residual branch — and the layouts their kernels cannot run refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpuplan
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model import ssm
from gpuplan.model.activations import ActShape, layer_terms
from gpuplan.model.flops import attention_flops, flops_per_token
from gpuplan.model.params import rank_params
from gpuplan.spec.rules import tp_splits_heads
from tests.golden.test_hf_families_hybrid import NEMOTRON_H_8B, QWEN3_NEXT_80B

NH = load_model(NEMOTRON_H_8B)
QN = load_model(QWEN3_NEXT_80B)


def _kind(m, mixer, mlp, moe=False):
    return next(i for i, lg in enumerate(m.kinds) if lg.kind == (moe, mixer, mlp))


def test_mamba2_scan_flops_are_the_ssd_algorithm_matmuls():
    # Dao & Gu 2024 (arXiv:2405.21060) Sec. 6, chunk Q: per token C·Bᵀ 2·Q·N per group, (L∘CBᵀ)·X 2·Q·P per head,
    # the chunk state Bᵀ·X and the output C·h 2·N·P each per head. Nemotron-H-8B: Q 128, N 128, G 8, P 64, H 128.
    q, n, g, p, h = 128, 128, 8, 64, 128
    assert ssm.scan_flops(NH, "mamba2") == 2 * q * n * g + 2 * q * p * h + 4 * n * p * h == 6_553_600


def test_gated_delta_rule_scan_flops_are_the_chunked_wy_matmuls():
    # Yang et al. 2024 (arXiv:2412.06464) Sec. 3.3, chunk C 64, per value head: β·K·Kᵀ and Q·Kᵀ 2·C·d_k each, the
    # triangular inverse 2·C², W = A·K 2·C·d_k, U = A·V and (QKᵀ)·V 2·C·d_v each, W·h, Kᵀ·V and Q·h 2·d_k·d_v each.
    c, dk, dv, h = 64, 128, 128, 32
    assert ssm.scan_flops(QN, "gdn") == h * (6 * c * dk + 2 * c * c + 4 * c * dv + 6 * dk * dv) == 6_029_312


def test_attention_flops_only_on_attention_blocks_and_scans_on_the_rest():
    s = 8192
    f = flops_per_token(NH, s, "none")
    attention = NH.attention_layers * attention_flops(NH, s, causal_saving=True)
    assert NH.attention_layers == 4
    assert f.forward_attention == pytest.approx(attention + 24 * ssm.scan_flops(NH, "mamba2"), rel=1e-12)


def test_a_mamba_block_keeps_what_the_kernels_save():
    x = ActShape(s=4096, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    terms = layer_terms(NH, _kind(NH, "mamba2", False), x)
    # norm input and in_proj input (h each), in_proj output z|xBC|dt (2·8192 + 2·8·128 + 128), conv output
    # (8192 + 2·8·128), scan output and out_proj input (8192 each): 2 B each; fp32 cumulative decays per head (4 B)
    per_token = 2 * (2 * 4096 + 18_560 + 10_240 + 2 * 8192) + 4 * 128
    assert sum(terms.values()) == 4096 * per_token
    assert not {"q", "k", "v", "attn_core", "mlp"} & terms.keys()
    mlp_only = layer_terms(NH, _kind(NH, "none", True), x)
    assert set(mlp_only) == {"mlp_norm_input", "mlp_input", "mlp"}


@settings(max_examples=30, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]))
def test_tensor_parallel_reductions_are_one_per_residual_branch(tp, pp):
    # Nemotron-H: every block is one branch (a mixer or an MLP); Qwen3-Next: two (a mixer and an MoE)
    for m, per_block in ((NH, 1), (QN, 2)):
        total = sum(rank_params(m, tp, 1, pp, 1, stage, None, 0).sublayers for stage in range(pp))
        assert total == per_block * m.n_layers


def test_tp_must_split_the_recurrent_heads_and_groups():
    assert tp_splits_heads(NH, 8) and not tp_splits_heads(NH, 16)  # 8 B/C groups
    with pytest.raises(GpuplanError, match="8 groups"):
        gpuplan.evaluate(model=NEMOTRON_H_8B, gpu="h100-sxm", gpus=16, tp=16, seq_len=4096, global_batch=16)


def test_context_parallelism_over_recurrent_layers_is_refused_and_not_searched():
    with pytest.raises(GpuplanError, match="cp 1"):
        gpuplan.evaluate(model=QWEN3_NEXT_80B, gpu="h100-sxm", gpus=64, cp=2, ep=8, seq_len=65536, global_batch=64)
    best = gpuplan.plan(model=NEMOTRON_H_8B, gpu="h100-sxm", gpus=16, seq_len=65536, global_batch=64).best
    assert best is not None and best.layout.cp == 1


def test_nemotron_h_8b_on_one_node_fits_and_its_scans_take_time():
    est = gpuplan.evaluate(model=NEMOTRON_H_8B, gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, global_batch=64,
                           micro_batch=1, recompute="full")
    assert est.memory.fits
    # the Mamba blocks' scans are part of the step: drop them and the forward FLOPs fall by their share
    f = est.time.flops
    assert f.forward_attention > NH.attention_layers * attention_flops(NH, 8192, causal_saving=True)


def test_the_unmeasured_scans_widen_the_throughput_interval_by_their_share():
    from gpuplan.catalog.constants import constant
    from gpuplan.catalog.intervals import spread, widened

    est = gpuplan.evaluate(model=NEMOTRON_H_8B, gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, global_batch=64,
                           micro_batch=1, recompute="full")
    t, st = est.time, est.time.step
    share = st.scan_s / st.step_s
    assert 0.02 < share < 0.5  # the Mamba blocks' scans: a real part of the step, not most of it
    base = spread("throughput", "generic", "hopper", 8, 8)
    assert base is not None and t.spread is not None
    # factor k = 2: the scans taking twice as long lower the low end by 1/(1 + share), half as long raise the high
    # end by 1/(1 - share/2)
    assert constant("unmeasured_kernel_factor") == 2.0
    assert t.spread.p10 == pytest.approx((1 + base.p10) / (1 + share) - 1, rel=1e-12)
    assert t.spread.p90 == pytest.approx((1 + base.p90) / (1 - share / 2) - 1, rel=1e-12)
    assert "unmeasured kernels" in t.spread.regime
    assert widened(base, 0.0, 2.0) is base
    # an all-attention model's interval is the regime's own
    llama = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, global_batch=64,
                             micro_batch=1, recompute="full")
    assert llama.time.step.scan_s == 0.0 and llama.time.spread == base


def test_under_lora_a_recurrent_block_keeps_only_what_its_kernels_and_adapters_need():
    # a frozen in_proj / out_proj keeps neither input (no weight gradient); the scan's own saved tensors stay
    base = dict(s=4096, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    kind = _kind(NH, "mamba2", False)
    full = layer_terms(NH, kind, ActShape(**base))
    lora = layer_terms(NH, kind, ActShape(**base, method="lora", lora_targets=("q_proj", "v_proj"), lora_rank=16))
    assert lora["qkv_input"] == lora["ssm_out_proj_input"] == 0.0 and full["ssm_out_proj_input"] > 0
    assert {k: lora[k] for k in ("in_proj_output", "conv_output", "scan_output", "decays")} == \
        {k: full[k] for k in ("in_proj_output", "conv_output", "scan_output", "decays")}


def test_a_falcon_h1_block_costs_attention_and_the_scan_side_by_side():
    cfg = {"model_type": "falcon_h1", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 2048, "vocab_size": 32000, "mamba_n_heads": 16,
           "mamba_d_state": 64, "mamba_d_ssm": 1024}
    m = load_model(cfg)
    x = ActShape(s=2048, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    both = layer_terms(m, 0, x)
    # the attention block's terms and the scan's own tensors (the normed input q, k, v and in_proj all read is one)
    scan = ssm.ssm_terms(m, "mamba2", 2048, 1, 1.0, 2, 2, 2)
    assert {"q", "k", "v", "attn_core", "scan_output", "ssm_out_proj_input", "mlp"} <= both.keys()
    assert both["scan_output"] == scan["scan_output"] and both["attn_norm_input"] == scan["mixer_norm_input"]
    assert "mixer_norm_input" not in both
    # one reduction for the two mixers (their outputs are summed), one for the MLP
    assert rank_params(m, 2, 1, 1, 1, 0, None, 0).sublayers == 2 * m.n_layers
    f = flops_per_token(m, 2048, "none")
    assert f.forward_attention == pytest.approx(
        m.n_layers * (attention_flops(m, 2048, causal_saving=True) + ssm.scan_flops(m, "mamba2")), rel=1e-12)
    est = gpuplan.evaluate(model=cfg, gpu="h100-sxm", gpus=1, seq_len=2048, global_batch=8)
    assert est.time is not None and 0 < est.time.step.scan_s < est.time.step.compute_s


def test_a_gated_short_convolution_block_keeps_its_products_inputs_and_moves_16_bytes_per_unit():
    from gpuplan.model.compute import CONV_MIXER_BYTES

    m = load_model({"model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
                    "intermediate_size": 4096, "vocab_size": 32000, "full_attn_idxs": [3]})
    conv = _kind(m, "conv", True)
    x = ActShape(s=2048, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    terms = layer_terms(m, conv, x)
    sbh = 2048 * 1024
    # the norm's and in_proj's inputs, B|C|x (3h), B·x, the convolution's output, C·y: 2 B each
    assert sum(v for k, v in terms.items() if not k.startswith("mlp")) == 2 * sbh * (1 + 1 + 3 + 1 + 1 + 1)
    assert not {"q", "attn_core", "scan_output"} & terms.keys()
    assert CONV_MIXER_BYTES == 2 * (3 + 2 + 3)  # B·x, the convolution, C·y: 8 tensor passes of 2 B
    assert m.ssm is None and m.hybrid
    est = gpuplan.evaluate(model="llama-3.2-1b", gpu="h100-sxm", gpus=1, seq_len=2048, global_batch=8)
    assert est.time.step.scan_s == 0.0
