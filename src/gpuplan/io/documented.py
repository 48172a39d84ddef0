"""What a framework documents for a training field the input leaves open, read as it (a reading the answer lists)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.catalog.framework_era import attention_of
from gpuplan.io.words import Reading


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
