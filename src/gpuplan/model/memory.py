"""Per-GPU memory of a training step, for the most loaded rank.

Composition (each piece documented where it is computed):

    model states   weights + gradients + optimizer (states.py; ZeRO sharding below)
    activations    per layer × layers on the stage × micro-batches in flight (activations.py)
    transients     logits/loss buffers, ZeRO-3/FSDP gather and reduce-scatter buffers,
                   DDP buckets, QLoRA dequantisation, the optimizer step's temporaries
    fixed          CUDA context, NCCL buffers per communicator
    fragmentation  a share of the caching allocator's peak

The peak is the larger of the forward/backward phase and the optimizer-step phase.
Sharding (ZeRO, Rajbhandari et al. 2020): stage 1 shards optimizer state (incl. fp32
master weights), 2 also gradients, 3 also weights (= FSDP FULL_SHARD); the shard group
is dp×cp, or ``zero_group`` for hybrid shard (HSDP). Expert weights are sharded over
the expert-data-parallel group dp×cp/ep (Megatron-Core MoE). Under a pipeline, a framework
whose FSDP keeps the stage gathered between micro-batches (torchtitan) holds stage 3's weights
and gradients whole, as stage 1 does (catalog.frameworks.keeps_unsharded_under_pp).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from gpuplan.catalog.constants import constant
from gpuplan.catalog.frameworks import keeps_unsharded_under_pp
from gpuplan.model.activations import (
    ACT_BYTES,
    FP8_LINEAR_INPUT_BYTES,
    ActShape,
    layer_bytes,
    logits_bytes,
    recompute_working_set,
)
from gpuplan.model.params import rank_params
from gpuplan.model.pipeline import flight_of, micro_batch_count, peak_stages
from gpuplan.model.software import software
from gpuplan.model.states import StateBytes, optimizer_step_temp_bytes, state_bytes
from gpuplan.spec import Hardware, Layout, ModelSpec, Training
from gpuplan.spec._fast import maker
from gpuplan.spec.corrections import NONE, Corrections


@dataclass(frozen=True, slots=True)
class ModelStates:
    """One rank's model states and what the rest of the peak derives from them (bytes, elements)."""

    weights: float
    gradients: float
    optimizer: float
    cpu_offload: float       # optimizer (and with params offload, weights and gradients) in host memory
    optimizer_params: float  # parameters whose optimizer state this rank updates (after ZeRO-1)
    buffers: float           # ZeRO-3/FSDP gather and reduce buffers, DDP buckets, QLoRA dequantisation
    params_on_rank: float
    trainable_on_rank: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


