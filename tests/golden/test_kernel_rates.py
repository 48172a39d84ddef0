"""Kernel rates from the measured curves (issue 21): the GEMM kernel model (model/gemm.py, catalog/
matmul.json) and memory-bound work (model/compute.py, model/software.py), each against a published
figure, the figure's source on the line above."""

from __future__ import annotations

import pytest

from gpuplan.catalog.hardware import get_gpu, make_hardware
from gpuplan.catalog.matmul import kernel_model, matmul_sweep, sustained_ratio
from gpuplan.catalog.models import load_model
from gpuplan.model.compute import device, kernel_device, matmul_s, streamed_s
from gpuplan.model.gemm import gemm_s
from gpuplan.model.software import software
from gpuplan.spec import Training
from gpuplan.validation.component_models import memory_modelled
from gpuplan.validation.components import corpus


def tflops(gpu: str, m: int, n: int, k: int, precision: str = "bf16") -> float:
    dev = kernel_device(get_gpu(gpu), precision)
    return 2 * m * n * k / matmul_s(m, n, k, dev) / 1e12


@pytest.mark.parametrize("gpu, precision, shape, published", [
    # ML Engineering, compute/accelerator 'Maximum Achievable Matmul FLOPS' tables (matmul.json profiles):
    # H100 SXM bf16 794.5 TFLOPS at 2048x2048x13312; H200 850 at 1536x2816x40960; MI355X 1565 at 12288x8192x8192
    ("h100-sxm", "bf16", (2048, 2048, 13312), 794.5), ("h200", "bf16", (1536, 2816, 40960), 850.0),
    # A100 SXM 271.2 (mleng_mamf_2026 row, 1024x10240x5120): its architecture's measured row
    ("a100-80gb-sxm", "bf16", (1024, 10240, 5120), 271.2),
])
def test_the_best_shape_runs_at_its_published_rate(gpu, precision, shape, published):
    assert tflops(gpu, *shape, precision) == pytest.approx(published, rel=1e-6)


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200", "mi300x", "a100-80gb-sxm", "l40s"])
def test_no_shape_beats_the_best_measured_one(gpu):
    dev = kernel_device(get_gpu(gpu), "bf16")
    best = dev.peak * dev.gemm.burst / 1e12
    for m in (64, 1024, 8192, 65536):
        for n in (128, 4096, 28672):
            assert tflops(gpu, m, n, 4096) <= best * (1 + 1e-9)


def test_a_few_tiles_with_a_long_k_split_k():
    # OpenXLA GEMM table (ROCm/xla @ea2c45f), sm_90: 256x256xK takes 8.4 us at K=2048 and 5.9 us at K=4096
    # — faster with twice the work, which only splitting K over more SMs explains; the model splits too
    dev = kernel_device(get_gpu("h100-sxm"), "bf16")
    whole_k_only = dev.gemm.model.floor_s + 2 * 128 * 256 * (4096 + dev.gemm.model.tile_k) / (
        dev.peak * dev.gemm.main / dev.gemm.sms)
    assert matmul_s(256, 256, 4096, dev) < whole_k_only / 2


def test_an_fp8_gemm_writes_16_bit_results():
    # Microsoft SuperBench cublaslt_gemm.cu (the Azure AI-benchmarking-guide's GEMM): in_type fp8e4m3 runs
    # <fp8e4m3, fp8e4m3, fp16>; a memory-bound fp8 shape moves 1-byte inputs and a 2-byte output
    from gpuplan.model.gemm import _model_s

    dev = kernel_device(get_gpu("h100-sxm"), "fp8")
    m, n, k = 802816, 192, 768
    moved = m * k + k * n + 2 * m * n
    assert _model_s(m, n, k, 1, 1.0, dev.gemm) == pytest.approx(dev.gemm.model.floor_s + moved / dev.gemm.bw,
                                                                rel=1e-12)
    # a 16-bit GEMM's output is as wide as its inputs
    dev16 = kernel_device(get_gpu("h100-sxm"), "bf16")
    assert _model_s(m, n, k, 1, 2.0, dev16.gemm) == pytest.approx(
        dev16.gemm.model.floor_s + 2 * (m * k + k * n + m * n) / dev16.gemm.bw, rel=1e-12)


