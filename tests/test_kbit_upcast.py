"""QLoRA prepared by PEFT (``prepare_model_for_kbit_training``: every 16-bit parameter that is not 4-bit becomes
fp32; TRL's trainers call it for a 4-bit model with a LoRA config unless the model is sharded, then
peft_module_casting_to_bf16 casts the embeddings and LM head back to bf16, as the QLoRA paper's qlora.py does): the
norms in fp32, so the residual stream is fp32 — bitsandbytes' Linear4bit casts its input to bf16 and returns its
output in its input's dtype.
The Hugging Face stacks (``hf-trainer``, the generic stack, DeepSpeed's HF client below ZeRO-3) run QLoRA so;
Unsloth, torchtune and sharded FSDP/ZeRO-3 QLoRA do not."""

from __future__ import annotations

import gpuplan
from gpuplan.catalog.models import load_model
from gpuplan.model.activations import ActShape, layer_terms
from gpuplan.model.kept import kbit_upcast
from gpuplan.spec import Training

RUN = dict(model="llama-3.1-8b", gpu="a100-80gb-sxm", seq_len=2048, method="qlora", lora_rank=32, tokens=1e6,
           micro_batch=1, lora_targets="all-linear")  # given: PEFT's own default adapts q_proj and v_proj only
# Llama 3.1 8B: 65 norms of 4,096 — what the preparation leaves in fp32 (the embeddings and LM head, 2 × 128,256 ×
# 4,096, back in bf16)
NORMS = 65 * 4096


def _memory(framework: str, **layout) -> dict:
    est = gpuplan.evaluate(**RUN, framework=framework, **{"gpus": 1, "recompute": "full", **layout})
    return est.to_json()["memory"]


def test_which_runs_are_prepared_so():
    t = Training(method="qlora", framework="hf-trainer")
    assert kbit_upcast(t, 0) and kbit_upcast(t, 2)
    assert not kbit_upcast(t, 3)  # sharded QLoRA: TRL never prepares it
    assert kbit_upcast(Training(method="qlora"), 0)  # the generic stack is Hugging Face's
    # TRL + ZeRO-2 prepares it too, but DeepSpeed's engine then casts every floating parameter back to bf16
    # (deepspeed/runtime/engine.py _configure_distributed_model): the stream stays 16-bit
    assert not kbit_upcast(Training(method="qlora", framework="deepspeed"), 2)
    assert not any(kbit_upcast(Training(method="qlora", framework=f), 0) for f in ("torchtune", "pytorch-fsdp"))
    assert not kbit_upcast(Training(method="lora", framework="hf-trainer"), 0)


def test_the_norms_become_fp32_the_embeddings_and_head_stay_bf16():
    prepared, kept = _memory("hf-trainer"), _memory("pytorch-fsdp")
    assert prepared["weights"] - kept["weights"] == 2 * NORMS


def test_the_checkpointed_stream_is_fp32():
    # full recompute keeps each block's input: 4 B per element of the fp32 stream, 32 blocks
    prepared, kept = _memory("hf-trainer"), _memory("pytorch-fsdp")
    per_mb = prepared["activations_per_microbatch"] - kept["activations_per_microbatch"]
    assert per_mb == 32 * 2048 * 4096 * (4 - 2)


def test_the_mlp_elementwise_tensors_are_fp32():
    m = load_model("llama-3.1-8b")
    common = dict(s=2048, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2, method="qlora",
                  lora_targets=("q_proj",), lora_rank=32)
    up = layer_terms(m, 0, ActShape(**common, inner=4))["mlp"]
    bf16 = layer_terms(m, 0, ActShape(**common))["mlp"]
    # gate and up outputs and the SiLU's output (3 per intermediate element) at 4 B; nothing of the down
    # projection's input: the 4-bit base keeps no input (bitsandbytes >= 0.43.2 MatMul4Bit: ctx.tensors = (None, B))
    # and down_proj is not adapted here
    assert (up, bf16) == (3 * 4 * 2048 * 14336, 3 * 2 * 2048 * 14336)


def test_the_4bit_base_keeps_no_input():
    # a QLoRA layer keeps what the same LoRA layer keeps: bitsandbytes' MatMul4Bit saves (None, B) since 0.43.2,
    # torchao's LinearNF4 only the NF4 weight
    m = load_model("llama-3.1-8b")
    common = dict(s=2048, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2,
                  lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                  lora_rank=16, lora_copy=2.0, lora_weight_cast=2.0)
    q, lo = (layer_terms(m, 0, ActShape(**common, method=method)) for method in ("qlora", "lora"))
    assert q == lo and q["qkv_input"] == q["mlp_input"] == 0.0


def test_lora_dropout_keeps_a_mask_per_adapter_input():
    # torch's CUDA dropout keeps a bool mask (native_dropout_cuda): 1 B per element of each adapter's input; PEFT's
    # adapters keep their own cast copy anyway, torchtune's (shared input) their own dropout output instead
    m = load_model("llama-3.1-8b")
    common = dict(s=2048, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2, method="lora",
                  lora_targets=("q_proj", "v_proj"), lora_rank=16)
    peft = dict(common, lora_copy=2.0, lora_weight_cast=2.0)
    off, on = (layer_terms(m, 0, ActShape(**peft, lora_dropout=d))["lora_inputs"] for d in (False, True))
    assert on - off == 2 * 2048 * 4096 * 1
    shared_off, shared_on = (layer_terms(m, 0, ActShape(**common, lora_dropout=d))["lora_inputs"]
                             for d in (False, True))
    # the shared input (2 B, once) becomes each adapter's own dropout output and mask (3 B, twice)
    assert shared_on - shared_off == 2048 * 4096 * (2 * 3 - 2)


def test_lora_dropout_is_read_and_checked():
    import pytest

    from gpuplan.errors import GpuplanError

    run = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, method="lora", seq_len=2048, tokens=1e6,
               micro_batch=1, recompute="none")
    off = gpuplan.evaluate(**run).to_json()["memory"]["activations"]
    on = gpuplan.evaluate(**run, lora_dropout=0.05).to_json()["memory"]["activations"]
    assert on > off
    with pytest.raises(GpuplanError, match="training.lora_dropout .* method is full"):
        gpuplan.evaluate(**{**run, "method": "full"}, lora_dropout=0.05)
    with pytest.raises(GpuplanError, match=r"training.lora_dropout must be in \[0, 1\)"):
        gpuplan.evaluate(**run, lora_dropout=1.5)


def test_the_echoed_scenario_keeps_the_adapters():
    # the answer's scenario is an input that reproduces it: the LoRA targets and dropout included
    from gpuplan.api import evaluate_scenario
    from gpuplan.io.scenario import parse_scenario

    first = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, method="qlora", lora_dropout=0.05,
                             lora_targets="q_proj,v_proj", seq_len=2048, tokens=1e6, recompute="none").to_json()
    again = evaluate_scenario(parse_scenario(first["scenario"])).to_json()
    assert again["memory"]["total"] == first["memory"]["total"]
    assert first["scenario"]["training"]["lora_dropout"] == 0.05