@dataclass(frozen=True, slots=True)
class StageActivations:
    per_microbatch: float  # activations one micro-batch leaves for backward
    held: float            # held at the peak: per micro-batch × in flight + the working sets held once
    logits: float          # the LM head's logits and loss buffers (last stage)


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePeak:
    """Everything one pipeline stage's peak is made of (bytes per GPU)."""

    stage: int
    total: float
    states: ModelStates
    activations_per_microbatch: float
    activations: float       # held at the forward/backward peak
    logits: float
    buffers: float
    optimizer_step: float    # the optimizer step's temporaries
    fragmentation: float
    runtime: float           # CUDA context, cuBLAS workspace, NCCL communicators
    train_phase_peak: bool   # the peak is in forward/backward (else in the optimizer step)
    microbatches_in_flight: float
    gradients_held: float    # gradients alive at the peak (one GPU, one micro-batch: see stage_peak)

    def largest_part(self) -> str:
        """What fills this stage most: the lever a user can pull (search rejections, advice)."""
        states, act, rest = self.states.total, self.activations, self.logits + self.buffers
        if states >= act and states >= rest:  # ties go to the first, as max() over the three would
            return "model states"
        return "activations" if act >= rest else "logits and buffers"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBreakdown:
    """Per-GPU memory of the most loaded rank; ``to_json`` is the contract's ``memory`` block."""

    peak: StagePeak
    total: float
    capacity: float
    calibration: float          # bytes added by a fitted memory correction (0 without one)
    cpu_offload_per_node: float
    host_memory: float | None
    fits: bool
    headroom_share: float = 0.0  # training.headroom: the share of capacity kept free

    @property
    def weights(self) -> float:
        return self.peak.states.weights

    @property
    def gradients(self) -> float:
        return self.peak.states.gradients

    @property
    def optimizer(self) -> float:
        return self.peak.states.optimizer

    @property
    def activations(self) -> float:
        return self.peak.activations if self.peak.train_phase_peak else 0.0

    @property
    def other(self) -> float:
        return self.total - self.peak.states.total - self.activations

    @property
    def headroom(self) -> float:
        return self.capacity - self.total

    def parts(self) -> dict[str, float]:
        """The peak in the three parts a user can act on (the largest says what to change):
        fragmentation and the fixed runtime follow the others and are no lever of their own."""
        d = self.detail()
        return {"model states": self.weights + self.gradients + self.optimizer,
                "activations": self.activations, "logits and buffers": d["logits"] + d["comm_buffers"]}

    def detail(self) -> dict[str, float]:
        p, train = self.peak, self.peak.train_phase_peak
        out = {
            "logits": p.logits if train else 0.0,
            "comm_buffers": p.buffers if train else 0.0,
            "optimizer_step": p.optimizer_step if not train else 0.0,
            # One GPU, one micro-batch (stage_peak): gradients are listed at full size, but the peak
            # comes before backward has allocated them (negative: the part not held) or at its end
            # with a tied embedding's second gradient and their sum beside them (positive).
            "backward_timing": p.gradients_held - p.states.gradients if train else 0.0,
            "runtime": p.runtime,
            "fragmentation": p.fragmentation,
        }
        if self.calibration:
            out["calibration"] = self.calibration
        return out

    def to_json(self) -> dict:
        p = self.peak
        return {
            "weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
            "activations": self.activations, "other": self.other, "total": self.total,
            "capacity": self.capacity, "fits": self.fits, "headroom": self.headroom,
            "headroom_share": self.headroom_share, "usable": self.capacity * (1 - self.headroom_share),
            "tight": not self.fits and self.total <= self.capacity, "detail": self.detail(),
            "peak_phase": "forward/backward" if p.train_phase_peak else "optimizer step",
            "stage": p.stage, "microbatches_in_flight": p.microbatches_in_flight,
            "activations_per_microbatch": p.activations_per_microbatch, "cpu_offload": p.states.cpu_offload,
            "cpu_offload_per_node": self.cpu_offload_per_node, "host_memory": self.host_memory,
            "params_on_rank": p.states.params_on_rank,
            "model_state_bytes_per_param": p.states.total / p.states.params_on_rank if p.states.params_on_rank
            else 0.0,
        }


_make_peak = maker(StagePeak)


@lru_cache(maxsize=1024)
def _state_bytes(precision: str, optimizer: str, model: ModelSpec) -> StateBytes:
    return state_bytes(precision, optimizer, model)


