"""``evaluate()``: one scenario and a complete layout → an Estimate (DESIGN.md section 4).

A pure function of its inputs: no file or network I/O beyond the cached catalogues.
"""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.constants import table
from gpuplan.errors import GpuplanError
from gpuplan.model.flops import flops_per_token
from gpuplan.model.memory import memory, rank_params
from gpuplan.model.runtime import step_time, unsupported_precision
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario, complete_layout, normalized

TIME_KEYS = ("step_s", "compute_s", "comm_exposed_s", "bubble_s", "tokens_per_s", "tokens_per_s_per_gpu",
             "model_flops_per_token", "mfu", "hfu", "train_s", "gpu_hours")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "other", "total", "capacity", "fits")


def evaluate(sc: Scenario, layout: Layout | None = None, **overrides: Any) -> dict:
    """Estimate for ``sc`` with ``layout`` (or the scenario's layout completed with ``overrides``)."""
    problem = unsupported_precision(sc.hardware.gpu, sc.training.precision)
    if problem:
        raise GpuplanError(problem)
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
        trainable = int(round(whole.adapters_dense + whole.adapters_expert))
    return {
        "scenario": normalized(sc, lay),
        "model": {
            "name": model.name, "params": n_params, "params_active": model.params_active,
            "params_trainable": trainable,
            "params_source": model.params_source, "params_by_group": model.params_by_group(),
            "assumed": list(model.assumed),
        },
        "notes": _notes(sc),
        "memory": {
            **{k: mem[k] for k in MEMORY_KEYS},
            "headroom": mem["headroom"],
            "detail": mem["detail"],
            "peak_phase": mem["peak_phase"],
            "stage": mem["stage"],
            "microbatches_in_flight": mem["microbatches_in_flight"],
            "activations_per_microbatch": mem["activations_per_microbatch"],
            "cpu_offload": mem["cpu_offload"],
            "cpu_offload_per_node": mem["cpu_offload_per_node"],
            "host_memory": mem["host_memory"],
            "params_on_rank": mem["params_on_rank"],
            "model_state_bytes_per_param": state / mem["params_on_rank"] if mem["params_on_rank"] else 0.0,
        },
        **time_and_cost(sc, lay),
    }


def _notes(sc: Scenario) -> list[str]:
    """What the estimate does not check but the user should know."""
    notes = []
    m, seq = sc.model, sc.training.seq_len
    if m.max_positions and seq > m.max_positions:
        notes.append(f"seq_len {seq:,} is beyond the {m.max_positions:,} positions {m.name} was trained on: "
                     "long-context training needs RoPE scaling or a longer-context model (memory and time are "
                     "predicted all the same)")
    return notes


def time_and_cost(sc: Scenario, lay: Layout) -> dict:
    """The ``time`` and ``cost`` blocks: step time (runtime.py), throughput, MFU/HFU, time to
    train, GPU-hours, energy at TDP, cost; and the optional goodput loss to failures."""
    hw, tr, model = sc.hardware, sc.training, sc.model
    if not any(k in hw.gpu.peak_flops for k in ("bf16", "fp16", "fp32")):
        why = f"{hw.gpu.id} has no published compute peak in the catalogue: runtime and cost are not predicted"
        return {"time": {k: None for k in TIME_KEYS} | {"note": why},
                "cost": {"usd": None, "usd_per_gpu_hour": hw.price_per_gpu_hour, "note": why}}
    st = step_time(model, hw, tr, lay)
    fl = flops_per_token(model, tr.seq_len, lay.recompute)
    seqs = tr.global_batch if tr.global_batch is not None else lay.dp * lay.micro_batch
    tokens_per_step = seqs * tr.seq_len
    tps = tokens_per_step / st["step_s"]
    peak16 = hw.gpu.peak_flops.get("bf16") or hw.gpu.peak_flops.get("fp16") or hw.gpu.peak_flops["fp32"]
    total_tokens = tr.tokens if tr.tokens is not None else (tr.steps * tokens_per_step if tr.steps else None)
    train_s = total_tokens / tps if total_tokens else None
    gpu_hours = hw.gpus * train_s / 3600 if train_s is not None else None
    price = hw.price_per_gpu_hour
    fail = failure_overhead(hw.gpus, train_s) if train_s is not None else None
    return {
        "time": {
            "step_s": st["step_s"], "compute_s": st["compute_s"], "comm_exposed_s": st["comm_exposed_s"],
            "bubble_s": st["bubble_s"], "optimizer_s": st["optimizer_s"], "recompute_s": st["recompute_s"],
            "comm_detail": st["comm_detail"], "microbatches": st["microbatches"],
            "tokens_per_step": tokens_per_step, "steps": total_tokens / tokens_per_step if total_tokens else None,
            "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / hw.gpus,
            "model_flops_per_token": fl.model, "hardware_flops_per_token": fl.hardware,
            "six_n_flops_per_token": fl.six_n,
            "total_flops": fl.model * total_tokens if total_tokens else None,
            "mfu": fl.model * tps / (hw.gpus * peak16), "hfu": fl.hardware * tps / (hw.gpus * peak16),
            "train_s": train_s, "gpu_hours": gpu_hours,
            "train_s_with_failures": train_s * (1 + fail) if fail is not None else None,
            "failure_overhead": fail,
            "energy_kwh": hw.gpus * hw.gpu.tdp_w * train_s / 3.6e6 if train_s and hw.gpu.tdp_w else None,
        },
        "cost": {"usd": gpu_hours * price if gpu_hours is not None and price is not None else None,
                 "usd_per_gpu_hour": price,
                 "usd_with_failures": gpu_hours * price * (1 + fail)
                 if gpu_hours is not None and price is not None and fail is not None else None},
    }


def failure_overhead(gpus: int, train_s: float) -> float:
    """Share of extra wall time lost to interruptions, for long runs on many GPUs.

    Rate from Llama 3 (Dubey et al. 2024, Sec. 3.3.4): 466 interruptions in 54 days on 16,384
    H100s → λ per GPU-day. With checkpoints every τ = sqrt(2·C·MTBF) (Young 1974) the expected
    loss per unit time is C/τ (writing checkpoints) + τ/(2·MTBF) (lost work) + R/MTBF (restarts).
    """
    f = table("failure")
    mtbf = 86400 / (f["interruptions_per_gpu_day"] * gpus)
    c, r = f["checkpoint_write_s"], f["restart_s"]
    tau = (2 * c * mtbf) ** 0.5
    return c / tau + tau / (2 * mtbf) + r / mtbf


def evaluate_safely(sc_or_error: Scenario | GpuplanError, **overrides: Any) -> dict:
    """For batches: a bad item becomes ``{"error": message}`` instead of stopping the batch."""
    if isinstance(sc_or_error, GpuplanError):
        return {"error": str(sc_or_error)}
    try:
        return evaluate(sc_or_error, **overrides)
    except GpuplanError as err:
        return {"error": str(err)}
