"""The attention core's time: which kernel runs it (per framework and GPU architecture), its cited
share of peak, and the fixed cost per 128-row query block that makes short sequences slower."""

from __future__ import annotations

import math

import pytest

from gpuplan.catalog.constants import constant, table
from gpuplan.catalog.hardware import get_gpu, make_hardware
from gpuplan.catalog.models import load_model
from gpuplan.model import compute
from gpuplan.model.compute import _attention, attention_kernel, attention_short_sequence_factor, device
from gpuplan.model.flops import attention_flops
from gpuplan.spec import Training


def _dev(gpu: str, framework: str):
    return device(make_hardware(gpu, 8), Training(seq_len=4096, framework=framework))


@pytest.mark.parametrize("framework, gpu, kernel", [
    # Transformer Engine prefers cuDNN's FusedAttention on Hopper+ (TE dot_product_attention/utils.py:
    # "Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance reasons")
    ("megatron-core", "h100-sxm", "cudnn"), ("megatron-core", "h200", "cudnn"), ("megatron-core", "b200", "cudnn"),
    # on Ampere TE runs FlashAttention-2; torchtitan (SDPA) and the others run FlashAttention-2 everywhere
    ("megatron-core", "a100-80gb-sxm", "flash2"), ("torchtitan", "h100-sxm", "flash2"),
    ("generic", "h100-sxm", "flash2"), ("pytorch-fsdp", "h100-sxm", "flash2"),
])
def test_the_attention_kernel_follows_the_framework_and_architecture(framework, gpu, kernel):
    assert attention_kernel(framework, get_gpu(gpu).architecture) == kernel


def test_cudnn_attention_runs_at_its_cited_share_on_hopper():
    te, sdpa = _dev("h100-sxm", "megatron-core"), _dev("h100-sxm", "torchtitan")
    share = constant("attention_achieved_share")
    e = te.e_gemm
    # FlashAttention-3 class: 0.75 forward, 1.5 x FlashAttention-2's 0.32 backward (Shah et al. 2024)
    assert te.e_attn_f == pytest.approx(min(0.75 * share, e))
    assert te.e_attn_b == pytest.approx(min(0.48 * share, e))
    hopper = table("attention_efficiency")["hopper"]
    assert sdpa.e_attn_f == pytest.approx(min(hopper["forward"] * share, e))
    assert sdpa.e_attn_b == pytest.approx(min(hopper["backward"] * share, e))
    assert te.e_attn_b / sdpa.e_attn_b == pytest.approx(min(0.48 * share, e) / min(0.32 * share, e))


def test_ampere_attention_is_the_same_kernel_for_every_framework():
    assert _dev("a100-80gb-sxm", "megatron-core") == _dev("a100-80gb-sxm", "torchtitan")


@pytest.mark.parametrize("seq, blocks", [(128, 1), (512, 4), (2048, 16), (2049, 17), (65536, 512)])
def test_the_short_sequence_factor_counts_128_row_blocks(seq, blocks):
    k = constant("attention_row_block_cost")
    assert attention_short_sequence_factor(seq) == pytest.approx(1 + k / blocks)
    assert blocks == math.ceil(seq / compute.FLASH_BLOCK)


def test_flash_attention_time_per_token_grows_linearly_with_sequence_plus_the_block_cost():
    m = load_model("llama-3.1-8b")
    dev = _dev("h100-sxm", "torchtitan")
    tokens = 65536.0

    def fwd(seq: int) -> float:
        return _attention(m, tokens, seq, 1, "flash", 0.0, dev)[0]

    ideal = tokens * attention_flops(m, 2048, causal_saving=True) / (dev.peak * dev.e_attn_f)
    assert fwd(2048) == pytest.approx(ideal * attention_short_sequence_factor(2048))
    # 16x the sequence: 16x the ideal FLOPs per token, and the block cost shrinks 16-fold
    k = constant("attention_row_block_cost")
    assert fwd(32768) / fwd(2048) == pytest.approx(16 * (1 + k / 256) / (1 + k / 16))
    # FlashAttention v1 at half FlashAttention-2's rate, the same block structure (Dao 2023)
    assert _attention(m, tokens, 2048, 1, "flash1", 0.0, dev)[0] == pytest.approx(2 * fwd(2048))
