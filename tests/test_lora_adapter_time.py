"""A LoRA/QLoRA layer's adapters take time beside the frozen base (model/adapters.py): their thin GEMMs and the
memory-bound kernels the stack runs around them, op by op from its code."""

from __future__ import annotations

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.model.adapters import CAST_AUTOCAST, CAST_FP32, FUSED, SHARED, Adapters, adapter_work, adapters_of
from gpuplan.model.compute import adapters_s, kernel_device

GIB = 2**30


def _q_layer(model: str = "llama-3.1-8b"):
    """A model's block and its q_proj (square: hidden × hidden)."""
    lg = make(model).model.kinds[0]
    (q,) = [w for w in lg.weights if w.name.endswith("q_proj")]
    return lg, q.shape[1]


@pytest.mark.parametrize("kind, fwd, fwd_k, bwd, bwd_k", [
    # PEFT lora.Linear, fp32 adapters, pure bf16 (no autocast): x.to(fp32) 2+4; scaling 4+4; bf16 + fp32 → fp32
    # 2+4+4; .to(bf16) 4+2 — backward: .to's grad 2+4, the add's grad down for the base 4+2, scaling 4+4, the input
    # cast's grad 4+2, the input gradient accumulated 2+2+2
    (CAST_FP32, 6 + 24, 4, 6 + 6 + 20, 5),
    # the same under autocast: x.to(fp32) 2+4, autocast back to bf16 4+2; scaling 2+2, add 2+2+2 — backward: scaling
    # 2+2, autocast's grad 2+4, the cast's grad 4+2, the accumulation 2+2+2
    (CAST_AUTOCAST, 12 + 10, 4, 18 + 4, 4),
    # torchtune / Megatron-Core: the adapters on the input itself, in bf16: scaling 2+2, add 2+2+2 — backward scaling
    # 2+2 and the accumulation 2+2+2
    (SHARED, 10, 2, 6 + 4, 2),
    # Unsloth's matmul_lora: out.addmm_(x·A, B, alpha=s) reads the base output once more; backward dX.addmm_ reads dX
    (FUSED, 2, 0, 2, 0),
])
def test_the_bytes_of_one_adapter_are_the_ops_the_stack_runs(kind, fwd, fwd_k, bwd, bwd_k):
    lg, h = _q_layer()
    w = adapter_work(lg, Adapters(("q_proj",), 16, kind), 1)
    # per token, q_proj of Llama 3.1 8B: input and output width h = 4096 — bytes per element × h
    assert w.fwd_bytes == fwd * h and w.bwd_bytes == bwd * h
    assert (w.fwd_kernels, w.bwd_kernels) == (fwd_k, bwd_k)
    # x·A and (xA)·B forward; both input gradients; both weight gradients, reduced over the tokens
    assert w.fwd_gemms == ((16, h, 1, 4.0 if kind == CAST_FP32 else 2.0), (h, 16, 1, 4.0 if kind == CAST_FP32 else 2.0))
    assert len(w.dgrad_gemms) == len(w.wgrad_gemms) == 2


# LoRAFusion (Zhu et al., EuroSys '26, arXiv 2510.00206), Fig. 7: DRAM read + write measured by Nsight Compute for one
# LoRA linear's forward and backward in eager PyTorch — x @ W.T + (dropout(x) @ A.T @ B.T) * alpha, bf16, rank 16,
# dropout 0.1, 8192 tokens, W frozen, the input requiring its gradient — on H100 (CentML/lorafusion
# benchmarks_paper/plots/evaluation-fig-7-kernel-ncu-profile.py and bench_lora_kernels.py, commit 5642ebf5):
# 2.008, 2.771 and 5.289 GiB at 4096², 5120² and 8192²
@pytest.mark.parametrize("model, measured_gib", [("llama-2-7b", 2.008), ("llama-2-13b", 2.771),
                                                 ("llama-2-70b", 5.289)])
