"""Trace vs the analytic prediction for the same scenario: per component, with ratios and the
reasons they differ; ``--calibrate`` keeps the ratios per architecture.

The trace sees what the caching allocator would be asked for on rank 0. It cannot see the CUDA
context, cuBLAS workspace, NCCL buffers or fragmentation: those stay the analytic model's terms
(``catalog/constants.json``) and are added to the measured total, named, under ``detail``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gpuplan.catalog.constants import constant
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import evaluate
from gpuplan.model.memory import stage_activations
from gpuplan.report.render import estimate_json
from gpuplan.spec.scenario import Scenario, complete_layout, normalized
from gpuplan.trace.calibration import record_ratios
from gpuplan.trace.run import TraceResult, run_trace

MIB = 2**20
STATE_KEYS = ("weights", "gradients", "optimizer")


def _ratio(measured: float, predicted: float) -> float | None:
    return measured / predicted if predicted else None


def measured_memory(r: TraceResult, runtime_bytes: float) -> dict:
    """The Estimate's ``memory`` keys for the traced peak (composition at the peak), plus the full
    state sizes over the step, the unseen terms and the timeline."""
    at = r.peak_by_cat
    frag = constant("allocator_fragmentation") * r.peak
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
    if sc.training.grad_dtype != "fp32":
        return sc
    if "training.grad_dtype" in sc.given:
        raise GpuplanError("trace runs PyTorch autograd, whose gradients keep the parameters' dtype: drop "
                           "training.grad_dtype (or set it to param) to trace this scenario")
    return dataclasses.replace(sc, training=dataclasses.replace(sc.training, grad_dtype="param"))


def trace_and_compare(sc: Scenario, *, module: str | None = None, input_factory: str | None = None,
                      fidelity: str = "cpu", predicted_from_params: bool = False) -> dict:
    sc = traced_as(sc)
    r = run_trace(sc, module=module, input_factory=input_factory, fidelity=fidelity)
    if predicted_from_params:  # --module without a model: predict from the traced parameter count
        from gpuplan.catalog.models import load_model

        sc = dataclasses.replace(sc, model=load_model({"params": r.params}))
    lay = complete_layout(sc)
    est = estimate_json(evaluate(sc, lay))
    pm = est["memory"]
    tr = sc.training
    act_pred = stage_activations(
        sc.model, tr, lay.tp, lay.ep, lay.pp, lay.virtual_stages, 0, lay.cp, lay.sequence_parallel,
        lay.micro_batch, lay.recompute, 1.0, sc.corrections.activations).held
    mm = measured_memory(r, pm["detail"]["runtime"])
    mm["detail"]["sp_gathered_inputs"] = sp_gathered_bytes(sc, lay)
    pred_alloc = pm["total"] - pm["detail"]["fragmentation"] - pm["detail"]["runtime"]
    ptime = est["time"]
    pred_model = ptime.get("model_flops_per_token")
    pred_hw = ptime.get("hardware_flops_per_token")
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
                                                    "fits", "peak_phase", "detail")},
                      "time": {"model_flops_per_token": pred_model, "hardware_flops_per_token": pred_hw}},
        "measured": {"memory": mm,
                     "time": {"model_flops_per_token": meas_model, "hardware_flops_per_token": meas_hw,
                              "flops_per_step": r.flops, "tokens_per_step": r.tokens,
                              "flops_by_module": _top(r.flops_by_module, 12)},
                     "activations_by_module": _top(r.saved_by_module, 16)},
        "compare": rows,
        "explanations": explain(sc, r, rows, mm, pm, est),
        "trace": {"device": r.device, "fidelity": fidelity, "world": r.world, "tp": lay.tp,
                  "fsdp": r.fsdp, "wall_s": r.wall_s, "notes": r.notes},
    }


def _top(d: dict[str, float], n: int) -> dict[str, float]:
    return dict(sorted(d.items(), key=lambda kv: -kv[1])[:n])


def _row(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["component"].startswith(name))


def sp_gathered_bytes(sc: Scenario, lay: Any) -> float:
    """What PyTorch's sequence parallelism keeps beyond Megatron-LM's count: ``PrepareModuleInput``
    all-gathers the sequence before the column-parallel linears, and autograd saves that full
    input (s·b·h per attention and per MLP block, and the LM head's input), where Megatron-LM
    saves the 1/tp shard and gathers it again in backward (Korthikanti et al. 2022, Sec. 4.2.2)."""
    if not (lay.sequence_parallel and lay.tp > 1):
        return 0.0
    elem = 4 if sc.training.precision == "fp32" else 2
    sbh = sc.training.seq_len * lay.micro_batch * sc.model.hidden
    return elem * sbh * (1 - 1 / lay.tp) * (2 * sc.model.n_layers + 1)


def explain(sc: Scenario, r: TraceResult, rows: list[dict], mm: dict, pm: dict, est: dict) -> list[str]:
    """Why trace and formula differ, for each component off by more than 2%."""
    out: list[str] = []
    lay = r.layout
    if lay.tp > 1:
        out.append(f"tensor parallel over {lay.tp} ranks (Megatron plan via parallelize_module): q/k/v/gate/up "
                   "column-parallel, o/down row-parallel, embedding and LM head vocab-parallel with a "
                   "vocab-parallel loss; RMSNorm weights are replicated on every tp rank, as the formula counts them"
                   + ("; norms run sequence-parallel (SequenceParallel)" if lay.sequence_parallel else "")
                   + f"; FLOPs are rank 0's × {lay.tp} (a tp group shares each token's work)")
    off = [row for row in rows if row["ratio"] is not None and abs(row["ratio"] - 1) > 0.02]
    names = {row["component"] for row in off}
    out += _states_notes(sc, r, rows, names)
    act = _row(rows, "activations")
    if act["ratio"] is not None and abs(act["ratio"] - 1) > 0.02:
        out.append(_activations_note(sc, r, act))
    out += _peak_and_flops_notes(r, rows, names, pm)
    out.append("not seen by the trace (analytic terms added to the measured total): CUDA context + cuBLAS "
               f"workspace + NCCL buffers {pm['detail']['runtime'] / MIB:.0f} MiB, fragmentation "
               f"{constant('allocator_fragmentation'):.0%} of the allocated peak")
    return out


def _states_notes(sc: Scenario, r: TraceResult, rows: list[dict], names: set[str]) -> list[str]:
    """Why weights, gradients and optimizer states (and their sum) differ."""
    out: list[str] = []
    tr, m = sc.training, sc.model
    if r.fsdp and names & set(STATE_KEYS):
        out.append("FSDP2 keeps the fp32 master copy as the sharded parameter and reduces gradients in fp32 "
                   "(4 + 4 + 8 B/param in weights/gradients/optimizer), where ZeRO's accounting counts 2 + 2 + 12; "
                   "compare the sum of the three")
    states = _row(rows, "states")
    if states["ratio"] is not None and abs(states["ratio"] - 1) > 1e-4:
        diff = states["measured"] - states["predicted"]
        why = ("FSDP2 pads each parameter's first dimension to a multiple of the shard count"
               if r.fsdp and diff > 0 else "the traced module's parameters differ from the formula's count"
               if r.params != m.params else "buffers and optimizer step counters are counted by the trace")
        emb_grad = (2 if tr.precision != "fp32" else 4) * m.vocab * m.hidden * (1 - 1 / r.layout.tp)
        if r.layout.tp > 1 and not r.fsdp and not m.tied_embeddings and abs(diff - emb_grad) < 0.01 * abs(diff):
            why = (f"PyTorch's vocab-parallel embedding (RowwiseParallel) returns its weight gradient replicated, "
                   f"the full vocab × hidden on every tp rank ({emb_grad / MIB:.1f} MiB more than the 1/tp shard), "
                   "until the optimizer step")
        if r.layout.zero == 2:
            why = "zero 2 is traced as FSDP2 without resharding after forward: parameters stay sharded at rest"
        out.append(f"states differ by {diff / MIB:+.1f} MiB ({states['ratio'] - 1:+.2%}): {why}")
    return out


def _activations_note(sc: Scenario, r: TraceResult, act: dict) -> str:
    """The activation difference, with the terms the formula leaves out sized and the rest."""
    tr, m = sc.training, sc.model
    s, b = tr.seq_len, r.layout.micro_batch
    qk_norm = any(w.name.endswith("q_norm") for lg in m.layers for w in lg.weights)
    tp = r.layout.tp  # heads are split over tp; the block norms' rows too with sequence parallelism
    rows_per_token = ((2 * m.n_layers + 1) / (tp if r.layout.sequence_parallel else 1)
                      + (m.n_layers * (m.n_heads + m.n_kv_heads) / tp if qk_norm else 0))
    elem = 4 if tr.precision == "fp32" else 2
    extras = {"fp32 1/rms kept by each RMSNorm (4 B per row)": 4 * s * b * rows_per_token,
              "RoPE cos/sin tables": 2 * elem * s * m.head_dim, "int64 token ids": 8 * s * b}
    if qk_norm:
        extras["inputs of the q/k RMSNorms"] = (elem * s * b * (m.n_heads + m.n_kv_heads) * m.head_dim
                                                * m.n_layers / tp)
    sp_extra = sp_gathered_bytes(sc, r.layout)
    if sp_extra:
        extras["all-gathered inputs of the column-parallel linears and the LM head saved by PyTorch's "
               "sequence parallelism (Megatron-LM keeps the 1/tp shard)"] = sp_extra
    known = sum(extras.values())
    diff = act["measured"] - act["predicted"]
    parts = ", ".join(f"{k} {v / MIB:.2f} MiB" for k, v in extras.items())
    return (f"activations: trace − formula = {diff / MIB:+.1f} MiB ({act['ratio'] - 1:+.1%}); terms the formula "
            f"leaves out: {parts}; rest {(diff - known) / MIB:+.1f} MiB"
            + (" (eager attention / recompute working set differ from the formula's op-level count)"
               if abs(diff - known) > 0.02 * act["predicted"] else ""))


def _peak_and_flops_notes(r: TraceResult, rows: list[dict], names: set[str], pm: dict) -> list[str]:
    """Why the allocated peak and the FLOPs differ (peak phase, coexistence, uncounted ops, flash)."""
    out: list[str] = []
    traced_phase = "optimizer step" if r.peak_phase in ("optimizer", "end") else "forward/backward"
    if traced_phase != pm["peak_phase"] and "allocated peak" in names:
        out.append(f"the traced peak is in the {r.peak_phase} phase; the formula's is in {pm['peak_phase']} "
                   f"({_COEXIST})")
    elif "allocated peak" in names:
        out.append(f"allocated peak differs ({_row(rows, 'allocated')['ratio'] - 1:+.1%}): {_COEXIST}")
    fl = _row(rows, "model FLOPs")
    if fl["ratio"] is not None and abs(fl["ratio"] - 1) > 0.02:
        out.append(f"model FLOPs differ by {fl['ratio'] - 1:+.1%}: ops the formula does not count "
                   "(or a non-causal-LM module)")
    if r.flops["flash_backward_recompute"]:
        out.append(f"flash attention's backward recomputes Q·Kᵀ: {r.flops['flash_backward_recompute'] / r.tokens:.3g} "
                   "FLOPs/token, in the hardware count only (PyTorch's FlopCounter convention)")
    return out


_COEXIST = ("the formula keeps every gradient beside the activations and loss buffers where gradients persist "
            "(several micro-batches per step, data-parallel or pipeline gradient buffers) and takes the start or "
            "the end of backward on one GPU with one micro-batch; the trace runs one micro-batch and measures "
            "when they actually coexist")


# ---- calibration ---------------------------------------------------------------------------------
def calibrate(result: dict, model_type: str) -> tuple[Path, dict]:
    """Fold this trace's measured/predicted ratios into the per-architecture running means."""
    ratios = {key: _row(result["compare"], comp)["ratio"]
              for key, comp in (("states", "states"), ("activations", "activations"), ("model_flops", "model FLOPs"))}
    return record_ratios(model_type, ratios)
