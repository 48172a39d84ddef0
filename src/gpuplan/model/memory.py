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

import math
from functools import lru_cache

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_memory import (
    fsdp_root_holds_embedding,
    keeps_half_grads,
    pp_grads_in_fp32,
)
from gpuplan.catalog.frameworks import keeps_unsharded_under_pp
from gpuplan.catalog.intervals import spread
from gpuplan.model.act_parts import stage_activations
from gpuplan.model.allocator import fragile, fragmentation_spread, reserve_shares
from gpuplan.model.backward_peak import cached_state_bytes, embedding_backward, half_grads_backward, one_gpu_backward
from gpuplan.model.breakdown import MemoryBreakdown, MemoryVerdict, ModelStates, StagePeak
from gpuplan.model.graphs import cuda_graph_allowance
from gpuplan.model.kept import activation_flags, amp_fp32
from gpuplan.model.params import largest_param, rank_params
from gpuplan.model.pipeline import flight_of, micro_batch_count, peak_stages, stage_io_bytes
from gpuplan.model.quantized import frozen_base
from gpuplan.model.states import adapter_state_bytes, optimizer_step_temp_bytes, transient_buffers
from gpuplan.spec import Hardware, Layout, ModelSpec, Training
from gpuplan.spec._fast import maker
from gpuplan.spec.corrections import NONE, Corrections
from gpuplan.spec.job import has_reference, per_step

_make_peak = maker(StagePeak)
# ``_stage_base``: states, step temporaries, that phase's total, the backwards that shape the peak, the activation flags
StageBase = tuple[ModelStates, float, float, bool, bool, bool, tuple[bool, bool, bool]]


@lru_cache(maxsize=256)
def adapter_states(training: Training, model: ModelSpec, full_model: float) -> float:
    """Optimizer-state bytes per adapter parameter (model/states.py ``adapter_state_bytes``)."""
    return adapter_state_bytes(training.optimizer, training.precision, model, training.lora_targets,
                               training.lora_rank, full_model)


@lru_cache(maxsize=65536)
def model_states(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                 zero: int, nd: int, nd_e: int, offload: str, dp_group: int, cp: int = 1,
                 etp: int | None = None) -> ModelStates:
    """One rank's model states (the module doc's sharding rules); ``etp``: Layout.folded_etp."""
    method = training.method
    sb = cached_state_bytes(training.precision, training.optimizer, model, training.grad_dtype == "fp32",
                            amp_fp32(training, zero, tp * pp * ep * cp, offload))
    targets = training.lora_targets if method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank, etp)

    def shard(dense: float, expert: float, on: bool) -> float:
        return dense / nd + expert / nd_e if on else dense + expert

    z, kept = zero, zero >= 3 and pp > 1 and keeps_unsharded_under_pp(training.framework)
    if method == "full":
        # kept: the stage's parameters stay gathered and its gradients accumulate unsharded over the micro-batches,
        # reduce-scattered at the last backward (ZeRO-1-like for both), in fp32 where FSDP accumulates them in its fp32
        # reduce dtype (pp_grads_in_fp32); DPO's frozen reference model in 16 bits, sharded where the policy is (TRL
        # prepares it as a ZeRO-3 / FSDP module), else whole
        weights = shard(rp.dense, rp.expert, z >= 3 and not kept) * sb.weight \
            + (shard(rp.dense, rp.expert, z >= 3) * 2 if has_reference(training) else 0.0)
        grad_bytes = 4 if kept and pp_grads_in_fp32(training.framework) else sb.grad
        grads = shard(rp.dense, rp.expert, z >= 2 and not kept) * grad_bytes
        if training.optimizer_in_backward:  # one parameter's gradient at a time, freed by its own step
            grads = min(grads, largest_param(model, tp, ep) / (nd if z >= 2 else 1) * grad_bytes)
        opt_local = shard(rp.dense, rp.expert, z >= 1)
        optimizer, moments = opt_local * sb.optimizer, opt_local * sb.states
    else:
        # LoRA/QLoRA: frozen base in 16-bit (QLoRA: block linears in NF4), adapters trainable. PEFT keeps adapters in
        # fp32 under mixed precision (autocast_adapter_dtype=True), no separate master copy: 4 B weight + 4 B grad +
        # moments; DPO's reference model is the base with the adapters off (TRL's use_adapter(model, None)): no copy
        base_bytes, replicated = frozen_base(training, rp, sb, z)
        mixed = training.precision in ("bf16", "fp16", "fp8")
        ad_w = 4 if mixed else sb.weight
        ad_g = 4 if mixed else sb.grad
        base_share = base_bytes / (nd if z >= 3 and not kept else 1) + replicated
        weights = base_share + shard(rp.adapters_dense, rp.adapters_expert, z >= 3 and not kept) * ad_w
        grads = shard(rp.adapters_dense, rp.adapters_expert, z >= 2 and not kept) * ad_g
        opt_local = shard(rp.adapters_dense, rp.adapters_expert, z >= 1)
        optimizer = moments = opt_local * adapter_states(training, model, sb.states)  # adapters: their own master

    if stage == 0 and model.frozen_params:  # a vision tower loaded with the model, frozen (spec ModelSpec)
        weights += model.frozen_params * (4 if training.precision == "fp32" else 2) / (nd if z >= 3 else 1)
    # paged: bitsandbytes' paged optimizers keep their moments in CUDA unified memory (functional.py get_paged:
    # cudaMallocManaged), outside PyTorch's caching allocator, evicted to the host when the GPU runs short — never an
    # out-of-memory, never in max_memory_allocated; an fp32 master beside 16-bit weights stays in ordinary memory
    cpu = moments if training.optimizer_impl == "paged" and offload == "none" else 0.0
    optimizer -= cpu
    if offload in ("optimizer", "params"):
        cpu += optimizer
        optimizer = 0.0
    if offload == "params":
        cpu += weights + grads
        weights = grads = 0.0

    gathered = (z >= 3 and not kept) or offload == "params"
    head = _gathered_head(model, training, tp, pp, stage) if gathered else (0.0, 0.0)
    buffers = transient_buffers(training, rp, sb, gathered, dp_group > 1 and z == 0, dp_group, grads, head)
    trainable = (rp.dense + rp.expert) if method == "full" else rp.adapters_dense + rp.adapters_expert
    return ModelStates(weights, grads, optimizer, cpu, opt_local, buffers, rp.dense + rp.expert, trainable)


