"""The attention core's time: which kernel runs it (per framework and GPU architecture), its measured
rate per pass, mask and head dim, and the fixed cost per 128-row query block that makes short
sequences slower (model/attention.py, catalog/constants.json ``attention_kernels``)."""

from __future__ import annotations

import math

import pytest

from gpuplan.catalog.constants import constant
from gpuplan.catalog.hardware import get_gpu, make_hardware
from gpuplan.catalog.models import load_model
from gpuplan.model.attention import attention_core_s, attention_kernel, plateau, rate, runs_on
from gpuplan.model.compute import attention_s, device, kernel_device
from gpuplan.spec import Training


def _dev(gpu: str, framework: str, attention: str = "flash"):
    return device(make_hardware(gpu, 8), Training(seq_len=4096, framework=framework, attention=attention))


def _tflops(gpu: str, kernel: str, causal: bool, pass_: str, hd: int, seq: int) -> float:
    """The model's rate for the FlashAttention benchmarks' setup (16k tokens, hidden 2048), burst clocks."""
    dev = kernel_device(get_gpu(gpu), "bf16", kernel)
    heads = 2048 // hd
    flops = 4 * 16384 * seq * heads * hd / (2 if causal else 1) * {"fwd": 1, "bwd": 2.5, "fwd_bwd": 3.5}[pass_]
    t = attention_core_s(dev, kernel, causal, pass_, tokens=16384, seq=seq, heads=heads, head_dim=hd)
    return flops / t / 1e12


@pytest.mark.parametrize("framework, gpu, attention, kernel", [
    # Transformer Engine prefers cuDNN's FusedAttention on Hopper+ (TE dot_product_attention/utils.py:
    # "Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance reasons")
    ("megatron-core", "h100-sxm", "flash", "cudnn"), ("megatron-core", "h200", "flash", "cudnn"),
    ("megatron-core", "b200", "flash", "cudnn"),
    # on Ampere TE runs FlashAttention-2; torchtitan (SDPA) and the others run FlashAttention-2 from sm80
    ("megatron-core", "a100-80gb-sxm", "flash", "flash2"), ("torchtitan", "h100-sxm", "flash", "flash2"),
    ("generic", "h100-sxm", "flash", "flash2"), ("pytorch-fsdp", "h100-sxm", "flash", "flash2"),
    # before sm80 PyTorch SDPA's flash and cuDNN backends refuse (sdp_utils.cpp: sm80-sm121); the
    # memory-efficient kernel runs from sm50
    ("generic", "v100-32gb", "flash", "sdpa_mem_efficient"), ("torchtitan", "t4", "flash", "sdpa_mem_efficient"),
    ("megatron-core", "v100-16gb", "flash", "sdpa_mem_efficient"),
    # FlashAttention v1 runs on Turing and Ampere (flash-attention v1 README), not on Volta
    ("generic", "t4", "flash1", "flash1"), ("generic", "v100-32gb", "flash1", "sdpa_mem_efficient"),
    # its Triton kernel (llm-foundry's attn_impl: triton) is measured on A100 only (Dao 2023 Fig. 4): v1's rates
    # elsewhere, SDPA's memory-efficient kernel before sm75
    ("pytorch-fsdp", "a100-40gb-sxm", "flash1-triton", "flash1_triton"),
    ("pytorch-fsdp", "h100-sxm", "flash1-triton", "flash1"),
    ("generic", "v100-32gb", "flash1-triton", "sdpa_mem_efficient"),
    # ROCm: flash-attn's default backend and TE's fused attention are Composable Kernel; SDPA is AOTriton
    ("pytorch-fsdp", "mi300x", "flash", "rocm_ck"), ("megatron-core", "mi300x", "flash", "rocm_ck"),
    ("torchtitan", "mi300x", "flash", "rocm_triton"), ("generic", "mi355x", "flash", "rocm_triton"),
    ("generic", "h100-sxm", "eager", "eager"),
])
def test_the_attention_kernel_follows_the_framework_and_architecture(framework, gpu, attention, kernel):
    assert attention_kernel(framework, get_gpu(gpu).architecture, attention) == kernel
    assert _dev(gpu, framework, attention).attn_kernel == kernel


