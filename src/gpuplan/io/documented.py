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
    training, recipe = single_device_recipe(tr_raw, training, hw_raw.get("gpus"), layout.get("micro_batch"), model)
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


# the models torchtune ships a one-GPU full fine-tune config for (recipes/configs @bd2a0fc7), and the smallest of
# each type whose config pages its optimizer: the Llama 3.x configs (llama3/8B, llama3_1/8B, llama3_2/1B, 3B) take
# bitsandbytes.optim.PagedAdamW8bit, the "low memory" ones (llama2/7B, mistral/7B, phi3/mini, phi4/14B) and qwen2/
# 1.5B-7B, qwen2_5/1.5B-7B, qwen3/8B 32-bit PagedAdamW, all with optimizer_in_bwd; qwen2/0.5B, qwen2_5/0.5B and
# qwen3/0.6B-4B plain torch.optim.AdamW (fused), as do the stacks' defaults; other types have no such config
_PAGED_FROM = {"llama": 1e9, "mistral": 7e9, "phi3": 3e9, "qwen2": 1.5e9, "qwen3": 8e9}
LLAMA3_VOCAB = 128_256  # Llama 3.x's tokenizer, apart from Llama 2's 32,000 (the same model_type)


def single_device_recipe(tr_raw: dict[str, Any], training: Any, gpus: Any, micro_batch: Any,
                         model: Any) -> tuple[Any, tuple[Reading, ...]]:
    """``training`` as torchtune's single-device full fine-tune runs it where the input gives one GPU and leaves the
    optimizer open (frameworks.json torchtune ``defaults.full_single_device``) and torchtune ships a config for the
    model that pages its optimizer (``_PAGED_FROM``): a paged bitsandbytes AdamW stepped in backward —
    PagedAdamW8bit in the Llama 3.x configs, 32-bit PagedAdamW in the others —, in backward only where the batch is
    open or one micro-batch (the recipe refuses it with gradient accumulation), as readings."""
    from gpuplan.catalog.frameworks import get_framework

    fact = get_framework(training.framework).defaults.get("full_single_device")
    model_type = model.model_type
    if fact is None or fact.value is None or training.method != "full" or gpus != 1 \
            or any(k in tr_raw for k in ("optimizer", "optimizer_impl", "optimizer_in_backward")) \
            or model.params < _PAGED_FROM.get(model_type, float("inf")):
        return training, ()
    one_step = "global_batch" not in tr_raw and "global_batch_tokens" not in tr_raw or \
        micro_batch is not None and training.global_batch == micro_batch
    llama3 = model_type == "llama" and model.vocab == LLAMA3_VOCAB
    optimizer = fact.value["optimizer"] if llama3 else "adamw"
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