def test_an_unaligned_dimension_runs_a_slower_kernel():
    # cuBLAS docs 2.1.11 'Tensor Core Usage': dimensions in multiples of 16 bytes for the best kernels;
    # pytorch/pytorch#181718 (RTX 4090, bf16): 2055^3 at 115.6 TFLOPS where 2040^3 runs 155.9, 0.74 of it
    assert kernel_model("hopper").align_factor == pytest.approx(115.6 / 155.9, rel=2e-3)
    dev = kernel_device(get_gpu("h100-sxm"), "bf16")
    aligned, odd = gemm_s(1024, 2144, 1024, dev.gemm), gemm_s(1024, 2145, 1024, dev.gemm)
    assert odd / aligned == pytest.approx(1 / kernel_model("hopper").align_factor, rel=0.01)


def test_the_sweep_holds_none_of_the_shapes_the_components_check():
    checked = {(p["gpu"], p["inputs"]["dtype"], p["inputs"]["m"], p["inputs"]["n"], p["inputs"]["k"])
               for p in corpus()["points"] if p["source"] == "xla_gemm_table"}
    for arch, prec in (("hopper", "bf16"), ("blackwell", "bf16"), ("blackwell", "fp8"), ("cdna3", "bf16"),
                       ("cdna4", "bf16"), ("cdna4", "fp8")):
        sweep = matmul_sweep(arch, prec)
        assert sweep is not None and len(sweep.points) == 103  # 125 b=1 shapes less the 22 checked
        assert not {(sweep.gpu_id, prec, m, n, k) for m, n, k, _ in sweep.points} & checked


def test_a_step_sustains_its_share_of_the_burst_rate():
    # the step's GEMMs run at gemm_share_of_mamf of the kernel rates the microbenchmarks measure
    hw, tr = make_hardware("h100-sxm", 8), Training(seq_len=4096)
    step, burst = device(hw, tr), kernel_device(get_gpu("h100-sxm"), "bf16")
    assert matmul_s(8192, 4096, 4096, step) == pytest.approx(matmul_s(8192, 4096, 4096, burst) / step.sustain,
                                                             rel=0.05)
    assert step.e_gemm == pytest.approx(burst.gemm.burst * step.sustain)


@pytest.mark.parametrize("arch, ratio", [
    # ML Engineering, 'Maximum Achievable and Sustainable Matmul FLOPS' table (catalog/matmul.json): H200 MSMF 755 of
    # MAMF 850 (siblings busy) and 702.9 of 828.0 (mamf-finder, idle siblings): the median of the two
    ("hopper", (755 / 850 + 702.9 / 828.0) / 2),
    # A100 PCIe 80GB (300 W): 258 of 285
    ("ampere", 258 / 285),
    # B200 1439 of 1737 and 1455.7 of 1732.6, B300 1519 of 1892: the median row is B200's 1439 / 1737
    ("blackwell", 1439 / 1737),
    # MI300X: 659 of 676 — its MAMF already runs at the 750 W cap
    ("cdna3", 659 / 676),
    # nothing measured: the median of the four measured architectures' ratios
    ("volta", (755 / 850 + 702.9 / 828.0) / 4 + 258 / 285 / 2),
])
def test_the_step_keeps_the_measured_sustained_share_of_each_architecture(arch, ratio):
    assert sustained_ratio(arch) == pytest.approx(ratio)


def test_a_step_on_a_gpu_that_holds_its_burst_clock_runs_nearer_its_burst_rate():
    # the fitted share is the same everywhere; the measured clocks under the power limit differ by architecture
    tr = Training(seq_len=4096)
    h100, mi300x = (device(make_hardware(g, 8), tr) for g in ("h100-sxm", "mi300x"))
    assert mi300x.sustain / h100.sustain == pytest.approx((659 / 676) / ((755 / 850 + 702.9 / 828.0) / 2))
    assert h100.sustain < mi300x.sustain <= 1.0


