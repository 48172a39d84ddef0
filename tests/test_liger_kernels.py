"""``training.kernels: liger`` — Liger Kernel's patch of a Hugging Face model (the Trainer's use_liger_kernel=True,
Axolotl's and LLaMA-Factory's liger options): fused RMSNorm, RoPE and SwiGLU, and the fused linear cross-entropy,
which runs the LM head and the loss chunk by chunk — chunk_size = next_power_of_2(ceil(BT / ceil(V / H))) rows of
logits in the input's dtype (liger_kernel/ops/fused_linear_cross_entropy.py) — and fills the head input's gradient
in forward."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model.activations import fused_linear_loss_bytes
from gpuplan.model.kept import keeps_fp32_norm_copy
from gpuplan.model.software import software
from gpuplan.spec import Training

RUN = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, framework="hf-trainer", method="lora", seq_len=8192,
           micro_batch=2, tokens=1e6, recompute="full")


def _memory(**kw) -> dict:
    return gpuplan.evaluate(**{**RUN, **kw}).to_json()["memory"]


def test_the_chunk_is_about_the_hidden_states_size():
    m = load_model("llama-3.1-8b")  # V 128,256, H 4,096: inc_factor 32
    # 16,384 tokens: ceil(16384 / 32) = 512 rows (a power of two) of 128,256 bf16 logits, and the 16,384 x 4,096
    # bf16 input gradient
    assert fused_linear_loss_bytes("liger", m, 16384) == 2 * 512 * 128256 + 2 * 16384 * 4096
    # 1,000 tokens: ceil(1000 / 32) = 32 rows
    assert fused_linear_loss_bytes("liger", m, 1000) == 2 * 32 * 128256 + 2 * 1000 * 4096
    # 20 tokens: next_power_of_2(1) = 1 row
    assert fused_linear_loss_bytes("liger", m, 20) == 2 * 1 * 128256 + 2 * 20 * 4096


def test_liger_replaces_the_eager_ops_and_the_materialised_logits():
    m = load_model("llama-3.1-8b")
    eager, liger = software("hf-trainer", False, m), software("hf-trainer", False, m, kernels="liger")
    assert eager.fused_linear is None and liger.fused_linear == "liger"
    assert software("hf-trainer", True, m, kernels="liger").fused_linear == "liger"  # compiled too
    # Liger's kernels per block: 7 matmuls + attention + 2 x (add, fused norm) + RoPE on q and k + SwiGLU — where
    # the eager Hugging Face block launches 7 + 1 + 2 x (1 + 7) + 6 + 2
    assert software("generic", False, m).kernels == 7 + 1 + 2 * 8 + 6 + 2
    assert software("generic", False, m, kernels="liger").kernels == 7 + 1 + 2 * 2 + 2 + 1
    assert eager.cost("norm") == (36.0, 7) and liger.cost("norm") == (4.0, 1)
    assert not keeps_fp32_norm_copy(m, Training(framework="hf-trainer", kernels="liger"))
    assert keeps_fp32_norm_copy(m, Training(framework="hf-trainer"))
    plain, patched = _memory(), _memory(kernels="liger")
    assert plain["detail"]["logits"] == 12 * 16384 * 128256  # the eager fp32 loss
    assert patched["detail"]["logits"] == 2 * 512 * 128256 + 2 * 16384 * 4096
    assert patched["total"] < plain["total"] / 1.8


def test_liger_only_where_a_hugging_face_model_runs():
    with pytest.raises(GpuplanError, match="liger patches Hugging Face transformers models, which torchtitan"):
        Training(framework="torchtitan", kernels="liger")
    with pytest.raises(GpuplanError, match="training.kernels"):
        Training(kernels="triton")
    est = gpuplan.evaluate(**RUN, kernels="liger").to_json()
    assert est["scenario"]["training"]["kernels"] == "liger"
    assert "kernels" not in gpuplan.evaluate(**RUN).to_json()["scenario"]["training"]


def test_the_trainers_own_switch_reads_as_liger_and_the_export_says_where_to_set_it():
    from gpuplan.export import export
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "training": {"framework": "hf-trainer", "use_liger_kernel": True, "global_batch": 16},
                         "layout": {"zero": 3}})
    assert sc.training.kernels == "liger"
    with pytest.raises(GpuplanError, match="training.kernels must be framework .* or liger"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "training": {"kernels": "cuda"}})
    ex = export(gpuplan.evaluate(sc).to_json(), "accelerate", sc.model)
    assert any("use_liger_kernel=True" in n for n in ex.notes)


def test_with_no_framework_named_the_alternatives_are_the_stacks_liger_patches():
    from gpuplan.io.scenario import parse_scenario
    from gpuplan.model.estimate import completed_layout, named_alternatives

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "training": {"kernels": "liger"}, "layout": {"zero": 2}})
    names = {n for n, _ in named_alternatives(sc, completed_layout(sc)[0])}
    assert names and names <= {"hf-trainer", "pytorch-fsdp", "deepspeed"}
