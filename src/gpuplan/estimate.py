"""``evaluate()``: one scenario and a complete layout → an Estimate (DESIGN.md section 4).

A pure function of its inputs: no file or network I/O beyond the cached catalogues.
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.memory import memory, rank_params
from gpuplan.scenario import Scenario, complete_layout, normalized
from gpuplan.spec import Layout

MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "other", "total", "capacity", "fits")


def evaluate(sc: Scenario, layout: Layout | None = None, **overrides: Any) -> dict:
    """Estimate for ``sc`` with ``layout`` (or the scenario's layout completed with ``overrides``)."""
    lay = layout if layout is not None else complete_layout(sc, **overrides)
    mem = memory(sc.model, sc.hardware, sc.training, lay)
    model = sc.model
    n_params = model.params
    state = mem["weights"] + mem["gradients"] + mem["optimizer"]
    tr = sc.training
    if tr.method == "full":
        trainable = n_params
    else:
        whole = rank_params(model, 1, 1, 1, 1, 0, tr.lora_targets, tr.lora_rank)
        trainable = whole.adapters_dense + whole.adapters_expert
    return {
        "scenario": normalized(sc, lay),
        "model": {
            "name": model.name, "params": n_params, "params_active": model.params_active,
            "params_trainable": trainable,
            "params_source": model.params_source, "params_by_group": model.params_by_group(),
            "assumed": list(model.assumed),
        },
        "memory": {
            **{k: mem[k] for k in MEMORY_KEYS},
            "headroom": mem["headroom"],
            "detail": mem["detail"],
            "peak_phase": mem["peak_phase"],
            "stage": mem["stage"],
            "microbatches_in_flight": mem["microbatches_in_flight"],
            "activations_per_microbatch": mem["activations_per_microbatch"],
            "cpu_offload": mem["cpu_offload"],
            "params_on_rank": mem["params_on_rank"],
            "model_state_bytes_per_param": state / mem["params_on_rank"] if mem["params_on_rank"] else 0.0,
        },
        # Runtime and cost are the runtime issue's; the keys are part of the contract.
        "time": {"step_s": None, "compute_s": None, "comm_exposed_s": None, "bubble_s": None,
                 "tokens_per_s": None, "tokens_per_s_per_gpu": None, "model_flops_per_token": None,
                 "mfu": None, "hfu": None, "train_s": None, "gpu_hours": None},
        "cost": {"usd": None, "usd_per_gpu_hour": sc.hardware.price_per_gpu_hour},
    }


def evaluate_safely(sc_or_error: Scenario | GpuplanError, **overrides: Any) -> dict:
    """For batches: a bad item becomes ``{"error": message}`` instead of stopping the batch."""
    if isinstance(sc_or_error, GpuplanError):
        return {"error": str(sc_or_error)}
    try:
        return evaluate(sc_or_error, **overrides)
    except GpuplanError as err:
        return {"error": str(err)}