def _gathered_head(model: ModelSpec, training: Training, tp: int, pp: int, stage: int) -> tuple[float, float]:
    """(the LM head's unit, the head) in elements, gathered whole on the last stage: the unit holds an untied embedding
    beside the head where the framework's FSDP root holds both (``fsdp_root_holds_embedding``: one stage, no
    pipeline); the head's gradient is the one made where the backward starts."""
    if stage != pp - 1:
        return 0.0, 0.0
    head = model.vocab * model.hidden / tp
    both = fsdp_root_holds_embedding(training.framework) and not model.tied_embeddings and pp == 1
    return (2 if both else 1) * head, head


@lru_cache(maxsize=8)
def _runtime_bytes(communicators: int) -> float:
    """CUDA context, cuBLAS workspace and one NCCL communicator's buffers per process group."""
    return constant("cuda_context_bytes") + constant("cublas_workspace_bytes") \
        + constant("nccl_bytes_per_communicator") * communicators


def _communicators(lay: Layout) -> int:
    """One NCCL communicator per process group the rank belongs to."""
    return (lay.dp * lay.cp > 1) + (lay.tp > 1) + (lay.pp > 1) + (lay.cp > 1) + (lay.ep > 1)


def _peak_bytes(allocated: float, communicators: int, churn: float = 0.0) -> tuple[float, float, float]:
    """(total, fragmentation, fixed runtime bytes) of a stage that allocates ``allocated`` bytes at its peak, the
    allocator reserving a share of it more and, on fragmented native segments, of the ``churn`` bytes allocated and
    freed every step (model/allocator.py ``reserve_shares``): monotone in both, so lower bounds on them give a lower
    bound on the total (``peak_floor``: no churn)."""
    share, excess = reserve_shares()
    fragmentation = share * allocated + excess * churn
    fixed = _runtime_bytes(communicators)
    return allocated + fragmentation + fixed, fragmentation, fixed


def _stage_parts(model: ModelSpec, training: Training, layout: Layout, stage: int,
                 corrections: Corrections) -> tuple:
    """The pieces of one stage's peak, as a tuple (``_peak_from`` names them): total, states, activations
    (per micro-batch, held, logits), in flight, gradients / activations / logits held at the peak, the
    optimizer step's temporaries, fragmentation, fixed runtime bytes, whether forward/backward peaks."""
    nd, nd_e, n_mb, communicators, temp = _layout_terms(training, layout)
    base = _stage_base(model, training, layout, stage, nd, nd_e, temp)
    return _stage_at(model, training, layout, stage, corrections, base, communicators, layout.micro_batch, n_mb,
                     fragile(training, layout.recompute, layout.offload))


