"""Trace vs the analytic prediction for the same scenario: per component, with ratios and the
reasons they differ; ``--calibrate`` keeps the ratios per architecture.

The trace sees what the caching allocator would be asked for on rank 0. It cannot see the CUDA
context, cuBLAS workspace, NCCL buffers or fragmentation: those stay the analytic model's terms
(``catalog/constants.json``) and are added to the measured total, named, under ``detail``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuplan.catalog.framework_memory import offloads_checkpoints
from gpuplan.errors import GpuplanError
from gpuplan.model.act_parts import stage_activations
from gpuplan.model.allocator import fragile
from gpuplan.model.estimate import evaluate
from gpuplan.model.flops import attention_flops, head_flops, layer_matmul_flops
from gpuplan.model.kept import activation_flags
from gpuplan.model.memory import stage_peak, verdict
from gpuplan.model.pipeline import layer_owners
from gpuplan.report.render import estimate_json
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario, normalized
from gpuplan.trace.calibration import record_ratios
from gpuplan.trace.explain import explain, sp_gathered_bytes, stage_outputs_bytes
from gpuplan.trace.run import TraceResult, run_trace

MIB = 2**20
STATE_KEYS = ("weights", "gradients", "optimizer")


def _ratio(measured: float, predicted: float) -> float | None:
    return measured / predicted if predicted else None


def measured_memory(r: TraceResult, runtime_bytes: float, share: float) -> dict:
    """The Estimate's ``memory`` keys for the traced peak (composition at the peak), plus the full
    state sizes over the step, the unseen terms (the allocator reserving ``share`` of the peak more) and the
    timeline."""
    at = r.peak_by_cat
    frag = share * r.peak
    unseen = runtime_bytes + frag
    other_traced = at["temporaries"] + at["fsdp_unsharded"] + at["buffers"]
    return {
        "weights": at["weights"], "gradients": at["gradients"], "optimizer": at["optimizer"],
        "activations": at["activations"] + at["recomputed"] + at["loss"],
        "other": other_traced + unseen,
        "total": r.peak + unseen,
        "peak_phase": r.peak_phase,
        "detail": {"traced_peak": r.peak, "temporaries": at["temporaries"], "fsdp_unsharded": at["fsdp_unsharded"],
                   "buffers": at["buffers"],
                   "loss_saved": at["loss"], "runtime": runtime_bytes, "fragmentation": frag},
        "states": {k: r.max_by_cat[k] for k in STATE_KEYS},
        "activations_max": r.held_max,
        "loss_saved_max": r.max_by_cat["loss"],
        "phase_peaks": r.phase_max,
        "timeline": _timeline(r),
    }


def _timeline(r: TraceResult) -> list[list]:
    rows = [[ev, b] for ev, b in r.timeline]
    rows.append([f"peak ({r.peak_phase})", r.peak])
    rows.extend([f"max in {ph}", b] for ph, b in r.phase_max.items())
    return rows


def traced_as(sc: Scenario) -> Scenario:
    """The scenario the traced step runs: PyTorch autograd keeps each gradient in its parameter's dtype
    (bf16 beside the fp32 master on one GPU; fp32 beside FSDP2's fp32 shards — the same 2 + 2 + 12 B/param
    of state), so the prediction it is compared with takes ``grad_dtype: param`` (not the generic stack's
    fp32 gradients)."""
    if sc.training.optimizer_in_backward or sc.training.activation_offloading:
        raise GpuplanError("trace runs the optimizer step after backward and keeps saved activations on the GPU: "
                           "drop training.optimizer_in_backward and training.activation_offloading to trace this "
                           "scenario (the formula counts both)")
    if offloads_checkpoints(sc.training.framework):
        raise GpuplanError(f"trace keeps saved activations on the GPU and runs PyTorch's own kernels, not "
                           f"{sc.training.framework}'s offloaded checkpoints and fused loss: trace the scenario with "
                           "framework hf-trainer")
    if set(sc.layout.get("recompute_modules") or ()) - {"core_attn"}:
        raise GpuplanError("trace checkpoints whole blocks, per op or the eager attention core, not Megatron-Core's "
                           "modules: drop layout.recompute_modules to trace this scenario")
    if sc.training.cuda_graphs != "none":
        raise GpuplanError("trace records one eager training step, without CUDA graphs: set training.cuda_graphs: "
                           "none to trace this scenario (their buffers are not in the formula either: the estimate "
                           "carries the documented allowance at its interval's upper end)")
    if sc.training.grad_dtype != "fp32":
        return sc
    if "training.grad_dtype" in sc.given:
        raise GpuplanError("trace runs PyTorch autograd, whose gradients keep the parameters' dtype: drop "
                           "training.grad_dtype (or set it to param) to trace this scenario")
    return replace(sc, training=replace(sc.training, grad_dtype="param"))


def _predicted_activations(sc: Scenario, lay: Layout, stage: int, flight: float) -> float:
    """The activations ``evaluate`` holds on ``stage`` with ``flight`` micro-batches in flight."""
    amp, upcast, adapters16 = activation_flags(sc.training, lay)
    return stage_activations(sc.model, sc.training, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, lay.cp,
                             lay.sequence_parallel, lay.micro_batch, lay.recompute_mode, flight,
                             sc.corrections.activations, amp=amp, upcast=upcast, adapters16=adapters16).held


def trace_and_compare(sc: Scenario, *, module: str | None = None, input_factory: str | None = None,
                      fidelity: str = "cpu", predicted_from_params: bool = False, stage: int | None = None) -> dict:
    """Trace ``sc`` (under a pipeline: ``stage``, by default the most loaded) and set it beside
    ``evaluate``'s prediction for the same stage."""
    sc = traced_as(sc)
    r = run_trace(sc, module=module, input_factory=input_factory, fidelity=fidelity, stage=stage)
    if predicted_from_params:  # --module without a model: predict from the traced parameter count
        from gpuplan.catalog.models import load_model

        sc = replace(sc, model=load_model({"params": r.params}))
    lay = r.layout  # the layout run_trace traced (``read_layout``: evaluate's reading of the open fields)
    est_obj = evaluate(sc, lay)
    est = estimate_json(est_obj)
    pm = _stage_memory(est_obj, r.stage) if r.stage is not None else est["memory"]
    flight = pm["microbatches_in_flight"] if lay.pp > 1 else 1.0
    act_pred = _predicted_activations(sc, lay, r.stage or 0, flight)
    pred_alloc = pm["total"] - pm["detail"]["fragmentation"] - pm["detail"]["runtime"]
    mm = measured_memory(r, pm["detail"]["runtime"], pm["detail"]["fragmentation"] / pred_alloc)  # its share
    mm["detail"]["sp_gathered_inputs"] = sp_gathered_bytes(sc, lay, r)
    mm["detail"]["stage_outputs_kept"] = stage_outputs_bytes(sc, lay, r)
    pred_model, pred_hw = _predicted_flops(sc, lay, r, est["time"])
    # per token of the model: a tensor-parallel group of tp ranks shares each token's work (rank 0 × tp)
    meas_model = r.flops["model"] / r.tokens * lay.tp
    meas_hw = r.flops["hardware"] / r.tokens * lay.tp
    states_m = sum(mm["states"].values())
    states_p = sum(pm[k] for k in STATE_KEYS)
    rows = [
        *({"component": k, "predicted": pm[k], "measured": mm["states"][k]} for k in STATE_KEYS),
        {"component": "states (weights+gradients+optimizer)", "predicted": states_p, "measured": states_m},
        {"component": "activations (largest held)", "predicted": act_pred, "measured": mm["activations_max"]},
        {"component": "allocated peak", "predicted": pred_alloc, "measured": r.peak},
        {"component": "total (with unseen terms)", "predicted": pm["total"], "measured": mm["total"]},
        {"component": "model FLOPs per token", "predicted": pred_model, "measured": meas_model},
        {"component": "hardware FLOPs per token", "predicted": pred_hw, "measured": meas_hw},
    ]
    for row in rows:
        row["ratio"] = _ratio(row["measured"], row["predicted"] or 0)
    return {
        "scenario": normalized(sc, lay),
        "model": {"name": sc.model.name if not module else module, "params_traced": r.params,
                  "params_predicted": sc.model.params},
        "predicted": {"memory": {k: pm[k] for k in (*STATE_KEYS, "activations", "other", "total", "capacity",
                                                    "fits", "peak_phase", "detail", "stage",
                                                    "microbatches_in_flight", "activations_per_microbatch")},
                      "time": {"model_flops_per_token": pred_model, "hardware_flops_per_token": pred_hw}},
        "measured": {"memory": mm,
                     "time": {"model_flops_per_token": meas_model, "hardware_flops_per_token": meas_hw,
                              "flops_per_step": r.flops, "tokens_per_step": r.tokens,
                              "flops_by_module": _top(r.flops_by_module, 12)},
                     "activations_by_module": _top(r.saved_by_module, 16)},
        "compare": rows,
        "explanations": explain(sc, r, rows, mm, pm, est),
        "trace": {"device": r.device, "fidelity": fidelity, "world": r.world, "tp": lay.tp,
                  "fsdp": r.fsdp, "wall_s": r.wall_s, "notes": r.notes, "zero": lay.zero,
                  "pp": lay.pp, "stage": r.stage, "microbatches_traced": r.microbatches,
                  "microbatches_per_step": r.microbatches_step, "in_flight_traced": r.in_flight,
                  "in_flight_predicted": flight},
    }


