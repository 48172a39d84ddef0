"""What PyTorch's caching allocator reserves beyond what a step allocates at its peak (reserved − allocated).

Measured as a share of the allocated peak, by allocator and by how regular the step's allocations are:

- ``expandable_segments`` on (torchtitan, torchtune, Unsloth, llm-foundry and NeMo's launchers set it), or a step
  with no memory-saving technique: ``allocator_fragmentation`` of the allocated peak (5 %; GMLake's native "N" runs
  used 93–99 % of what they reserved, and the torchtitan peaks of the corpus, logged as reserved memory, sit within
  their interval at it);
- PyTorch's native segments (its default: Megatron-LM, DeepSpeed, Hugging Face, nanotron leave it) under activation
  recomputation, CPU offload or a low-rank adapter — the techniques GMLake (Guo et al., ASPLOS 2024) found to break
  the allocator's block reuse: the median of its measured recompute runs, ``allocator_fragmentation_native``, on
  what the step allocates and frees (its "churn": activations, gradients, buffers, temporaries). The weights and
  optimizer states, allocated once before the first step, split no cached block: GMLake's runs (ZeRO-3 over four
  GPUs, most of the peak per-step tensors) cannot tell the two apart, a QLoRA of a 70B model on one 48 GB GPU (35.6
  GiB of 4-bit weights, the QLoRA paper's 65B run) can. The measured spread, 4–52 % (``allocator_fragmentation``
  to ``allocator_fragmentation_native_high``, the worst: as STAlloc's Megatron-LM Llama-7B runs measured too),
  widens the peak's 80 % interval as if all of it churned.
"""

from __future__ import annotations

from functools import lru_cache

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_memory import sets_expandable_segments
from gpuplan.spec import Training


def expandable(training: Training) -> bool:
    """Whether the run's allocator maps expandable segments: as given (``training.expandable_segments``), else what
    its framework sets."""
    given = training.expandable_segments
    return sets_expandable_segments(training.framework) if given is None else given


def fragile(training: Training, recompute: str, offload: str) -> bool:
    """Whether the step allocates irregularly on native segments: recomputation, offload of states or activations,
    or a low-rank adapter (GMLake's memory-reduction techniques), with ``expandable_segments`` off."""
    irregular = recompute != "none" or offload != "none" or training.method != "full" or training.activation_offloading
    return irregular and not expandable(training)


@lru_cache(maxsize=2)
def fragmentation_share(is_fragile: bool) -> float:
    """Reserved − allocated, as a share of what the share is taken of (the module doc)."""
    return constant("allocator_fragmentation_native" if is_fragile else "allocator_fragmentation")


@lru_cache(maxsize=1)
def reserve_shares() -> tuple[float, float]:
    """(share, excess): reserved − allocated at a peak of A bytes, C of them allocated and freed every step on
    fragmented native segments (C = 0 elsewhere), is share · A + excess · C — the regular share of all of it, the
    native median's excess over it on the churn."""
    return fragmentation_share(False), fragmentation_share(True) - fragmentation_share(False)


@lru_cache(maxsize=2)
def fragmentation_spread(is_fragile: bool) -> tuple[float, float]:
    """How far the measured native fragmentation runs below and above its median, as shares of a peak carrying the
    median: (least − median) / (1 + median) and (worst − median) / (1 + median) — the least the share without a
    memory-saving technique; (0, 0) where the corpus's own peaks cover it. An error of its own, independent of the
    corpus's spread: the two add in quadrature (``memory.peak_factors``)."""
    if not is_fragile:
        return 0.0, 0.0
    median = fragmentation_share(True)
    least, worst = constant("allocator_fragmentation"), constant("allocator_fragmentation_native_high")
    return (least - median) / (1 + median), (worst - median) / (1 + median)
