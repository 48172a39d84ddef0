"""Invariants of the kernel models (hypothesis): a GPU only gets an attention kernel that runs on it —
V100 and T4 in particular never get FlashAttention-2, cuDNN or FlashAttention-3 (sm80+) — and no
kernel runs above the highest rate measured for it (attention: its plateau at the longest published
sequence; GEMM: the GPU's best measured shape, MAMF)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.catalog.constants import table
from gpuplan.catalog.frameworks import frameworks
from gpuplan.catalog.hardware import get_gpu, gpus, make_hardware
from gpuplan.model.attention import KERNELS, rate, runs_on
from gpuplan.model.compute import device, kernel_device, matmul_s
from gpuplan.spec import Training
from gpuplan.validation.components import corpus

# the component corpus' support statements (flash-attention README, PyTorch sdp_utils.cpp), by the
# model's kernel names: independent of the model's own runs_on lists
SAID = {"flash2": ("flash2", "sdpa_flash"), "cudnn": ("cudnn",), "flash3": ("flash3",), "flash4": ("flash4",),
        "sdpa_mem_efficient": ("sdpa_mem_efficient",), "rocm_ck": ("flash2",), "rocm_triton": ("flash2",)}
FACTS = corpus()["kernel_support"]
GPU_IDS = sorted(g.id for g in gpus() if g.architecture)
FUSED = [k for k in KERNELS if k != "eager"]
FRAMEWORKS = sorted(f.name for f in frameworks())


def _refused(kernel: str, arch: str) -> bool:
    return any(f["kernel"] in SAID.get(kernel, ()) and arch in f["not_on"] for f in FACTS)


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(["v100-16gb", "v100-32gb", "t4"]), framework=st.sampled_from(FRAMEWORKS),
       attention=st.sampled_from(["flash", "flash1", "eager"]))
def test_v100_and_t4_never_get_a_kernel_they_cannot_run(gpu, framework, attention):
    arch = get_gpu(gpu).architecture
    kernel = device(make_hardware(gpu, 8), Training(framework=framework, attention=attention)).attn_kernel
    assert kernel in ("sdpa_mem_efficient", "flash1", "eager"), kernel
    assert runs_on(kernel, arch) and not _refused(kernel, arch)


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPU_IDS), framework=st.sampled_from(FRAMEWORKS),
       attention=st.sampled_from(["flash", "flash1", "eager"]))
def test_no_gpu_gets_a_kernel_its_support_statements_refuse(gpu, framework, attention):
    arch = get_gpu(gpu).architecture
    kernel = device(make_hardware(gpu, 8), Training(framework=framework, attention=attention)).attn_kernel
    assert runs_on(kernel, arch) and not _refused(kernel, arch)


def _curves(kernel: str) -> dict[tuple[str, str, bool], float]:
    """Per (architecture, published pass, mask), the highest share of peak measured for the kernel."""
    out: dict[tuple[str, str, bool], float] = {}
    for r in table("attention_kernels")["kernels"][kernel].get("measured", ()):
        g = get_gpu(r["gpu"])
        key = (g.architecture, r["pass"], r["causal"])
        out[key] = max(out.get(key, 0.0), r["tflops"] * 1e12 / (g.peak_flops.get("bf16") or g.peak_flops["fp16"]))
    return out


def _modelled(kernel: str, arch: str, pass_: str, causal: bool, head_dim: int, seq: int) -> float:
    """The model's share for a published pass (forward + backward: the FLOP-weighted harmonic mean)."""
    f = rate(kernel, arch, "fwd", causal, head_dim, seq)
    if pass_ == "fwd":
        return f
    return 3.5 / (1 / f + 2.5 / rate(kernel, arch, "bwd", causal, head_dim, seq))


@settings(max_examples=200, deadline=None)
@given(kernel=st.sampled_from(FUSED), head_dim=st.sampled_from([64, 80, 96, 128, 192, 256, 512]),
       seq=st.integers(64, 1 << 20))
def test_no_attention_kernel_runs_above_its_measured_curve(kernel, head_dim, seq):
    for (arch, pass_, causal), top in _curves(kernel).items():
        assert _modelled(kernel, arch, pass_, causal, head_dim, seq) <= top * (1 + 1e-9), (kernel, arch, pass_, causal)


@settings(max_examples=200, deadline=None)
@given(gpu=st.sampled_from(GPU_IDS), precision=st.sampled_from(["bf16", "fp8"]),
       m=st.integers(1, 1 << 17), n=st.integers(1, 1 << 16), k=st.integers(1, 1 << 16))
def test_no_gemm_runs_above_the_best_measured_shape(gpu, precision, m, n, k):
    g = get_gpu(gpu)
    if precision not in g.peak_flops:
        return
    dev = kernel_device(g, precision)
    rate_ = 2 * m * n * k / matmul_s(m, n, k, dev)
    assert rate_ <= dev.peak * dev.gemm.burst * (1 + 1e-9)