def _top(d: dict[str, float], n: int) -> dict[str, float]:
    return dict(sorted(d.items(), key=lambda kv: -kv[1])[:n])


def _row(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["component"].startswith(name))


def _predicted_flops(sc: Scenario, lay: Any, r: TraceResult, ptime: dict) -> tuple[float | None, float | None]:
    """evaluate's model and hardware FLOPs per token; of a pipeline stage, its share (recompute repeats
    layers only)."""
    pred_model, pred_hw = ptime.get("model_flops_per_token"), ptime.get("hardware_flops_per_token")
    if r.stage is not None and pred_model and pred_hw:
        share, layers_share = stage_flops_share(sc.model, sc.training.seq_len, lay, r.stage)
        pred_model, pred_hw = pred_model * share, pred_model * share + (pred_hw - pred_model) * layers_share
    return pred_model, pred_hw


def _stage_memory(est: Any, stage: int) -> dict:
    """evaluate's ``memory`` block for pipeline stage ``stage`` (evaluate reports the most loaded one)."""
    mem = est.memory
    if stage != mem.peak.stage:
        sc = est.scenario  # its global batch as evaluate filled it
        corr = sc.corrections.on(sc.hardware.gpu.id)
        peak = stage_peak(sc.model, sc.training, est.layout, stage, corr)
        v = verdict(peak.total, peak.states.cpu_offload, sc.hardware, sc.training, corr, irregular=fragile(
            sc.training, est.layout.recompute, est.layout.offload))
        mem = replace(mem, peak=peak, total=v.total, calibration=v.calibration,
                      cpu_offload_per_node=v.cpu_offload_per_node, fits=v.fits)
    return mem.to_json()