@pytest.mark.parametrize("gpu, copy_tb_s", [
    # Azure AI-benchmarking-guide Azure_Results, 'HBM Bandwidth' (BabelStream Copy): A100 1.61, H100 2.90,
    # H200 4.01 TB/s; MI300X 4.15 (samuel-bohman/AI-benchmarking-guide @2b25b69)
    ("a100-80gb-sxm", 1.61), ("h100-sxm", 2.90), ("h200", 4.01), ("mi300x", 4.15),
])
def test_memory_bound_work_streams_at_the_measured_copy_bandwidth(gpu, copy_tb_s):
    assert kernel_device(get_gpu(gpu), "bf16").bw == pytest.approx(copy_tb_s * 1e12, rel=0.002)


def test_a_short_kernel_pays_the_measured_floor():
    # Liger-Kernel all_benchmark_data.csv @ead96b6 (rows outside the component corpus): H100 megatron_rms_norm
    # and megatron_swiglu (liger, forward) intercepts 6.74 and 7.12 us
    dev = kernel_device(get_gpu("h100-sxm"), "bf16")
    assert streamed_s(0.0, 1, dev) == pytest.approx((6.74e-6 + 7.12e-6) / 2, rel=1e-3)
    # the same kernel over 4096 x 16384 bf16 (read and write 2 B each): floor + bytes at 2.90 TB/s
    assert streamed_s(4096 * 16384 * 4, 1, dev) == pytest.approx(6.93e-6 + 268435456 / 2.9011e12, rel=1e-3)


def test_a_compiled_block_fuses_the_residual_add_into_the_norm():
    # Inductor (and Liger's fused add+RMSNorm) read x and the residual and write the sum and the normed
    # output: 8 B per element in one kernel, where eager runs the add (6 B) and the norm apart
    m = load_model("llama-3.1-8b")
    assert software("torchtitan", True, m).cost("add_norm") == (8.0, 1)
    assert software("megatron-core", False, m).cost("add_norm") == (10.0, 2)
    assert software("torchtitan", False, m).cost("add_norm") == (42.0, 8)  # eager RMSNorm: 36 B, 7 kernels


def test_an_eager_layer_norm_reads_its_row_twice():
    # PyTorch aten/src/ATen/native/cuda/layer_norm_kernel.cu vectorized_layer_norm_kernel_impl: compute_stats
    # reads the row, the normalising loop reads it again and writes it: 3 passes of 2 B where a fused norm
    # (Apex, Transformer Engine, Liger) reads and writes once
    gpt2 = load_model("gpt2")
    assert software("torchtitan", False, gpt2).cost("norm") == (6.0, 1)
    assert software("megatron-core", False, gpt2).cost("norm") == (4.0, 1)
    assert software("torchtitan", True, gpt2).cost("norm") == (4.0, 1)  # compiled: fused
    # Liger-Kernel all_benchmark_data.csv @ead96b6, layer_norm huggingface (F.layer_norm) forward, fp32, M 4096:
    # N 16384 took 0.307 ms on H100 and 0.506 ms on A100 — 12 B per element at 2.62 and 1.59 TB/s, the GPUs'
    # copy bandwidth (2.90, 1.61): the second read misses L2 on long rows (on short ones part of it hits)
    points = {p["id"]: p for p in corpus()["points"]}
    for gpu, seconds in (("h100-sxm", 0.307e-3), ("a100-80gb-sxm", 0.506e-3)):
        p = points[f"memory/liger/{gpu}/layernorm_native/fp32/4096x16384"]
        assert p["measured"]["value"] == pytest.approx(seconds, rel=0.01)
        assert memory_modelled(p)[0] == pytest.approx(seconds, rel=0.10)
