"""The ``unsloth`` profile (frameworks.json): Unsloth's Triton kernels (RMSNorm, RoPE, SwiGLU, LoRA), its chunked
fused linear cross-entropy (unsloth_zoo fused_losses: the LM head and loss chunk by chunk, one chunk's fp32 logits
within min(half the free memory, 4 GiB), the head input's gradient made in forward) and its 'unsloth' gradient
checkpointing (each block input to host memory, two on the GPU)."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.framework_memory import lora_keeps_shared_input, offloads_checkpoints
from gpuplan.catalog.models import load_model
from gpuplan.model.activations import UNSLOTH_CHUNK_BYTES
from gpuplan.model.kept import kbit_upcast
from gpuplan.model.software import software
from gpuplan.spec import Training

GiB = 2**30
# Unsloth's README table: Llama 3.1 8B, 4-bit QLoRA on all linears, rank 32, batch 1 — the longest context on an
# 80 GB card, 342,733 tokens; Llama 3.1 8B: hidden 4,096, vocabulary 128,256, 32 layers
RUN = dict(model="llama-3.1-8b", gpu="a100-80gb-sxm", gpus=1, method="qlora", lora_rank=32, seq_len=342733,
           micro_batch=1, tokens=1e6)


def _memory(framework: str, **kw) -> dict:
    return gpuplan.evaluate(**{**RUN, **kw}, framework=framework).to_json()["memory"]


def test_the_profile_states_what_unsloth_runs():
    m = load_model("llama-3.1-8b")
    sw = software("unsloth", False, m)
    assert [sw.cost(op)[1] for op in ("norm", "rope", "activation_gated")] == [1, 2, 1]  # one kernel each (per q, k)
    assert sw.fused_linear == "unsloth" and UNSLOTH_CHUNK_BYTES == 4 * GiB
    assert software("unsloth", True, m).fused_linear == "unsloth"  # compiled, still chunk by chunk
    assert offloads_checkpoints("unsloth") and not offloads_checkpoints("hf-trainer")
    assert lora_keeps_shared_input("unsloth")
    # only the LoRA adapters are upcast (unsloth_zoo prepare_model_for_training): no PEFT fp32 residual stream
    assert not kbit_upcast(Training(method="qlora", framework="unsloth"), 0)


def test_the_loss_holds_one_chunk_and_the_head_input_gradient():
    # 342,733 tokens × 128,256 × 4 B of fp32 logits is far past the 4 GiB chunk budget
    assert _memory("unsloth")["detail"]["logits"] == 4 * GiB + 2 * 342733 * 4096
    # a short sequence: every fp32 logit fits one chunk
    short = _memory("unsloth", seq_len=2048)["detail"]["logits"]
    assert short == 4 * 2048 * 128256 + 2 * 2048 * 4096


def test_checkpoints_live_in_host_memory_under_full_recompute_only():
    on, off = _memory("unsloth", seq_len=8192, recompute="full"), _memory("unsloth", seq_len=8192, recompute="none")
    assert on["activations_per_microbatch"] > 0
    # full recompute: 32 block inputs of 8,192 × 4,096 bf16 per micro-batch, two of them kept on the GPU
    assert on["activations_per_microbatch"] == pytest.approx(32 * 8192 * 4096 * 2, rel=0.02)
    hf = _memory("hf-trainer", seq_len=8192, recompute="full")
    assert on["activations"] < hf["activations"] / 2
    assert off["activations"] > on["activations"]  # without recompute nothing is checkpointed, nothing offloaded


def test_unsloths_longest_context_on_an_80_gb_card_is_predicted_near_the_card():
    # a check, not a fit: at the context Unsloth reached on 80 GB the peak is predicted at the card's size (a
    # Hugging Face stack would need 10x)
    m = _memory("unsloth")
    assert 0.95 < m["total"] / m["capacity"] < 1.10
    assert _memory("hf-trainer", recompute="full")["total"] > 8 * m["capacity"]


def test_trace_says_it_does_not_run_unsloths_kernels():
    from gpuplan.errors import GpuplanError
    from gpuplan.io.scenario import parse_scenario
    from gpuplan.trace.compare import traced_as

    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 1},
                         "training": {"framework": "unsloth", "method": "lora"}})
    with pytest.raises(GpuplanError, match="trace the scenario with framework hf-trainer"):
        traced_as(sc)


def test_an_open_recompute_is_unsloths_default_even_where_none_would_fit():
    # use_gradient_checkpointing = 'unsloth' is get_peft_model's default: an 8B QLoRA at 2,048 tokens fits an H100
    # without recomputation, yet Unsloth recomputes (and offloads) unless told not to
    run = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, method="qlora", seq_len=2048, tokens=1e6)
    unsloth = gpuplan.evaluate(**run, framework="unsloth").to_json()
    assert unsloth["scenario"]["layout"]["recompute"] == "full"
    assert any(a["field"] == "layout.recompute" and "recomputes by default" in a["rule"] for a in unsloth["assumed"])
    assert gpuplan.evaluate(**run, framework="unsloth", recompute="none").to_json()["scenario"]["layout"][
        "recompute"] == "none"
    # the Hugging Face stack checkpoints a 4-bit model it prepares with PEFT (prepare_model_for_kbit_training's
    # use_gradient_checkpointing=True), not a LoRA run on 16-bit weights (the Trainer's gradient_checkpointing: off)
    hf = gpuplan.evaluate(**run, framework="hf-trainer").to_json()
    assert hf["scenario"]["layout"]["recompute"] == "full"
    assert any(a["field"] == "layout.recompute" and "use_gradient_checkpointing defaults to True" in a["rule"]
               for a in hf["assumed"])
    assert gpuplan.evaluate(**{**run, "method": "lora"}, framework="hf-trainer").to_json()["scenario"]["layout"][
        "recompute"] == "none"
