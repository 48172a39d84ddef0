"""What the training software keeps of each activation, as the ActShape fields of a run (model/activations.py
counts the bytes): an eager RMSNorm's fp32 copy (frameworks.json ``memory.norm_fp32_copy``), a frozen norm's
smaller set, and how LoRA adapters keep their input (``memory.lora_input``)."""

from __future__ import annotations

from functools import lru_cache

from gpuplan.catalog.framework_memory import (
    autocast_fp32_weights,
    lora_keeps_shared_input,
    norm_keeps_fp32_copy,
    prepares_kbit_in_fp32,
    swiglu_saves_input,
)
from gpuplan.spec import Layout, ModelSpec, Training
from gpuplan.spec.model import ROW_PARALLEL_LEAVES


def norm_keeps(eager: bool, method: str, elem: int, amp: bool = False) -> float:
    """Bytes per element an RMSNorm keeps: fused, its input; eager (Hugging Face), the fp32 copy of its input
    and — when its weight trains — the normalized tensor the weight multiplies (a frozen weight needs no
    gradient, so LoRA/QLoRA keep the fp32 copy only; measured with PEFT, model/activations.py lora_terms).
    Under AMP over fp32 weights (``amp_fp32``) the residual stream is fp32: a norm keeps its fp32 input, an
    eager one also its fp32 normalized tensor (the fp32 weight multiplies it: 4 + 4)."""
    if amp:
        return 8 if eager else 4
    if not eager:
        return elem
    return 4 + elem if method == "full" else 4


def amp_fp32(training: Training, zero: int, model_parallel: int, offload: str) -> bool:
    """Whether the run is PyTorch AMP over fp32 parameters (frameworks.json ``memory.autocast_fp32_weights``):
    a full fine-tune in bf16/fp16 mixed precision on plain DDP or one GPU — ZeRO-0, no tensor, pipeline, context
    or expert parallelism (``model_parallel``: the product of their degrees), nothing offloaded — on a stack that
    trains so. Model-parallel and offloading runs use stacks that keep 16-bit parameters beside an fp32 master
    (DeepSpeed's ZeRO-Offload keeps that master on the host)."""
    return (zero == 0 and model_parallel == 1 and offload == "none" and training.method == "full"
            and training.precision in ("bf16", "fp16") and autocast_fp32_weights(training.framework))


def kbit_upcast(training: Training, zero: int) -> bool:
    """Whether a QLoRA (or 8-bit base, lora-int8) run keeps its norms (and, under fp16, its embeddings and LM head) in
    fp32 — PEFT's ``prepare_model_for_kbit_training`` casts every 16-bit parameter that is not 4- or 8-bit to fp32
    (``loaded_in_kbit``: is_loaded_in_8bit or is_loaded_in_4bit), and TRL's trainers
    call it for a 4-bit model with a LoRA config, except a sharded one (FSDP / ZeRO-3 QLoRA), then cast the
    embeddings and head back to bf16 under bf16 (peft_module_casting_to_bf16) — under mixed precision on a stack that
    prepares the model so (frameworks.json ``memory.kbit_upcast``)."""
    return (training.method in ("qlora", "lora-int8") and zero < 3 and training.precision in ("bf16", "fp16")
            and prepares_kbit_in_fp32(training.framework))


def amp_of(training: Training, lay: Layout) -> bool:
    """``amp_fp32`` for a layout."""
    return amp_fp32(training, lay.zero, lay.tp * lay.pp * lay.cp * lay.ep, lay.offload)


@lru_cache(maxsize=256)
def normed_readers(model: ModelSpec) -> tuple[int, int]:
    """How many separate linears read each normalized stream of a dense block — (attention: q, k, v = 3, a fused
    qkv 1, MLA's q_a and kv_a 2; MLP: gate and up = 2, a fused gate_up or a plain MLP 1): under autocast each
    casts its fp32 input to 16 bits itself and keeps that copy."""
    group = next((lg for lg in model.layers if not lg.moe and lg.attends), model.layers[0])
    def readers(kind: str) -> int:
        return max(1, sum(1 for w in group.weights if w.is_matrix and w.group == kind and w.shape[1] == model.hidden
                          and w.name.rsplit(".", 1)[-1] not in ROW_PARALLEL_LEAVES))
    return readers("attention"), readers("mlp")


def activation_flags(training: Training, lay: Layout) -> tuple[bool, bool, bool]:
    """What the activations of a layout read beside its shapes (``activation_parts``' amp, upcast, adapters16)."""
    return amp_of(training, lay), kbit_upcast(training, lay.zero), adapters_in_16_bits(training, lay.zero)


def adapters_in_16_bits(training: Training, zero: int) -> bool:
    """Whether a LoRA/QLoRA run's adapters compute in 16 bits — sharded (ZeRO-3 / FSDP) under bf16/fp16 mixed
    precision: FSDP's MixedPrecision casts every parameter, the adapters too, to its param_dtype for the forward
    (accelerate's FSDP plugin sets it from mixed_precision), TRL builds sharded QLoRA's adapters in bf16
    (get_peft_model(..., autocast_adapter_dtype=False)), DeepSpeed's bf16/fp16 engine converts the module to 16 bits —
    so PEFT's _cast_input_dtype and autocast cast nothing: the adapters read their input itself."""
    return training.method != "full" and zero >= 3 and training.precision in ("bf16", "fp16")


def fused_glu_keeps_input(training: Training) -> bool:
    """Whether the gated MLP's activation is a fused kernel that saves only its input (the gate and up outputs) and
    recomputes the activation in backward: Megatron-Core's bias-SwiGLU fusion (frameworks.json
    ``memory.swiglu_saves_input``; fused_bias_swiglu.py SwiGLUFunction.forward: ctx.save_for_backward(input)) and Liger
    Kernel's LigerSiLUMulFunction (saves a and b) — not the eager act_fn(gate) * up that keeps the activation's
    output too."""
    return training.kernels == "liger" or swiglu_saves_input(training.framework)


def lora_shape(training: Training, in_16_bits: bool = False) -> dict:
    """The ActShape fields of a LoRA/QLoRA run (model/activations.py lora_terms): each adapter's own copy of
    its input — PEFT casts it to the fp32 adapters, and autocast (mixed precision) back to 16-bit (2 B), or
    without autocast keeps the fp32 copy (pure bf16, 4 B) — unless the framework's adapters keep the input
    itself (torchtune), training is fp32 (no cast) or the adapters compute in 16 bits (``adapters_in_16_bits``);
    autocast's 16-bit copies of the adapter matrices."""
    if training.method == "full":
        return {}
    mixed = training.precision in ("bf16", "fp16", "fp8")
    shared = lora_keeps_shared_input(training.framework) or training.precision == "fp32" or in_16_bits
    copy = 0.0 if shared else 2.0 if mixed else 4.0
    return {"method": training.method, "lora_targets": training.lora_targets, "lora_rank": training.lora_rank,
            "lora_copy": copy, "lora_weight_cast": 2.0 if mixed and not shared else 0.0,
            "lora_dropout": training.lora_dropout > 0, "dora": training.dora}


def keeps_fp32_norm_copy(model: ModelSpec, training: Training) -> bool:
    """Whether the model's RMSNorms run as eager ops keeping an fp32 copy of their input (frameworks.json
    ``memory.norm_fp32_copy``; torch.compile fuses them): what `gpuplan trace` builds, and what the
    activation count keeps per norm (4 + element bytes instead of the input's element bytes)."""
    return model.norm == "rmsnorm" and not training.compile and training.kernels != "liger" \
        and norm_keeps_fp32_copy(training.framework)
