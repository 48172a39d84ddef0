"""Invariants the accuracy work must keep (hypothesis): fp8 never slower than bf16 on a GPU with
fp8 tensor cores, and no fine-tune's MFU above the share of peak the GPU's matmuls reach."""

from conftest import make
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.model.compute import device
from gpuplan.model.estimate import evaluate

MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "gpt2", "llama-3.2-1b", "llama-3.1-70b"]
FP8_GPUS = ["h100-sxm", "h200", "l40s"]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


def _est(model, gpu, gpus, training, **layout):
    try:
        return evaluate(make(model, gpu=gpu, gpus=gpus, training=training, layout=layout))
    except GpuplanError:
        reject()  # the layout does not divide this model, or the GPU lacks the precision


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(FP8_GPUS), gpus=st.sampled_from([1, 8, 16]),
       tp=st.sampled_from([1, 2, 8]), zero=st.sampled_from([0, 1, 3]), mb=st.sampled_from([1, 2, 4]),
       seq=st.sampled_from([512, 2048, 8192]), recompute=st.sampled_from(["none", "selective-op", "full"]))
def test_fp8_is_never_slower_than_bf16(model, gpu, gpus, tp, zero, mb, seq, recompute):
    if tp > gpus:
        reject()
    tr = {"seq_len": seq, "global_batch": gpus // tp * mb * 4}
    lay = {"tp": tp, "zero": zero if gpus // tp > 1 else 0, "micro_batch": mb, "recompute": recompute}
    bf16 = _est(model, gpu, gpus, {**tr, "precision": "bf16"}, **lay)
    fp8 = _est(model, gpu, gpus, {**tr, "precision": "fp8"}, **lay)
    assert fp8.time.step_s <= bf16.time.step_s * (1 + 1e-9)


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["a100-80gb-sxm", "h100-sxm", "l40s", "rtx-4090"]),
       method=st.sampled_from(["full", "lora", "qlora"]), mb=st.sampled_from([1, 2, 8]),
       seq=st.sampled_from([512, 1024, 2048, 4096]), recompute=st.sampled_from(["none", "full"]))
def test_mfu_never_exceeds_the_matmul_share(model, gpu, method, mb, seq, recompute):
    """More compute per token (LoRA's frozen base, recomputation) never lifts MFU above what the
    GPU's matmuls reach: the achievable share of the dense peak."""
    est = _est(model, gpu, 1, {"seq_len": seq, "method": method, "global_batch": mb}, micro_batch=mb,
               recompute=recompute)
    e_gemm = device(est.scenario.hardware, est.scenario.training).e_gemm
    assert est.time.mfu <= e_gemm
    assert est.time.hfu <= e_gemm
