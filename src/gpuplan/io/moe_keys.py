"""Megatron-Core's MoE arguments as a run's config gives them (``moe_token_dispatcher_type``, ``moe_grouped_gemm``, the
router's hyperparameters), under training or layout: what gpuplan times is said, what it does not is one error with
the fix (megatron/training/arguments.py; Megatron-Bridge's MoE model providers).

gpuplan times the expert exchange as the dispatcher makes it (``training.moe_dispatcher``, model/ep_comm.py): alltoall
as an NCCL all-to-all, flex through DeepEP's kernels (``moe_enable_deepep`` / ``moe_flex_dispatcher_backend: deepep``),
and the experts of a rank as one grouped GEMM (frameworks.json ``moe.grouped_gemm``); the router's loss, score
function, bias and dtype change neither memory nor time it models.
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.io.words import Reading, switch_word

DISPATCHERS = {"alltoall": ("alltoall", "an NCCL all-to-all of the permuted tokens"),
               "alltoall_seq": ("alltoall", "an NCCL all-to-all of the permuted tokens (sequence-parallel variant)"),
               "flex": ("deepep", "DeepEP's kernels: a token crosses the network once per node it reaches"),
               # Megatron-Bridge recipes' shorthand (moe_token_dispatcher_type=deepep: flex with the DeepEP backend)
               "deepep": ("deepep", "DeepEP's kernels: a token crosses the network once per node it reaches")}
DEEPEP_SWITCHES = ("moe_enable_deepep", "moe_flex_dispatcher_backend")
# the router's hyperparameters and fusions: no change to the memory or time modelled
ROUTER = ("moe_aux_loss_coeff", "moe_z_loss_coeff", "moe_router_load_balancing_type", "moe_router_score_function",
          "moe_router_pre_softmax", "moe_router_enable_expert_bias", "moe_router_bias_update_rate",
          "moe_router_topk_scaling_factor", "moe_router_dtype", "moe_permute_fusion", "moe_router_fusion",
          "moe_token_drop_policy", "moe_input_jitter_eps", "moe_per_layer_logging")
MOE_KEYS = ("moe_token_dispatcher_type", *DEEPEP_SWITCHES, "moe_grouped_gemm", "moe_expert_capacity_factor", *ROUTER)


def moe_keys(*sections: Any) -> tuple[list[Reading], str | None]:
    """The MoE arguments taken out of ``sections`` (dicts, in place) and read; the dispatcher they name (None:
    none named)."""
    given = {k: part.pop(k) for part in sections if isinstance(part, dict) for k in [k for k in part if k in MOE_KEYS]}
    reads: list[Reading] = []
    dispatcher = None
    if "moe_token_dispatcher_type" in given:
        word = str(given.pop("moe_token_dispatcher_type")).strip().lower()
        if word not in DISPATCHERS:
            raise GpuplanError(f"moe_token_dispatcher_type {word!r} is not modelled (the allgather dispatcher gathers "
                               "every token on every expert rank): give alltoall (or flex), what MoE runs with expert "
                               "parallelism use")
        dispatcher, why = DISPATCHERS[word]
        reads.append(("training.moe_dispatcher", f"moe_token_dispatcher_type: {word}", dispatcher, why))
    dispatcher = _deepep_switches(given, dispatcher, reads)
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
    return reads, dispatcher


def _deepep_switches(given: dict[str, Any], dispatcher: str | None, reads: list[Reading]) -> str | None:
    """Megatron-Core's DeepEP switches (``--moe-enable-deepep``, ``--moe-flex-dispatcher-backend deepep``): the flex
    dispatcher through DeepEP; with the all-to-all dispatcher named, a contradiction."""
    for key in DEEPEP_SWITCHES:
        if key not in given:
            continue
        value = given.pop(key)
        if key == "moe_enable_deepep":
            if switch_word(value) is not True:
                continue
        elif str(value).strip().lower() != "deepep":
            raise GpuplanError(f"moe_flex_dispatcher_backend {value!r} is not modelled: give deepep (DeepEP's "
                               "kernels) or drop it (the all-to-all)")
        if dispatcher == "alltoall":
            raise GpuplanError(f"{key} runs DeepEP through the flex dispatcher, but moe_token_dispatcher_type is "
                               "alltoall: give moe_token_dispatcher_type flex, or drop the DeepEP switch")
        dispatcher = "deepep"
        reads.append(("training.moe_dispatcher", f"{key}: {value}", "deepep", "DeepEP's kernels: a token crosses "
                      "the network once per node it reaches"))
    return dispatcher