@lru_cache(maxsize=65536)
def model_states(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                 zero: int, nd: int, nd_e: int, offload: str, dp_group: int) -> ModelStates:
    """One rank's model states — see the module doc for the sharding rules."""
    method = training.method
    sb = _state_bytes(training.precision, training.optimizer, model)
    targets = training.lora_targets if method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank)

    def shard(dense: float, expert: float, on: bool) -> float:
        return dense / nd + expert / nd_e if on else dense + expert

    z = zero
    kept = z >= 3 and pp > 1 and keeps_unsharded_under_pp(training.framework)
    if method == "full":
        # kept: the stage's parameters stay gathered and its gradients accumulate unsharded over
        # the micro-batches, reduce-scattered at the last backward (ZeRO-1-like for both)
        weights = shard(rp.dense, rp.expert, z >= 3 and not kept) * sb.weight
        grads = shard(rp.dense, rp.expert, z >= 2 and not kept) * sb.grad
        opt_local = shard(rp.dense, rp.expert, z >= 1)
        optimizer = opt_local * sb.optimizer
    else:
        # LoRA/QLoRA: frozen base in 16-bit (QLoRA: block linears in NF4), adapters trainable.
        # PEFT keeps adapters in fp32 under mixed precision (autocast_adapter_dtype=True),
        # so they need no separate master copy: 4 B weight + 4 B grad + moments.
        base = rp.dense + rp.expert
        if method == "qlora":
            base_bytes = rp.quantizable * constant("nf4_bytes_per_param") + (base - rp.quantizable) * 2
        else:
            base_bytes = base * sb.weight
        mixed = training.precision in ("bf16", "fp16", "fp8")
        ad_w = 4 if mixed else sb.weight
        ad_g = 4 if mixed else sb.grad
        base_share = base_bytes / (nd if z >= 3 and not kept else 1)
        weights = base_share + shard(rp.adapters_dense, rp.adapters_expert, z >= 3 and not kept) * ad_w
        grads = shard(rp.adapters_dense, rp.adapters_expert, z >= 2 and not kept) * ad_g
        opt_local = shard(rp.adapters_dense, rp.adapters_expert, z >= 1)
        optimizer = opt_local * sb.states

    cpu = 0.0
    if offload in ("optimizer", "params"):
        cpu += optimizer
        optimizer = 0.0
    if offload == "params":
        cpu += weights + grads
        weights = grads = 0.0

    # ---- transient buffers ------------------------------------------------------------------
    w_elem = 4 if training.precision == "fp32" else 2
    buffers = 0.0
    if (z >= 3 and not kept) or offload == "params":
        # FSDP: the layer being computed and the prefetched next one, unsharded, plus the
        # unsharded gradient of one layer before its reduce-scatter.
        buffers += rp.largest_layer * (2 * w_elem + (sb.grad if method == "full" else 0))
    elif dp_group > 1:
        buffers += 2 * constant("ddp_bucket_bytes")
    if method == "qlora":
        buffers += rp.largest_matrix * 2  # one weight dequantised to bf16 at a time
    trainable = (rp.dense + rp.expert) if method == "full" else rp.adapters_dense + rp.adapters_expert
    return ModelStates(weights, grads, optimizer, cpu, opt_local, buffers, rp.dense + rp.expert, trainable)


def stage_activations(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                      cp: int, sp: bool, mb: int, recompute: str, flight: float,
                      factor: float = 1.0, *, every: int = 1) -> StageActivations:
    """One rank's activations; ``factor`` is a correction fitted by `gpuplan trace --calibrate`;
    ``every`` > 1 with full recompute: only every k-th block is recomputed."""
    per_mb, extra, logits = activation_parts(model, training, tp, ep, pp, vstages, stage, cp, sp, mb, recompute)
    if recompute == "full" and every > 1:  # the other blocks keep what they would without recompute
        kept, _, _ = activation_parts(model, training, tp, ep, pp, vstages, stage, cp, sp, mb, "none")
        per_mb = per_mb / every + kept * (1 - 1 / every)
    if factor != 1.0:
        per_mb, extra = per_mb * factor, extra * factor
    return StageActivations(per_mb, per_mb * flight + extra, logits)


