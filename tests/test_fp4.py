"""4-bit training (NVFP4, MXFP4) on the low-precision path: the block linears' GEMMs at the fp4 peak and its
measured share, the casts of the recipe, the GPUs that can run it, the words users give, the Megatron flags."""

from __future__ import annotations

import pytest
from conftest import make
from test_export import megatron_parser

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.matmul import fp8_scaling_costs
from gpuplan.errors import GpuplanError
from gpuplan.export import megatron_args
from gpuplan.model.compute import device

LAYOUT = {"tp": 2, "pp": 4, "micro_batch": 1}
TRAIN = {"seq_len": 8192, "global_batch": 256, "tokens": 1e12, "framework": "megatron-core"}


def _est(precision: str, gpu: str = "b200", **training):
    return evaluate(make("llama-3.1-70b", gpu, 64, training={**TRAIN, "precision": precision, **training},
                         layout=LAYOUT))


@pytest.mark.parametrize("word, recipe", [("nvfp4", "nvfp4"), ("fp4", "nvfp4"), ("NVFP4", "nvfp4"),
                                          ("mxfp4", "mxfp4")])
def test_a_4_bit_word_is_the_low_precision_path_with_its_recipe(word, recipe):
    tr = make("llama-3.1-70b", "b200", 64, training={**TRAIN, "precision": word}).training
    assert (tr.precision, tr.fp8_recipe) == ("fp8", recipe)


def test_the_linears_run_at_the_fp4_peak_and_its_measured_share():
    sc = make("llama-3.1-70b", "b200", 64, training={**TRAIN, "precision": "nvfp4"})
    dev = device(sc.hardware, sc.training)
    # source: NVIDIA HGX B200 table, FP4 Tensor Core 18 PFLOPS with sparsity -> 9,000 TFLOPS dense
    assert dev.peak == pytest.approx(9000e12)
    # source: ML Engineering MAMF table, B200 nvfp4: 6,746 of 9,000 TFLOPS (0.75), cuBLAS via torch 2.14
    assert dev.gemm.burst == pytest.approx(6746 / 9000)
    # an E2M1 element (0.5 B) and its share of one E4M3 scale per 16 elements
    assert dev.elem == 0.5 + 1 / 16
    # attention and the 16-bit work stay at the bf16 rates
    assert device(sc.hardware, sc.training, "bf16").peak == pytest.approx(get_gpu("b200").peak_flops["bf16"])
    # MXFP4 on the same tensor cores at its own measured share — source: the same table, B200 mxfp4 through
    # torch._scaled_mm_v2: 6,183 of 9,000 TFLOPS — and one E8M0 scale per 32 elements
    mx = make("llama-3.1-70b", "b200", 64, training={**TRAIN, "precision": "mxfp4"})
    dev_mx = device(mx.hardware, mx.training)
    assert (dev_mx.peak, dev_mx.gemm.burst, dev_mx.elem) == (pytest.approx(9000e12), pytest.approx(0.687), 0.5 + 1 / 32)


def test_the_nvfp4_casts_are_the_recipes_kernels():
    costs = {c.role: c.bytes_per_element for c in fp8_scaling_costs("nvfp4")}
    # amax (2 B) + a 1x16 rowwise and a 16x1 (Hadamard) columnwise cast, each reading 2 B and writing 0.5 + 1/16 B
    assert costs["input_or_grad_output"] == 2 + 2 * (2 + 0.5 + 1 / 16)
    # amax (2 B) + one 16x16 cast read (2 B) and the row- and column-major copies written (2 x (0.5 + 1/16) B)
    assert costs["weight"] == 2 + 2 + 2 * (0.5 + 1 / 16)


def test_fp4_is_faster_than_fp8_but_not_twice():
    # the linears' GEMMs speed up; attention, norms, casts and communication do not
    bf16, fp8, fp4 = (_est(p).time.tokens_per_s for p in ("bf16", "fp8", "nvfp4"))
    assert bf16 < fp8 < fp4 < 2 * fp8


def test_a_gb300_run_may_pass_the_16_bit_peak_in_mfu():
    # MFU is on the 16-bit peak, as published; the sanity bound on executed FLOPs is the fp4 peak
    est = _est("nvfp4", "gb300")
    assert est.time.hfu > 1.0 and est.time.tokens_per_s > _est("fp8", "gb300").time.tokens_per_s


@pytest.mark.parametrize("gpu, word, ok", [("h100-sxm", "nvfp4", False), ("mi355x", "nvfp4", False),
                                           ("mi355x", "mxfp4", True), ("b200", "mxfp4", True)])
def test_only_block_scaled_fp4_tensor_cores_run_it(gpu, word, ok):
    if ok:
        assert _est(word, gpu).time.tokens_per_s > 0
        return
    with pytest.raises(GpuplanError, match=f"{gpu} .* has no {word} tensor cores.*Blackwell"):
        _est(word, gpu)


def test_megatron_gets_its_fp4_flags():
    sc = make("llama-3.1-70b", "b200", 64, training={**TRAIN, "precision": "nvfp4"}, layout=LAYOUT)
    args, _ = megatron_args(evaluate(sc).to_json(), sc.model)
    ns = megatron_parser().parse_args(args)
    assert (ns.fp4_format, ns.fp4_recipe, ns.fp8_format) == ("e2m1", "nvfp4", None) and ns.bf16
