"""The frameworks' own memory, read in their code: Megatron-Core's fused bias-SwiGLU keeps only its input (the fc1
output [gate; up]) and recomputes the activation in backward; Megatron's vocab-parallel cross-entropy holds an fp32
softmax (4 B per logit) and, at the start of backward, the 16-bit gradient cast from it (2 B); accelerate's FSDP root
unit holds the embedding beside the LM head."""

from __future__ import annotations

import gpuplan
from gpuplan.catalog.models import load_model
from gpuplan.model.activations import ActShape, layer_terms

RUN = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, dp=8, zero=1, seq_len=8192, global_batch=64,
           micro_batch=1, recompute="none", tokens=1e9)


def _memory(framework: str, **kw) -> dict:
    return gpuplan.evaluate(**{**RUN, **kw}, framework=framework).to_json()["memory"]


def test_the_fused_swiglu_keeps_its_input_only():
    m = load_model("llama-3.1-8b")
    common = dict(s=8192, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    eager, fused = (layer_terms(m, 0, ActShape(**common, fused_glu=f))["mlp"] for f in (False, True))
    # fused_bias_swiglu.py SwiGLUFunction: ctx.save_for_backward(input) — 2f elements, and fc2's input f
    assert (eager, fused) == (8 * 8192 * 14336, 6 * 8192 * 14336)
    # on an A100, the 2020-22 code's era, with the same fused attention
    core, generic = (_memory(f, gpu="a100-80gb-sxm", attention="flash") for f in ("megatron-core", "megatron-lm"))
    # megatron-lm (2020-22) ran the eager SwiGLU of Megatron-DeepSpeed's --swiglu: the 32 layers' difference
    assert generic["activations_per_microbatch"] - core["activations_per_microbatch"] == 32 * 2 * 8192 * 14336


def test_liger_swiglu_keeps_its_two_inputs():
    # LigerSiLUMulFunction saves a and b (the gate and up outputs); Liger's RMSNorm keeps less too
    m = load_model("llama-3.1-8b")
    common = dict(s=8192, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    assert layer_terms(m, 0, ActShape(**common, fused_glu=True))["mlp"] == 6 * 8192 * 14336
    hf, liger = (_memory("hf-trainer", kernels=k, zero=2)["activations_per_microbatch"] for k in ("framework", "liger"))
    assert hf - liger >= 32 * 2 * 8192 * 14336


def test_megatrons_loss_holds_six_bytes_per_logit():
    # the saved fp32 softmax and the bf16 gradient autograd casts from it, 128,256 logits per token
    for framework in ("megatron-core", "megatron-lm", "nanotron"):
        assert _memory(framework)["detail"]["logits"] == 6 * 8192 * 128256
    assert _memory("generic")["detail"]["logits"] == 12 * 8192 * 128256  # logits.float() + F.cross_entropy


def test_fsdp_root_unit_holds_the_embedding_beside_the_head_under_accelerate():
    # accelerate wraps the decoder layers only: the root unit, never resharded after the forward, holds embed_tokens
    # and lm_head (untied) — torchtitan gives [norm, output] a unit of its own
    kw = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, dp=8, zero=3, seq_len=4096, micro_batch=1,
              recompute="full", tokens=1e9)
    hf, titan = (gpuplan.evaluate(**kw, framework=f).to_json()["memory"]["detail"]["comm_buffers"]
                 for f in ("hf-trainer", "torchtitan"))
    assert hf - titan == 128256 * 4096 * 2