def test_the_counted_traffic_of_an_eager_lora_linear_is_what_nsight_measured(model, measured_gib):
    lg, h = _q_layer(model)
    m = 8192
    w = adapter_work(lg, Adapters(("q_proj",), 16, SHARED, dropout=True), 1)
    gemms = sum(e * (m * k + k * n + m * n) for n, k, _, e in w.fwd_gemms + w.dgrad_gemms) \
        + sum(e * (a * m + m * b + a * b) for a, b, _, e in w.wgrad_gemms)
    base = 2 * 2 * (m * h + h * h + m * h)  # the frozen matmul forward and its input gradient, each operand once
    counted = (m * (w.fwd_bytes + w.bwd_bytes) + gemms + base) / GIB
    # every byte counted moves (a GEMM re-reads its operands tile by tile: measured ≥ counted, the more so the larger
    # the matrix); at 4096² the count is 81 % of the measurement (1.627 of 2.008 GiB)
    assert counted <= measured_gib
    if model == "llama-2-7b":
        assert counted == pytest.approx(1.627, abs=0.001) and counted / measured_gib > 0.8


def test_each_stack_runs_its_own_adapters(mk):
    def kind(zero: int = 0, **training):
        return adapters_of(mk(training={"method": "lora", **training}).training, zero)

    assert kind(framework="generic").kind == CAST_AUTOCAST  # bf16 mixed precision: PEFT under autocast
    assert kind(framework="generic", precision="bf16-pure").kind == CAST_FP32
    assert kind(framework="generic", zero=3).kind == SHARED  # FSDP's param_dtype casts the adapters to bf16
    assert kind(framework="torchtune").kind == SHARED
    assert kind(framework="megatron-core").kind == SHARED
    assert kind(framework="unsloth").kind == FUSED
    # DeepSpeed's engine casts every floating parameter, PEFT's fp32 adapters and its fp32-prepared norms too, to bf16
    assert kind(framework="deepspeed").kind == SHARED
    assert kind(framework="deepspeed", method="qlora").stream == 2.0
    fp32 = kind(precision="fp32")
    assert (fp32.kind, fp32.stream) == (SHARED, 4.0)
    assert kind(method="qlora", framework="hf-trainer").stream == 4.0  # PEFT's prepared QLoRA: an fp32 stream
    assert kind(compile=True).compiled
    assert adapters_of(mk().training, 0) is None  # a full fine-tune has none


@settings(max_examples=40, deadline=None)
@given(tokens=st.sampled_from([512, 2048, 8192, 32768]), rank=st.sampled_from([8, 16, 64, 256]),
       dropout=st.booleans(), compiled=st.booleans())
def test_fused_adapters_cost_least_and_peft_casts_most(tokens, rank, dropout, compiled):
    lg, _ = _q_layer()
    dev = kernel_device(make(gpu="h100-sxm").hardware.gpu, "bf16")
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

    def total(kind: str, tg: tuple[str, ...] = targets) -> float:
        return sum(adapters_s(adapter_work(lg, Adapters(tg, rank, kind, 2.0, dropout, compiled), 1), tokens, dev))

    fused, shared, autocast, fp32 = (total(k) for k in (FUSED, SHARED, CAST_AUTOCAST, CAST_FP32))
    assert 0 < fused <= shared <= autocast <= fp32
    assert total(SHARED, ("q_proj", "v_proj")) < shared  # fewer targets, less work


def test_a_peft_lora_step_pays_for_its_adapters():
    def tok_s(**training):
        return evaluate(make("llama-3.1-8b", "h100-sxm", 1, training={"method": "lora", "seq_len": 4096,
                                                                      "tokens": 1e8, **training},
                             layout={"micro_batch": 2, "recompute": "full"})).to_json()["time"]["tokens_per_s"]

    every = {"lora_targets": "all-linear", "lora_rank": 16}  # unsloth's own defaults, given to PEFT alike
    peft, unsloth = tok_s(framework="hf-trainer", **every), tok_s(framework="unsloth")
    qv = tok_s(framework="hf-trainer", lora_rank=16)  # PEFT's own default targets, q_proj and v_proj
    # PEFT's casts around seven adapters per block cost more than two adapters'
    assert peft < qv
    # compiled, the pointwise ops around the adapters fuse
    assert tok_s(framework="hf-trainer", compile=True, **every) > peft
    assert unsloth > peft