@lru_cache(maxsize=65536)
def activation_parts(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                     cp: int, sp: bool, mb: int, recompute: str) -> tuple[float, float, float]:
    """(activations per micro-batch in flight, activations held once — the recompute working set and
    the last stage's LM-head inputs —, logits) of one rank."""
    targets = training.lora_targets if training.method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank)
    elem = ACT_BYTES[training.precision]
    x = ActShape(s=training.seq_len // cp, b=mb, t=tp, sp=sp, dropout=training.dropout > 0,
                 flash=training.attention in ("flash", "flash1"), elem=elem,
                 linear_in=FP8_LINEAR_INPUT_BYTES if training.precision == "fp8" else elem)
    per_mb = (rp.dense_layers * layer_bytes(model, False, x, recompute)
              + rp.moe_layers * layer_bytes(model, True, x, recompute))
    extra = 0.0
    if recompute in ("full", "selective-op") and (rp.dense_layers or rp.moe_layers):
        extra += recompute_working_set(model, rp.moe_layers > 0, x)
    logits = 0.0
    if stage == pp - 1:
        rep = 1 / x.t if x.sp else 1.0
        extra += 2 * elem * x.s * x.b * model.hidden * rep  # final norm input and LM-head input
        logits = logits_bytes(model, x.s, x.b, x.t, software(training.framework, training.compile, model).logits_memory)
    return per_mb, extra, logits


def _one_gpu_backward(model: ModelSpec, training: Training, states: ModelStates, act: StageActivations,
                      ) -> tuple[float, float, float]:
    """(gradients, activations, logits) alive at the peak on one GPU with one micro-batch per step.

    Gradients set to None after each step (PyTorch's zero_grad default since 2.0): backward frees
    activations layer by layer while it allocates gradients, so the peak is at its start
    (activations + loss buffers; then the LM head's gradient beside the activations) or at its end
    (every gradient; with tied embeddings the embedding's own V×h gradient and its out-of-place
    sum with the head's beside them) — not the sum. Measured with `gpuplan trace`, allocated peak
    to the MiB: Llama-3.2-1B (tied) seq 2048 = states without gradients + activations + logits
    buffers, seq 256/1024 = states + 2 V×h gradients; Llama-3.1-8B (untied) seq 4096 = the start,
    seq 512 = the optimizer step. Accumulation over micro-batches, data parallelism (DDP/Megatron
    keep persistent gradient buffers) and pipelines keep the sum."""
    grads, trainable = states.gradients, states.trainable_on_rank
    full = trainable and training.method == "full"
    head = model.vocab * model.hidden * grads / trainable if full else 0.0
    end = grads + (2 * head if model.tied_embeddings else 0.0)
    if end >= max(act.held + act.logits, act.held + head):
        return end, 0.0, 0.0  # the end: activations are gone
    if head > act.logits:
        return head, act.held, 0.0
    return 0.0, act.held, act.logits


@lru_cache(maxsize=1)
def _fragmentation_share() -> float:
    return constant("allocator_fragmentation")


@lru_cache(maxsize=8)
def _runtime_bytes(communicators: int) -> float:
    """CUDA context, cuBLAS workspace and one NCCL communicator's buffers per process group."""
    return constant("cuda_context_bytes") + constant("cublas_workspace_bytes") \
        + constant("nccl_bytes_per_communicator") * communicators


def _mirrored(states: ModelStates) -> ModelStates:
    """DualPipe: each rank holds its stage and the mirrored one (stage pp−1−i), "2× parameters"
    (DeepSeek-V3, arXiv:2412.19437, Table 2) — weights, gradients and optimizer states of both."""
    return replace(states, weights=2 * states.weights, gradients=2 * states.gradients,
                   optimizer=2 * states.optimizer, cpu_offload=2 * states.cpu_offload,
                   optimizer_params=2 * states.optimizer_params, params_on_rank=2 * states.params_on_rank,
                   trainable_on_rank=2 * states.trainable_on_rank)


