"""Megatron-Core's MoE arguments as a run's config gives them (``moe_token_dispatcher_type``, ``moe_grouped_gemm``, the
router's hyperparameters), under training or layout: what gpuplan times is said, what it does not is one error with
the fix (megatron/training/arguments.py; Megatron-Bridge's MoE model providers).

gpuplan times the expert all-to-all (alltoall; flex is the same exchange through DeepEP) and the experts of a rank as
one grouped GEMM (frameworks.json ``moe.grouped_gemm``); the router's loss, score function, bias and dtype change
neither memory nor time it models.
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.io.words import Reading, switch_word

DISPATCHERS = {"alltoall": "the expert all-to-all gpuplan times",
               "alltoall_seq": "the expert all-to-all gpuplan times (its sequence-parallel variant)",
               "flex": "the expert all-to-all gpuplan times, through DeepEP's kernels"}
# the router's hyperparameters and fusions: no change to the memory or time modelled
ROUTER = ("moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_load_balancing_type", "moe_router_score_function",
          "moe_router_pre_softmax", "moe_router_enable_expert_bias", "moe_router_bias_update_rate",
          "moe_router_topk_scaling_factor", "moe_router_dtype", "moe_permute_fusion", "moe_router_fusion",
          "moe_token_drop_policy", "moe_input_jitter_eps", "moe_per_layer_logging")
MOE_KEYS = ("moe_token_dispatcher_type", "moe_grouped_gemm", "moe_expert_capacity_factor", *ROUTER)


def moe_keys(*sections: Any) -> list[Reading]:
    """The MoE arguments taken out of ``sections`` (dicts, in place) and read."""
    given = {k: part.pop(k) for part in sections if isinstance(part, dict) for k in [k for k in part if k in MOE_KEYS]}
    reads: list[Reading] = []
    if "moe_token_dispatcher_type" in given:
        word = str(given.pop("moe_token_dispatcher_type")).strip().lower()
        if word not in DISPATCHERS:
            raise GpuplanError(f"moe_token_dispatcher_type {word!r} is not modelled (the allgather dispatcher gathers "
                               "every token on every expert rank): give alltoall (or flex), what MoE runs with expert "
                               "parallelism use")
        reads.append(("training.moe_token_dispatcher_type", word, "as timed", DISPATCHERS[word]))
    if "moe_grouped_gemm" in given:
        on = switch_word(given.pop("moe_grouped_gemm"))
        if on is not True:
            raise GpuplanError("moe_grouped_gemm false (SequentialMLP: one GEMM per expert in a loop) is not modelled "
                               "for this stack: gpuplan times a rank's experts as one grouped GEMM, as MoE runs set it")
        reads.append(("training.moe_grouped_gemm", "true", "as timed", "a rank's experts as one grouped GEMM: what "
                      "gpuplan times"))
    if given.get("moe_expert_capacity_factor") is not None:
        raise GpuplanError("moe_expert_capacity_factor (token dropping) is not modelled: gpuplan times the dropless "
                           "router at its measured load imbalance; drop the key")
    given.pop("moe_expert_capacity_factor", None)
    for key, value in given.items():
        reads.append((f"training.{key}", f"{key}: {value}", "not used", "the router's loss, scoring or dtype: no "
                      "change to the memory or time modelled"))
    return reads
