"""Why a trace and the formula differ: one sentence per component off by more than 2 %, with the
terms the formula leaves out sized, and what the trace simulated (tensor parallel, ZeRO sharding,
the pipeline stage and its micro-batches in flight)."""

from __future__ import annotations

from typing import Any

from gpuplan.model.pipeline import chunk_sizes
from gpuplan.spec.scenario import Scenario
from gpuplan.trace.run import TraceResult

MIB = 2**20
STATE_KEYS = ("weights", "gradients", "optimizer")


def _row(rows: list[dict], name: str) -> dict:
    return next(r for r in rows if r["component"].startswith(name))


def stage_layers(sc: Scenario, lay: Any, stage: int | None) -> tuple[int, bool]:
    """(layers, whether it holds the LM head) of the traced pipeline stage (the whole model without one)."""
    if stage is None:
        return sc.model.n_layers, True
    v = lay.virtual_stages if lay.pp_schedule == "interleaved" else 1
    sizes = chunk_sizes(sc.model.n_layers, lay.pp * v)
    return sum(sizes[stage + j * lay.pp] for j in range(v)), stage == lay.pp - 1


def sp_gathered_bytes(sc: Scenario, lay: Any, r: TraceResult | None = None) -> float:
    """What PyTorch's sequence parallelism keeps beyond Megatron-LM's count: ``PrepareModuleInput``
    all-gathers the sequence before the column-parallel linears, and autograd saves that full
    input (s·b·h per attention and per MLP block, and the LM head's input), where Megatron-LM
    saves the 1/tp shard and gathers it again in backward (Korthikanti et al. 2022, Sec. 4.2.2);
    on a pipeline stage, its layers' for each micro-batch in flight."""
    if not (lay.sequence_parallel and lay.tp > 1):
        return 0.0
    layers, head = stage_layers(sc, lay, r.stage if r is not None else None)
    elem = 4 if sc.training.precision == "fp32" else 2
    sbh = sc.training.seq_len * lay.micro_batch * sc.model.hidden
    return elem * sbh * (1 - 1 / lay.tp) * (2 * layers + head) * (r.in_flight if r is not None else 1.0)


def stage_outputs_bytes(sc: Scenario, lay: Any, r: TraceResult) -> float:
    """A pipeline stage's outputs kept until their micro-batch's backward, one per chunk pass in
    flight (torch.distributed.pipelining's ``fwd_cache``; Megatron-LM frees them once sent:
    ``deallocate_pipeline_outputs``); the model's last chunk's output is the loss."""
    if r.stage is None:
        return 0.0
    v = lay.virtual_stages if lay.pp_schedule == "interleaved" else 1
    passes = r.in_flight * v - (1 if r.stage == lay.pp - 1 else 0)  # chunk passes in flight, less the loss's
    elem = 4 if sc.training.precision == "fp32" else 2
    sp = lay.tp if lay.sequence_parallel and lay.tp > 1 else 1
    return elem * sc.training.seq_len * lay.micro_batch * sc.model.hidden / sp * passes


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
    if lay.zero in (1, 2) and lay.shard_group > 1:
        out.append(_zero_note(lay.zero, lay.shard_group))
    if r.stage is not None:
        out.append(_pipeline_note(sc, r, pm))
    off = [row for row in rows if row["ratio"] is not None and abs(row["ratio"] - 1) > 0.02]
    names = {row["component"] for row in off}
    out += _states_notes(sc, r, rows, names)
    act = _row(rows, "activations")
    if act["ratio"] is not None and abs(act["ratio"] - 1) > 0.02:
        out.append(_activations_note(sc, r, act))
    out += _peak_and_flops_notes(r, rows, names, pm)
    if lay.tp > 1 and not r.fsdp and r.stage in (None, 0) and "allocated peak" in names:
        out.append("PyTorch's vocab-parallel embedding (RowwiseParallel) returns its weight gradient replicated: "
                   f"the embedding's backward makes the full vocab × hidden gradient on every tp rank, {lay.tp}× "
                   "the formula's (Megatron-LM's vocab-parallel embedding keeps 1/tp)")
    if pm["detail"]["comm_buffers"] and lay.dp > 1 and not r.fsdp:
        out.append(f"the formula adds {pm['detail']['comm_buffers'] / MIB:.0f} MiB of DDP buckets (two of torch "
                   "DDP's 25 MiB bucket_cap_mb); the trace reduces the gradients in place in their own buffer "
                   "(Megatron-LM's contiguous grad buffer), so it allocates none")
    out.append("not seen by the trace (analytic terms added to the measured total): CUDA context + cuBLAS "
               f"workspace + NCCL buffers {pm['detail']['runtime'] / MIB:.0f} MiB, fragmentation "
               f"{mm['detail']['fragmentation'] / max(mm['detail']['traced_peak'], 1):.0%} of the allocated peak "
               "(model/allocator.py)")
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
        if r.layout.zero in (1, 2) and diff > 0 and abs(diff) < 0.001 * states["predicted"]:
            why = (f"each parameter's slice is ceil(n/{r.layout.shard_group}) elements, so rank 0 holds a little "
                   "more than 1/nd of the sharded states")
        out.append(f"states differ by {diff / MIB:+.1f} MiB ({states['ratio'] - 1:+.2%}): {why}")
    return out