def _layout_terms(training: Training, lay: Layout) -> tuple[int, int, int, int, float]:
    """What every stage of a layout shares: the ZeRO shard groups (dense, expert), micro-batches per
    step, NCCL communicators, and the optimizer step's temporaries per updated parameter."""
    nd = (lay.zero_group or lay.dp * lay.cp) if lay.zero else 1
    nd_e = max(1, min(nd, lay.expert_dp)) if lay.zero else 1
    temp = 0.0 if lay.offload != "none" else \
        optimizer_step_temp_bytes(training.optimizer, training.precision, training.optimizer_impl)
    return (nd, nd_e, micro_batch_count(training.global_batch, lay.dp, lay.micro_batch, lay.pp),
            _communicators(lay), temp)


def _stage_base(model: ModelSpec, training: Training, lay: Layout, stage: int, nd: int, nd_e: int,
                temp: float) -> StageBase:
    """What a stage's peak holds whatever the micro-batch: its model states (DualPipe's mirrored), the
    optimizer step's temporaries and that phase's total, and which backwards can shape the peak: a 16-bit
    gradient per parameter beside the fp32 buffer; one GPU, whose gradients appear as activations free
    (when one micro-batch makes the step); the first stage's embedding gradient; what the layout's activations read
    beside their shapes — PyTorch AMP, QLoRA's fp32 preparation, 16-bit adapters (model/kept.py activation_flags)."""
    states = model_states(model, training, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, lay.zero, nd, nd_e,
                          lay.offload, lay.dp * lay.cp, lay.cp, lay.folded_etp)
    if lay.pp_schedule == "dualpipe":
        states = states.mirrored()
    opt_temp = states.optimizer_params * temp
    if training.optimizer_in_backward:  # one parameter steps at a time (no pipeline): the largest one's temporaries
        opt_temp = min(opt_temp, temp * largest_param(model, lay.tp, lay.ep))
    full = training.method == "full"
    half = full and training.grad_dtype == "fp32" and keeps_half_grads(training.framework)
    one_gpu = lay.zero == 0 and lay.dp * lay.cp * lay.tp * lay.pp == 1
    embedding = stage == 0 and lay.zero < 3 and full
    return states, opt_temp, states.total + opt_temp, half, one_gpu, embedding, activation_flags(training, lay)


def _stage_at(model: ModelSpec, training: Training, lay: Layout, stage: int, corrections: Corrections,
              base: StageBase, communicators: int, mb: int,
              n_mb: int, irregular: bool) -> tuple:
    """One stage's peak parts at micro-batch ``mb`` (``n_mb`` per step) on ``base`` (``_stage_base``); ``irregular``:
    its steps fragment the allocator's native segments (model/allocator.py ``fragile``)."""
    states, opt_temp, step_phase, half, one_gpu, embedding, (amp, upcast, adapters16) = base
    flight = flight_of(lay.pp, lay.pp_schedule, lay.virtual_stages, stage, n_mb)
    act = stage_activations(model, training, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, lay.cp,
                            lay.sequence_parallel, mb, lay.recompute_mode, flight, corrections.activations,
                            every=lay.recompute_every, amp=amp, upcast=upcast, adapters16=adapters16)
    grads_held, act_held, logits_held = states.gradients, act.held, act.logits
    if half:
        grads_held, act_held, logits_held = half_grads_backward(states, act, flight)
    elif one_gpu and n_mb == 1:
        grads_held, act_held, logits_held = one_gpu_backward(model, training, states, act)
    elif embedding:
        grads_held, act_held, logits_held = embedding_backward(model, training, lay, states, act, flight)
    io = stage_io_bytes(model, training, lay, stage, mb, n_mb, flight)  # a pipeline's stage buffers (torchtitan)
    train_phase = states.weights + states.optimizer + grads_held + act_held + logits_held + states.buffers + io
    allocated = max(train_phase, step_phase)  # what lives from the first step to the last churns no segment
    churn = allocated - states.weights - states.optimizer if irregular else 0.0
    total, fragmentation, fixed = _peak_bytes(allocated, communicators, churn)
    return (total, states, act, flight, grads_held, act_held, logits_held, opt_temp, fragmentation, fixed,
            train_phase >= step_phase, states.buffers + io)


def _peak_from(stage: int, parts: tuple) -> StagePeak:
    total, states, act, flight, grads_held, act_held, logits_held, opt_temp, frag, fixed, train, buffers = parts
    return _make_peak(stage=stage, total=total, states=states, activations_per_microbatch=act.per_microbatch,
                      activations=act_held, logits=logits_held, buffers=buffers, optimizer_step=opt_temp,
                      fragmentation=frag, runtime=fixed, train_phase_peak=train, microbatches_in_flight=flight,
                      gradients_held=grads_held)


