"""A framework profile's era: the GPUs its code ran on, and what it attends with where the input names nothing."""

from __future__ import annotations

from gpuplan.catalog.frameworks import get_framework

# the GPU architectures of 2020-22, the era of the profiles that materialize the attention scores (Megatron-LM
# before Megatron-Core: its --use-flash-attn arrived in 2023, as did Hopper and Ada systems to train on)
ERA_2020_22 = frozenset({"volta", "turing", "ampere"})
# where such a profile cannot attend otherwise: FlashAttention needs sm80 (flash-attn README), so on V100 and T4 its
# code of any year runs the fused softmax over materialized scores; on an A100 a run of 2023 on used FlashAttention
# (StarCoder on Megatron-LM, GPT-NeoX's and Megatron-DeepSpeed's flash-attn switches) and one of 2021-22 did not:
# the input says which (training.attention), the fused kernel where it does not
NO_FLASH = frozenset({"volta", "turing"})


def attention_of(framework: str, architecture: str) -> str:
    """The attention a framework runs where the input names none: eager where its profile documents the scores
    materialized (frameworks.json ``attention_kernel`` eager: Megatron-LM of 2020-22, its baddbmm, fused softmax and
    bmm) on a GPU without FlashAttention (``NO_FLASH``), else a fused kernel (model/attention.py picks which)."""
    eager = get_framework(framework).attention_kernel.value == "eager" and architecture in NO_FLASH
    return "eager" if eager else "flash"