@pytest.mark.parametrize("gpu, kernel, causal, pass_, hd, published", [
    # Shah et al. 2024 (FlashAttention-3), assets/flash3_fp16_fwd.png: H100 SXM forward at 16k tokens, seq 16k
    ("h100-sxm", "cudnn", False, "fwd", 128, 595), ("h100-sxm", "flash3", True, "fwd", 256, 642),
    ("h100-sxm", "flash2", False, "fwd", 64, 324),
    # Dao 2023 (FlashAttention-2), assets/flash2_a100_fwd_bwd_benchmark.png: A100 forward + backward, seq 16k
    ("a100-80gb-sxm", "flash2", True, "fwd_bwd", 128, 189), ("a100-80gb-sxm", "flash1", False, "fwd_bwd", 64, 110),
    # the same figure's 'xformers' bars (xops.fmha.cutlass: the kernels PyTorch SDPA's memory-efficient backend copies)
    ("a100-80gb-sxm", "sdpa_mem_efficient", True, "fwd_bwd", 128, 92),
    ("a100-80gb-sxm", "sdpa_mem_efficient", False, "fwd_bwd", 64, 75),
    # the same figure's 'FlashAttention Triton' bars (the benchmark script's triton.ops.flash_attention)
    ("a100-80gb-sxm", "flash1_triton", True, "fwd_bwd", 128, 80), ("a100-80gb-sxm", "flash1_triton", False, "fwd_bwd",
                                                                     64, 100),
    # flash-attention PR #2605: GB200 forward, hd 64, 16k tokens at seq 16k
    ("gb200", "flash4", True, "fwd", 64, 1176),
])
def test_the_plateau_is_the_published_rate_at_16k(gpu, kernel, causal, pass_, hd, published):
    assert _tflops(gpu, kernel, causal, pass_, hd, 16384) == pytest.approx(published, rel=1e-9)


def test_flash_attention_2_forward_and_backward_split_as_published_on_h100():
    # H100 FlashAttention-2, non-causal hd 128: forward 370 TFLOPS (FA3 figure), forward+backward 338
    # (FA2 figure): the backward is what the forward leaves, 2.5 / (3.5/338 - 1/370) TFLOPS
    bwd = 2.5 / (3.5 / 338 - 1 / 370)
    assert _tflops("h100-sxm", "flash2", False, "bwd", 128, 16384) == pytest.approx(bwd, rel=1e-9)


def test_cudnn_backward_is_one_and_a_half_flash_attention_2s():
    # Shah et al. 2024, Sec. 4.1: FlashAttention-3 / cuDNN backward 1.5-1.75x FlashAttention-2's (the lower end)
    for hd in (64, 128):
        assert plateau("cudnn", "hopper", "bwd", True, hd) == pytest.approx(1.5 * plateau("flash2", "hopper", "bwd",
                                                                                            True, hd))


@pytest.mark.parametrize("seq", [512, 1024, 2048, 4096, 8192])
def test_the_rate_falls_with_the_row_block_count(seq):
    n, ref = math.ceil(seq / 128), 128
    c = 1.6  # flash2's row_block_cost (tools/derive_kernel_rates.py)
    full = rate("flash2", "hopper", "fwd", False, 128, seq) / rate("flash2", "hopper", "fwd", False, 128, 16384)
    causal = rate("flash2", "hopper", "fwd", True, 128, seq) / rate("flash2", "hopper", "fwd", True, 128, 16384)
    assert full == pytest.approx(n / (n + c) / (ref / (ref + c)))
    assert causal == pytest.approx(n / (n + 1 + 2 * c) / (ref / (ref + 1 + 2 * c)))


def test_eager_causal_attention_computes_the_full_scores_and_adds_the_mask():
    # PyTorch eager attention computes every score and adds the mask: the causal pass takes longer than
    # the full one (the FlashAttention benchmarks' baseline: 35 vs 139 TFLOPS at hd 128, 8k, H100, where
    # the causal count is half the full one)
    dev = kernel_device(get_gpu("h100-sxm"), "bf16", "eager")
    kw = {"tokens": 16384, "seq": 8192, "heads": 16, "head_dim": 128}
    full = attention_core_s(dev, "eager", False, "fwd", **kw)
    causal = attention_core_s(dev, "eager", True, "fwd", **kw)
    assert causal > full