def stage_peak(model: ModelSpec, training: Training, layout: Layout, stage: int,
               corrections: Corrections = NONE) -> StagePeak:
    """Everything one stage's peak is made of."""
    return _peak_from(stage, _stage_parts(model, training, layout, stage, corrections))


def worst_stage(model: ModelSpec, training: Training, layout: Layout, corrections: Corrections = NONE) -> StagePeak:
    """The most loaded pipeline stage (model/pipeline.py says which can be)."""
    stage, parts = _worst(model, training, layout, (layout.micro_batch,), corrections)[0]
    return _peak_from(stage, parts)


def peak_bytes(model: ModelSpec, training: Training, layout: Layout, corrections: Corrections = NONE
               ) -> tuple[float, float]:
    """(total, offloaded bytes) of the most loaded stage — ``worst_stage`` without building its breakdown:
    what the planner's fit decision (``verdict``) reads."""
    return peaks_bytes(model, training, layout, (layout.micro_batch,), corrections)[0]


def peaks_bytes(model: ModelSpec, training: Training, layout: Layout, micro_batches: tuple[int, ...],
                corrections: Corrections = NONE) -> list[tuple[float, float]]:
    """``peak_bytes`` of ``layout`` at each of ``micro_batches`` instead of its own: each stage's states
    and fixed terms are computed once for them all (the planner sizes a family of layouts at once)."""
    return [(p[0], p[1].cpu_offload) for _, p in _worst(model, training, layout, micro_batches, corrections)]


def _worst(model: ModelSpec, training: Training, layout: Layout, micro_batches: tuple[int, ...],
           corrections: Corrections) -> list[tuple[int, tuple]]:
    """The most loaded stage and its parts, at each micro-batch."""
    bases = stage_bases(model, training, layout)
    return [worst_at(model, layout, bases, mb, corrections) for mb in micro_batches]


def stage_bases(model: ModelSpec, training: Training, layout: Layout) -> tuple[Training, int, tuple[tuple[int, tuple],
                                                                                                     ...]]:
    """What the peaks of ``layout`` at any micro-batch share (``worst_at``): the step's training fields, the NCCL
    communicators and each stage's ``_stage_base`` — none reads the micro-batch or the recompute, so the planner keeps
    them per family and recompute mode and sizes the micro-batches it asks about one by one."""
    training = per_step(training)  # the caches key on the step's fields only (spec/job.py)
    nd, nd_e, _, communicators, temp = _layout_terms(training, layout)
    return training, communicators, tuple((stage, _stage_base(model, training, layout, stage, nd, nd_e, temp))
                                          for stage in peak_stages(model, layout.pp, layout.virtual_stages))


def worst_at(model: ModelSpec, layout: Layout, bases: tuple[Training, int, tuple[tuple[int, tuple], ...]], mb: int,
             corrections: Corrections = NONE) -> tuple[int, tuple]:
    """The most loaded stage of ``layout`` at micro-batch ``mb`` and its parts (the first of equal stages), on
    ``stage_bases(model, training, layout)``."""
    training, communicators, stages = bases
    count = micro_batch_count(training.global_batch, layout.dp, mb, layout.pp)
    irregular = fragile(training, layout.recompute, layout.offload)
    worst: tuple[int, tuple] | None = None
    for stage, base in stages:
        parts = _stage_at(model, training, layout, stage, corrections, base, communicators, mb, count, irregular)
        if worst is None or parts[0] > worst[1][0]:
            worst = (stage, parts)
    assert worst is not None  # every layout has a first stage
    return worst


def verdict(peak_total: float, cpu_offload: float, hw: Hardware, training: Training,
            corrections: Corrections = NONE, model_parallel: bool = False, graphs: float = 0.0, *,
            irregular: bool) -> MemoryVerdict:
    """Whether a stage peak of ``peak_total`` bytes fits one GPU of ``hw`` — the one decision
    ``evaluate`` and the planner both take: the peak with the user's fitted memory correction, at the
    upper end of its 80 % interval (catalog/intervals.py: what runs like it measured above their
    prediction), against the capacity less the headroom kept free; the offloaded state in the node's host
    memory (shared by the node's GPUs). ``graphs``: CUDA graphs' allowance (``cuda_graph_allowance``), beyond
    the interval's upper end; ``irregular``: the step fragments native segments (model/allocator.py ``fragile``)."""
    corr = corrections.on(hw.gpu.id)
    total = peak_total
    extra = 0.0
    if corr.memory != 1.0:  # a correction fitted on the user's own measured runs
        extra = (corr.memory - 1.0) * total
        total += extra
    per_node = cpu_offload * min(hw.gpus, hw.gpus_per_node)
    host_ok = hw.host_memory_bytes is None or per_node <= hw.host_memory_bytes
    low, high = peak_factors(hw, training, model_parallel, irregular=irregular)
    return MemoryVerdict(total=total, calibration=extra, usable=usable_bytes(hw, training),
                         cpu_offload_per_node=per_node, host_ok=host_ok, low=total * low, high=total * high,
                         graphs=graphs)


