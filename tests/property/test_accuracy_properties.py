"""Invariants the accuracy work must keep (hypothesis): fp8 never slower than bf16 on a GPU with
fp8 tensor cores, and no fine-tune's MFU above the share of peak the GPU's matmuls reach."""

from conftest import make
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import device

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
    """With the framework left open, a layer runs fp8 only where that beats bf16 with its casts, so
    fp8 is never slower where bf16 fits. (torchtitan and Megatron-Core convert every block linear, their documented
    scope, and can be slower — torchao's own microbenchmarks show float8 linears below 1x at small
    shapes; tests/golden/test_fp8_recipes.py.)"""
    if tp > gpus:
        reject()
    tr = {"seq_len": seq, "global_batch": gpus // tp * mb * 4}
    lay = {"tp": tp, "zero": zero if gpus // tp > 1 else 0, "micro_batch": mb, "recompute": recompute}
    bf16 = _est(model, gpu, gpus, {**tr, "precision": "bf16"}, **lay)
    if not bf16.memory.fits:
        reject()  # fp8 then runs every linear in fp8 where bf16's memory would not fit (estimate.settle_fp8)
    fp8 = _est(model, gpu, gpus, {**tr, "precision": "fp8"}, **lay)
    assert fp8.time.step_s <= bf16.time.step_s * (1 + 1e-9)


@SETTINGS
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(["a100-80gb-sxm", "h100-sxm", "l40s", "rtx-4090"]),
       method=st.sampled_from(["lora", "qlora"]), mb=st.sampled_from([1, 2, 8]),
       seq=st.sampled_from([512, 1024, 2048, 4096, 16384]), recompute=st.sampled_from(["none", "full"]))
def test_mfu_never_exceeds_the_matmul_share(model, gpu, method, mb, seq, recompute):
    """A fine-tune's MFU and HFU (recomputation included) never pass what the GPU's matmuls reach:
    the achievable share of the dense peak. (Pre-training MFU keeps PaLM's count of the masked half
    of causal attention, as published MFUs do, so it can exceed it at long sequences.)"""
    est = _est(model, gpu, 1, {"seq_len": seq, "method": method, "global_batch": mb}, micro_batch=mb,
               recompute=recompute)
    e_gemm = device(est.scenario.hardware, est.scenario.training).e_gemm
    assert est.time.mfu <= e_gemm
    assert est.time.hfu <= e_gemm


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(model=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen2.5-7b"]),
       framework=st.sampled_from(["megatron-lm", "megatron-core", "torchtitan", "deepspeed", "pytorch-fsdp",
                                  "torchtune", "nanotron"]),
       method=st.sampled_from(["full", "lora", "qlora"]), max_gpus=st.sampled_from([8, 32, 64]))
def test_a_framework_never_gets_a_layout_it_cannot_run(model, framework, method, max_gpus):
    """Every candidate plan proposes (and so every planned export) is one the framework runs."""
    from gpuplan.api import plan_scenario
    from gpuplan.catalog.refusals import why_not

    precision = "bf16-pure" if framework == "torchtune" else "bf16"
    try:
        sc = make(model, training={"framework": framework, "method": method, "precision": precision,
                                   "tokens": 1e11})
        res = plan_scenario(sc, max_gpus=max_gpus, top_k=50).result
    except GpuplanError:
        reject()
    for c in res.candidates:
        assert why_not(sc.training.framework, c.layout.values(), sc.training) is None, (framework, c.layout)


def test_the_loss_holds_what_the_framework_keeps():
    """Logits memory per framework (model/software.py): eager 12 B per logit, Megatron's vocab-parallel loss 6 B
    (the saved fp32 softmax and the 16-bit gradient cast from it), torchtune's chunked loss not compiled (its
    default) 5 B — Llama-3.1-8B, 2 × 2048 tokens, vocab 128,256: 3,151,495,168 eager bytes."""
    logits = {}
    for fw, prec in (("generic", "bf16"), ("megatron-core", "bf16"), ("torchtune", "bf16-pure")):
        est = evaluate(make("llama-3.1-8b", gpu="h100-sxm", gpus=1, training={"seq_len": 2048, "framework": fw,
                                                                             "precision": prec},
                            layout={"micro_batch": 2}))
        logits[fw] = est.memory.peak.logits
    assert logits["generic"] == 12 * 2 * 2048 * 128256
    assert logits["megatron-core"] == 6 * 2 * 2048 * 128256
    assert logits["torchtune"] == 5 * 2 * 2048 * 128256
