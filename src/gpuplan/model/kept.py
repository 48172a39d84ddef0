"""What the training software keeps of each activation, as the ActShape fields of a run (model/activations.py
counts the bytes): an eager RMSNorm's fp32 copy (frameworks.json ``memory.norm_fp32_copy``), a frozen norm's
smaller set, and how LoRA adapters keep their input (``memory.lora_input``)."""

from __future__ import annotations

from gpuplan.catalog.framework_memory import lora_keeps_shared_input, norm_keeps_fp32_copy
from gpuplan.spec import ModelSpec, Training


def norm_keeps(eager: bool, method: str, elem: int) -> float:
    """Bytes per element an RMSNorm keeps: fused, its input; eager (Hugging Face), the fp32 copy of its input
    and — when its weight trains — the normalized tensor the weight multiplies (a frozen weight needs no
    gradient, so LoRA/QLoRA keep the fp32 copy only; measured with PEFT, model/activations.py lora_terms)."""
    if not eager:
        return elem
    return 4 + elem if method == "full" else 4


def lora_shape(training: Training) -> dict:
    """The ActShape fields of a LoRA/QLoRA run (model/activations.py lora_terms): each adapter's own copy of
    its input — PEFT casts it to the fp32 adapters, and autocast (mixed precision) back to 16-bit (2 B), or
    without autocast keeps the fp32 copy (pure bf16, 4 B) — unless the framework's adapters keep the input
    itself (torchtune) or training is fp32 (no cast); autocast's 16-bit copies of the adapter matrices."""
    if training.method == "full":
        return {}
    mixed = training.precision in ("bf16", "fp16", "fp8")
    shared = lora_keeps_shared_input(training.framework) or training.precision == "fp32"
    copy = 0.0 if shared else 2.0 if mixed else 4.0
    return {"method": training.method, "lora_targets": training.lora_targets, "lora_rank": training.lora_rank,
            "lora_copy": copy, "lora_weight_cast": 2.0 if mixed and not shared else 0.0}


def keeps_fp32_norm_copy(model: ModelSpec, training: Training) -> bool:
    """Whether the model's RMSNorms run as eager ops keeping an fp32 copy of their input (frameworks.json
    ``memory.norm_fp32_copy``; torch.compile fuses them): what `gpuplan trace` builds, and what the
    activation count keeps per norm (4 + element bytes instead of the input's element bytes)."""
    return model.norm == "rmsnorm" and not training.compile and norm_keeps_fp32_copy(training.framework)