def _activations_note(sc: Scenario, r: TraceResult, act: dict) -> str:
    """The activation difference, with the terms the formula leaves out sized and the rest."""
    tr, m, lay = sc.training, sc.model, r.layout
    s, b, fl = tr.seq_len, lay.micro_batch, r.in_flight
    layers, head = stage_layers(sc, lay, r.stage)
    qk_norm = any(w.name.endswith("q_norm") for lg in m.layers for w in lg.weights)
    tp = lay.tp  # heads are split over tp; the block norms' rows too with sequence parallelism
    rows_per_token = ((2 * layers + head) / (tp if lay.sequence_parallel else 1)
                      + (layers * (m.n_heads + m.n_kv_heads) / tp if qk_norm else 0))
    elem = 4 if tr.precision == "fp32" else 2
    passes = fl * (lay.virtual_stages if r.stage is not None and lay.pp_schedule == "interleaved" else 1)
    extras = {"fp32 1/rms kept by each RMSNorm (4 B per row)": 4 * s * b * rows_per_token * fl,
              "RoPE cos/sin tables": 2 * elem * s * m.head_dim * passes, "int64 token ids": 8 * s * b * fl}
    if qk_norm:
        extras["inputs of the q/k RMSNorms"] = (elem * s * b * (m.n_heads + m.n_kv_heads) * m.head_dim
                                                * layers / tp * fl)
    sp_extra = sp_gathered_bytes(sc, lay, r)
    if sp_extra:
        extras["all-gathered inputs of the column-parallel linears and the LM head saved by PyTorch's "
               "sequence parallelism (Megatron-LM keeps the 1/tp shard)"] = sp_extra
    outputs = stage_outputs_bytes(sc, lay, r)
    if outputs:
        extras["the stage's outputs kept until their backward, one per micro-batch in flight "
               "(torch.distributed.pipelining's fwd_cache; Megatron-LM frees them once sent)"] = outputs
    known = sum(extras.values())
    diff = act["measured"] - act["predicted"]
    parts = ", ".join(f"{k} {v / MIB:.2f} MiB" for k, v in extras.items())
    return (f"activations: trace − formula = {diff / MIB:+.1f} MiB ({act['ratio'] - 1:+.1%}); terms the formula "
            f"leaves out: {parts}; rest {(diff - known) / MIB:+.1f} MiB"
            + (" (eager attention / recompute working set differ from the formula's op-level count)"
               if abs(diff - known) > 0.02 * act["predicted"] else ""))


def _zero_note(zero: int, nd: int) -> str:
    what = "the gradients, " if zero == 2 else ""
    return (f"zero {zero} over {nd} simulated ranks (rank 0): {what}the fp32 master weights and the optimizer's "
            f"moments are sharded, 1/{nd} of each parameter; the 16-bit weights"
            + (" stay whole; each gradient is reduce-scattered as soon as autograd has accumulated it and added "
               "into rank 0's persistent partition (DeepSpeed stage 2)" if zero == 2 else
               " and gradients stay whole; the gradients accumulate in a persistent buffer, all-reduced in place "
               "before the update (Megatron-LM's distributed optimizer, DeepSpeed stage 1)")
            + "; after the update the weights are all-gathered in place")


def _pipeline_note(sc: Scenario, r: TraceResult, pm: dict) -> str:
    lay = r.layout
    layers, last = stage_layers(sc, lay, r.stage)
    holds = ", ".join([f"{layers} layers"] + (["the embedding"] if r.stage == 0 else [])
                      + (["the final norm and LM head (its own copy when tied)"] if last else []))
    sched = (f"interleaved, {lay.virtual_stages} chunks per stage" if lay.pp_schedule == "interleaved" else "1F1B")
    return (f"pipeline stage {r.stage} of {lay.pp} (the most loaded as the formula says, unless chosen) holds "
            f"{holds}; its {sched} schedule (torch.distributed.pipelining's order) ran {r.microbatches} of the step's "
            f"{r.microbatches_step} micro-batches (the steady state repeats itself) and held at most {r.in_flight:g} "
            f"micro-batch{'es' if r.in_flight != 1 else ''}' activations at once (the formula's in flight: "
            f"{pm['microbatches_in_flight']:g}); "
            "FLOPs are this stage's, beside its share of the model's")


def _peak_and_flops_notes(r: TraceResult, rows: list[dict], names: set[str], pm: dict) -> list[str]:
    """Why the allocated peak and the FLOPs differ (peak phase, coexistence, uncounted ops, flash)."""
    out: list[str] = []
    coexist = _COEXIST + ("the trace runs one micro-batch and measures when they actually coexist" if r.stage is None
                          else "the trace measures when they actually coexist")
    traced_phase = "optimizer step" if r.peak_phase in ("optimizer", "end") else "forward/backward"
    if traced_phase != pm["peak_phase"] and "allocated peak" in names:
        out.append(f"the traced peak is in the {r.peak_phase} phase; the formula's is in {pm['peak_phase']} "
                   f"({coexist})")
    elif "allocated peak" in names:
        out.append(f"allocated peak differs ({_row(rows, 'allocated')['ratio'] - 1:+.1%}): {coexist}")
def _peak_and_flops_notes(r: TraceResult, rows: list[dict], names: set[str], pm: dict) -> list[str]:
    """Why the allocated peak and the FLOPs differ (peak phase, coexistence, uncounted ops, flash)."""
    out: list[str] = []
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
            "the end of backward on one GPU with one micro-batch; ")