@pytest.mark.parametrize("causal, pass_, hd, seq, published", [
    # FlashAttention-2 figures (assets/flash2_h100_fwd_bwd_benchmark.png), the PyTorch baseline on H100 80GB
    # SXM5 at sequences shorter than the 8k its pass costs are derived from: 120, 50, 72, 29 TFLOP/s
    (False, "fwd_bwd", 128, 1024, 120.0), (True, "fwd_bwd", 128, 1024, 50.0),
    (False, "fwd_bwd", 64, 1024, 72.0), (True, "fwd_bwd", 64, 1024, 29.0),
    # FlashAttention-3 figure (assets/flash3_fp16_fwd.png), forward, the "Standard attention" bars: 119, 34
    (False, "fwd", 128, 2048, 119.0), (True, "fwd", 128, 2048, 34.0),
])
def test_eager_attention_follows_the_published_pytorch_baseline(causal, pass_, hd, seq, published):
    # the components' bar (issue: none beyond ±15 %); below 1k the batched 512 x 512 x 128 GEMMs run slower
    # than the GEMM model says and the model is up to 28 % fast (validate --components lists them)
    assert _tflops("h100-sxm", "eager", causal, pass_, hd, seq) == pytest.approx(published, rel=0.15)


def test_eager_pass_costs_are_what_the_derivation_finds():
    # tools/derive_kernel_rates.py sets attention_kernels.eager.score_pass_bytes: rerunning it must find
    # the shipped values (softmax forward, causal mask add, softmax backward, bytes per score element)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from derive_kernel_rates import derive_eager

    from gpuplan.catalog.constants import table

    assert derive_eager() == dict(table("attention_kernels")["eager"]["score_pass_bytes"])


def test_megatron_fused_softmax_reads_and_writes_the_scores_once():
    # Megatron-LM's FusedScaleMaskSoftmax (frameworks.json fused.softmax) over baddbmm of strided views:
    # forward = the two batched GEMMs + 4 B per score + the context's permute copy (4 B per element),
    # two kernels; the mask costs nothing apart, so causal and full take the same time
    dev = kernel_device(get_gpu("h100-sxm"), "bf16", "eager")
    from gpuplan.model.gemm import gemm_s

    tokens, seq, heads, hd = 16384, 2048, 16, 128
    bh = heads * tokens / seq
    gemms = gemm_s(seq, seq, hd, dev.gemm16, 2.0, bh) + gemm_s(seq, hd, seq, dev.gemm16, 2.0, bh)
    want = gemms + (bh * seq * seq * 4 + 4 * tokens * heads * hd) / dev.bw + 2 * dev.floor_s
    kw = {"tokens": tokens, "seq": seq, "heads": heads, "head_dim": hd, "fused_softmax": True}
    assert attention_core_s(dev, "eager", True, "fwd", **kw) == pytest.approx(want, rel=1e-12)
    assert attention_core_s(dev, "eager", False, "fwd", **kw) == pytest.approx(want, rel=1e-12)
    plain = attention_core_s(dev, "eager", True, "fwd", **{**kw, "fused_softmax": False})
    assert plain > 1.5 * want


def test_the_step_model_fuses_the_softmax_only_where_the_framework_says_so():
    m = load_model("llama-3.1-8b")
    eager = {f: attention_s(m, 16384.0, 4096, 1, 0.0, _dev("h100-sxm", f, "eager"),
                            f.startswith("megatron"))[0] for f in ("megatron-lm", "torchtitan")}
    from gpuplan.model.software import software

    assert software("megatron-lm", False, m).fused_softmax and software("megatron-core", False, m).fused_softmax
    assert not software("torchtitan", False, m).fused_softmax and not software("generic", False, m).fused_softmax
    assert software("torchtitan", True, m).fused_softmax  # torch.compile fuses the mask add into the softmax
    assert eager["megatron-lm"] < eager["torchtitan"]


def test_a_training_step_runs_attention_at_the_sustained_share():
    m = load_model("llama-3.1-8b")
    dev = _dev("h100-sxm", "torchtitan")
    # the measured Hopper clocks under the power limit (MSMF / MAMF) times the fitted rest
    assert dev.sustain == pytest.approx(constant("gemm_share_of_mamf") * (755 / 850 + 702.9 / 828.0) / 2)
    fwd, bwd = attention_s(m, 65536.0, 8192, 1, 0.0, dev)
    burst = kernel_device(get_gpu("h100-sxm"), "bf16", "flash2")
    kw = {"tokens": 65536.0, "seq": 8192, "heads": 32, "head_dim": 128, "v_head_dim": 128}
    assert fwd == pytest.approx(attention_core_s(burst, "flash2", True, "fwd", **kw) / dev.sustain)
    assert bwd == pytest.approx(attention_core_s(burst, "flash2", True, "bwd", **kw) / dev.sustain)


def test_kernels_run_where_their_sources_say():
    assert runs_on("flash3", "hopper") and not runs_on("flash3", "ampere")
    assert not runs_on("flash2", "volta") and runs_on("sdpa_mem_efficient", "volta")