def peak_factors(hw: Hardware, training: Training, model_parallel: bool = False, *, irregular: bool
                 ) -> tuple[float, float]:
    """(low, high): the 80 % interval of a peak as factors on it (1, 1 where the corpus gives none);
    ``model_parallel``: the layout splits the model (tp or pp > 1); ``irregular``: the step fragments native
    segments: the measured spread of its fragmentation joins the corpus's in quadrature (model/allocator.py)."""
    s = spread("memory", training.framework, hw.gpu.architecture, hw.gpus, hw.gpus_per_node, model_parallel)
    if s is None:
        return 1.0, 1.0
    if not irregular:
        return 1.0 + s.p10, 1.0 + s.p90
    below, above = fragmentation_spread(True)
    return 1.0 - math.hypot(min(s.p10, 0.0), below), 1.0 + math.hypot(max(s.p90, 0.0), above)


def usable_bytes(hw: Hardware, training: Training) -> float:
    """A GPU's memory less the headroom kept free: what a peak must not exceed."""
    return hw.gpu.usable_memory_bytes * (1 - training.headroom)


def plain_limit(hw: Hardware, training: Training, corrections: Corrections, offloaded: bool,
                model_parallel: bool = False, graphs: float = 0.0, *, irregular: bool
                ) -> tuple[float, float] | None:
    """Where ``verdict`` reduces to ``peak_total * factor <= limit`` — no fitted memory correction on this GPU,
    and no offloaded state or no host memory to exceed — (factor, limit): the interval's upper factor and the
    usable bytes less CUDA graphs' allowance ``graphs`` (``MemoryVerdict.fits`` compares the same way); else None
    (ask ``verdict``)."""
    if corrections.on(hw.gpu.id).memory != 1.0 or (offloaded and hw.host_memory_bytes is not None):
        return None
    return peak_factors(hw, training, model_parallel, irregular=irregular)[1], usable_bytes(hw, training) - graphs


def memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout,
           corrections: Corrections = NONE) -> MemoryBreakdown:
    """Memory of the most loaded rank; every byte count is per GPU."""
    corr = corrections.on(hw.gpu.id)
    worst = worst_stage(model, training, layout, corr)
    v = verdict(worst.total, worst.states.cpu_offload, hw, training, corr, layout.tp > 1 or layout.pp > 1,
                cuda_graph_allowance(model, training, layout.pp),
                irregular=fragile(training, layout.recompute, layout.offload))
    return MemoryBreakdown(peak=worst, total=v.total, capacity=hw.gpu.usable_memory_bytes, calibration=v.calibration,
                           cpu_offload_per_node=v.cpu_offload_per_node, host_memory=hw.host_memory_bytes,
                           fits=v.fits, headroom_share=training.headroom, low=v.low, high=v.upper, graphs=v.graphs)


def peak_floor(model: ModelSpec, training: Training, layout: Layout, shards: tuple[tuple[int, int | None], ...],
               vstages: tuple[int, ...]) -> float:
    """A lower bound on ``worst_stage(...).total`` over every layout that differs from ``layout`` only in
    micro-batch, recompute, schedule, its virtual stages among ``vstages`` and its (zero, zero_group)
    among ``shards``: the planner rejects such a family whole when this does not fit. A stage's peak
    allocates at least its model states (the optimizer-step phase holds them all; DualPipe doubles
    them), plus the fragmentation and the fixed runtime bytes of a step that churns nothing — ``_peak_bytes``."""
    training, lay = per_step(training), layout
    dp, cp, tp, pp, ep = lay.dp, lay.cp, lay.tp, lay.pp, lay.ep
    least = float("inf")
    for v in vstages:
        stages = peak_stages(model, pp, v)
        for zero, group in shards:
            nd = (group or dp * cp) if zero else 1
            nd_e = max(1, min(nd, lay.expert_dp)) if zero else 1
            held = max(model_states(model, training, tp, ep, pp, v, s, zero, nd, nd_e, lay.offload, dp * cp, cp,
                                    lay.folded_etp).total for s in stages)
            least = min(least, held)
    return _peak_bytes(least, _communicators(lay))[0]