def stage_flops_share(m: Any, seq_len: int, lay: Any, stage: int) -> tuple[float, float]:
    """The shares of the model's per-token FLOPs that pipeline stage ``stage`` computes: of all of
    them (its layers' matmuls and attention — flops.py's terms — and, on the last stage, the LM
    head), and of the layers' alone (what recomputation repeats)."""
    v = lay.virtual_stages if lay.pp_schedule == "interleaved" else 1
    owners = layer_owners(m.n_layers, lay.pp, v)
    per_layer = [layer_matmul_flops(m, lg) + attention_flops(m, seq_len, False) for lg in m.layers
                 for _ in range(lg.count)]
    head = head_flops(m)
    layers = sum(f for f, o in zip(per_layer, owners, strict=True) if o == stage)
    mine = layers + (head if stage == lay.pp - 1 else 0)
    return mine / (sum(per_layer) + head), layers / sum(per_layer)


# ---- calibration ---------------------------------------------------------------------------------
def calibrate(result: dict, model_type: str) -> tuple[Path, dict]:
    """Fold this trace's measured/predicted ratios into the per-architecture running means."""
    ratios = {key: _row(result["compare"], comp)["ratio"]
              for key, comp in (("states", "states"), ("activations", "activations"), ("model_flops", "model FLOPs"))}
    return record_ratios(model_type, ratios)
