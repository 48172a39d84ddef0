"""What a framework documents for a training field the input leaves open, read as it (a reading the answer lists)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.catalog.framework_era import attention_of
from gpuplan.io.words import Reading


def documented_training(tr_raw: dict[str, Any], training: Any, architecture: str, model: Any, layout: dict[str, Any],
                        hw_raw: dict[str, Any]) -> tuple[Any, tuple[Reading, ...]]:
    """What the framework documents for the training fields the input leaves open: the attention
    (``documented_attention``), a one-GPU full fine-tune's optimizer (``single_device_recipe``); and the readings."""
    training, attends = documented_attention(tr_raw, training, architecture, model.position)
    training, recipe = single_device_recipe(tr_raw, training, hw_raw.get("gpus"), layout.get("micro_batch"),
                                            model.model_type)
    return training, attends + recipe


def documented_attention(tr_raw: dict[str, Any], training: Any, architecture: str,
                         position: str = "rope") -> tuple[Any, tuple[Reading, ...]]:
    """``training`` with an attention the input left open read as eager where its framework materializes the scores
    and this GPU's architecture runs no FlashAttention (catalog/framework_era.py ``attention_of``), or where the
    framework runs Hugging Face transformers' own modelling code and the model adds ALiBi biases (``position``), as a
    reading."""
    if "attention" in tr_raw:
        return training, ()
    if position == "alibi" and training.framework == "hf-trainer" and training.attention != "eager":
        return replace(training, attention="eager"), (
            ("training.attention", "open", "eager",
             "an ALiBi model under Hugging Face transformers' modelling code: BLOOM's and MPT's attention "
             "(BloomAttention, MptAttention) has no SDPA or FlashAttention path, and Falcon's computes the scores "
             "with matmuls wherever ALiBi is on — the s×s scores are materialized"),)
    if attention_of(training.framework, architecture) != "eager":
        return training, ()
    return replace(training, attention="eager"), (
        ("training.attention", "open", "eager",
         f"{training.framework}'s documented attention (frameworks.json attention_kernel): Megatron-LM of 2020-22 "
         "materializes the scores (baddbmm, fused softmax, bmm), and on V100 or T4 no FlashAttention runs "
         "(it needs sm80)"),)


# the model types whose torchtune single-device configs keep 32-bit paged AdamW states (qwen2/*, qwen2_5/*, qwen3/8B:
# bitsandbytes.optim.PagedAdamW), where the Llama 3.x configs take PagedAdamW8bit (frameworks.json torchtune
# defaults.full_single_device)
_PAGED_32BIT = frozenset({"qwen2", "qwen3"})


def single_device_recipe(tr_raw: dict[str, Any], training: Any, gpus: Any, micro_batch: Any,
                         model_type: str) -> tuple[Any, tuple[Reading, ...]]:
    """``training`` as torchtune's single-device full fine-tune runs it where the input gives one GPU and leaves the
    optimizer open (frameworks.json torchtune ``defaults.full_single_device``): a paged bitsandbytes AdamW stepped in
    backward — PagedAdamW8bit in the Llama 3.x configs, 32-bit PagedAdamW in Qwen's —, in backward only where the
    batch is open or one micro-batch (the recipe refuses it with gradient accumulation), as readings."""
    from gpuplan.catalog.frameworks import get_framework

    fact = get_framework(training.framework).defaults.get("full_single_device")
    if fact is None or fact.value is None or training.method != "full" or gpus != 1 \
            or any(k in tr_raw for k in ("optimizer", "optimizer_impl", "optimizer_in_backward")):
        return training, ()
    one_step = "global_batch" not in tr_raw and "global_batch_tokens" not in tr_raw or \
        micro_batch is not None and training.global_batch == micro_batch
    optimizer = "adamw" if model_type in _PAGED_32BIT else fact.value["optimizer"]
    moved = replace(training, optimizer=optimizer, optimizer_impl=fact.value["optimizer_impl"],
                    optimizer_in_backward=one_step and fact.value["optimizer_in_backward"])
    cls = "PagedAdamW" if optimizer == "adamw" else "PagedAdamW8bit"
    reads: tuple[Reading, ...] = (
        ("training.optimizer", "open", optimizer,
         f"{training.framework}'s one-GPU full fine-tune (full_finetune_single_device): bitsandbytes.optim.{cls}, "
         f"its {model_type} configs' optimizer ({fact.source})"),
        ("training.optimizer_impl", "open", "paged", f"bitsandbytes.optim.{cls} is a paged optimizer"))
    if moved.optimizer_in_backward:
        reads += (("training.optimizer_in_backward", "open", True,
                   f"{training.framework}'s single-device configs step the optimizer in backward (optimizer_in_bwd: "
                   "True, one micro-batch per step)"),)
    return moved, reads