def _stage_parts(model: ModelSpec, training: Training, layout: Layout, stage: int,
                 corrections: Corrections) -> dict[str, Any]:
    """The pieces of one stage's peak (stage_peak's fields), by name."""
    lay = layout
    dp, cp, tp, pp, ep, zero = lay.dp, lay.cp, lay.tp, lay.pp, lay.ep, lay.zero
    nd = (lay.zero_group or dp * cp) if zero else 1
    nd_e = max(1, min(nd, dp * cp // ep)) if zero else 1
    states = model_states(model, training, tp, ep, pp, lay.virtual_stages, stage, zero, nd, nd_e, lay.offload,
                          dp * cp)
    if lay.pp_schedule == "dualpipe":
        states = _mirrored(states)
    n_mb = micro_batch_count(training.global_batch, dp, lay.micro_batch, pp)
    flight = flight_of(pp, lay.pp_schedule, lay.virtual_stages, stage, n_mb)
    act = stage_activations(model, training, tp, ep, pp, lay.virtual_stages, stage, cp, lay.sequence_parallel,
                            lay.micro_batch, lay.recompute, flight, corrections.activations,
                            every=lay.recompute_every)
    opt_temp = 0.0 if lay.offload != "none" else \
        states.optimizer_params * optimizer_step_temp_bytes(training.optimizer, training.precision,
                                                            training.optimizer_impl)
    grads_held, act_held, logits_held = states.gradients, act.held, act.logits
    if zero == 0 and dp * cp * tp * pp == 1 and n_mb == 1:
        grads_held, act_held, logits_held = _one_gpu_backward(model, training, states, act)
    train_phase = states.weights + states.optimizer + grads_held + act_held + logits_held + states.buffers
    step_phase = states.total + opt_temp
    allocated = max(train_phase, step_phase)
    fragmentation = _fragmentation_share() * allocated
    communicators = (dp * cp > 1) + (tp > 1) + (pp > 1) + (cp > 1) + (ep > 1)  # one NCCL communicator per group
    fixed = _runtime_bytes(communicators)
    return {"stage": stage, "total": allocated + fragmentation + fixed, "states": states,
            "activations_per_microbatch": act.per_microbatch, "activations": act_held, "logits": logits_held,
            "buffers": states.buffers, "optimizer_step": opt_temp, "fragmentation": fragmentation, "runtime": fixed,
            "train_phase_peak": train_phase >= step_phase, "microbatches_in_flight": flight,
            "gradients_held": grads_held}


def stage_peak(model: ModelSpec, training: Training, layout: Layout, stage: int,
               corrections: Corrections = NONE) -> StagePeak:
    """Everything one stage's peak is made of."""
    return _make_peak(**_stage_parts(model, training, layout, stage, corrections))


def worst_stage(model: ModelSpec, training: Training, layout: Layout, corrections: Corrections = NONE) -> StagePeak:
    """The most loaded pipeline stage (model/pipeline.py says which can be). The planner's hot path:
    the pieces are cached, and only the winner becomes a StagePeak."""
    worst: dict[str, Any] | None = None
    for stage in peak_stages(model, layout.pp, layout.virtual_stages):
        parts = _stage_parts(model, training, layout, stage, corrections)
        if worst is None or parts["total"] > worst["total"]:
            worst = parts
    assert worst is not None
    return _make_peak(**worst)


def memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout,
           corrections: Corrections = NONE) -> MemoryBreakdown:
    """Memory of the most loaded rank; every byte count is per GPU."""
    corr = corrections.on(hw.gpu.id)
    worst = worst_stage(model, training, layout, corr)
    total = worst.total
    extra = 0.0
    if corr.memory != 1.0:  # a correction fitted on the user's own measured runs
        extra = (corr.memory - 1.0) * total
        total += extra
    capacity = hw.gpu.usable_memory_bytes
    # offloaded state lives in the node's CPU memory, shared by the node's GPUs
    per_node = worst.states.cpu_offload * min(hw.gpus, hw.gpus_per_node)
    host_ok = hw.host_memory_bytes is None or per_node <= hw.host_memory_bytes
    return MemoryBreakdown(peak=worst, total=total, capacity=capacity, calibration=extra,
                           cpu_offload_per_node=per_node, host_memory=hw.host_memory_bytes,
                           fits=total <= capacity * (1 - training.headroom) and host_ok,
                           headroom_share=training.headroom)
