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
the expert-data-parallel group dp×cp/ep (Megatron-Core MoE).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.constants import constant
from gpuplan.model.activations import (
    ACT_BYTES,
    FP8_LINEAR_INPUT_BYTES,
    ActShape,
    layer_bytes,
    logits_bytes,
    recompute_working_set,
)
from gpuplan.model.states import optimizer_step_temp_bytes, state_bytes
from gpuplan.spec import Hardware, Layout, Training
from gpuplan.spec.model import ModelSpec, Weight

TP_SPLIT = {"attention", "mlp", "expert", "shared_expert", "embedding", "head"}
LORA_GROUPS = {"attention", "mlp", "expert", "shared_expert"}


def _local(w: Weight, model: ModelSpec, tp: int, ep: int) -> float:
    """Elements of ``w`` on one rank after tensor and expert parallelism."""
    n = w.numel
    if w.group == "expert":
        n /= ep
    if w.group in TP_SPLIT:
        leaf = w.name.rsplit(".", 1)[-1]
        if leaf in ("k_proj", "v_proj") and model.n_kv_heads < tp:
            n /= model.n_kv_heads  # one K/V head per rank, replicated tp/kv times
        else:
            n /= tp
    return n


def _is_lora_target(w: Weight, targets: tuple[str, ...]) -> bool:
    if not w.is_matrix or w.group not in LORA_GROUPS:
        return False
    leaf = w.name.rsplit(".", 1)[-1]
    return len(targets) == 7 or leaf in targets  # all seven = PEFT "all-linear"


@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters one rank of one pipeline stage holds (before ZeRO sharding)."""

    dense: float          # non-expert parameters
    expert: float         # routed-expert parameters
    quantizable: float    # linear weights of the blocks (QLoRA stores these in NF4)
    adapters_dense: float
    adapters_expert: float
    largest_layer: float  # the biggest layer on the rank (ZeRO-3 gathers one at a time)
    largest_matrix: float
    moe_layers: int
    dense_layers: int


def chunk_sizes(n_layers: int, chunks: int) -> list[int]:
    """Layers per pipeline chunk. Even when ``chunks`` divides the layers; otherwise the
    remainder goes to the middle chunks so the first and last (which also hold the embedding
    and the LM head) get fewer — what Llama 3 did for 126 layers on 16 stages (Dubey et al.
    2024, Sec. 3.3.2) and Megatron's ``decoder_first/last_pipeline_num_layers`` allow."""
    base, extra = divmod(n_layers, chunks)
    sizes = [base] * chunks
    start = 1 if extra <= chunks - 2 else 0
    for i in range(start, start + extra):
        sizes[i] += 1
    return sizes


@lru_cache(maxsize=4096)
def rank_params(model: ModelSpec, tp: int, ep: int, pp: int, vstages: int, stage: int,
                lora_targets: tuple[str, ...] | None, lora_rank: int) -> RankParams:
    owner = [c % pp for c, size in enumerate(chunk_sizes(model.n_layers, pp * vstages)) for _ in range(size)]
    dense = expert = quant = ad_d = ad_e = largest = big_matrix = 0.0
    moe_layers = dense_layers = 0

    def add(weights: tuple[Weight, ...], times: int, in_block: bool) -> float:
        nonlocal dense, expert, quant, ad_d, ad_e, big_matrix
        layer_total = 0.0
        for w in weights:
            n = _local(w, model, tp, ep)
            layer_total += n
            if w.group == "expert":
                expert += n * times
            else:
                dense += n * times
            if in_block and w.is_matrix and w.group in LORA_GROUPS:
                quant += n * times
                big_matrix = max(big_matrix, n / w.count)
            if lora_targets is not None and _is_lora_target(w, lora_targets):
                out_f, in_f = w.shape
                adapters = lora_rank * (out_f + in_f) * w.count / (ep if w.group == "expert" else 1) / tp
                if w.group == "expert":
                    ad_e += adapters * times
                else:
                    ad_d += adapters * times
        return layer_total

    index = 0
    for lg in model.layers:
        mine = 0
        for _ in range(lg.count):
            if owner[index] == stage:
                mine += 1
            index += 1
        if mine:
            largest = max(largest, add(lg.weights, mine, True))
            if lg.moe:
                moe_layers += mine
            else:
                dense_layers += mine
    if stage == 0:
        add(tuple(w for w in model.embedding), 1, False)
    if stage == pp - 1:
        add(model.head, 1, False)
        if model.tied_embeddings and pp > 1:  # the last stage keeps its own copy of the tied matrix
            add(tuple(w for w in model.embedding if w.group == "embedding"), 1, False)
    # An exact count from safetensors headers (or a given {params: N}) rescales the shapes' count.
    k = model.params / model.params_formula if model.params_formula else 1.0
    return RankParams(dense * k, expert * k, quant * k, ad_d, ad_e, largest * k, big_matrix * k,
                      moe_layers, dense_layers)


def micro_batches(training: Training, layout: Layout) -> int:
    """Micro-batches per optimizer step per pipeline (gradient accumulation steps)."""
    return micro_batch_count(training.global_batch, layout.dp, layout.micro_batch, layout.pp)


def micro_batch_count(global_batch: int | None, dp: int, mb: int, pp: int) -> int:
    """``micro_batches`` from plain numbers; with no global batch, enough to fill the pipeline."""
    if global_batch is None:
        return pp if pp > 1 else 1
    return global_batch // (dp * mb)


def flight_of(p: int, schedule: str, v: int, stage: int, m: int) -> float:
    """Micro-batches whose activations stage ``stage`` of ``p`` holds at its peak (``m`` per step).
    1F1B (Narayanan et al. 2021, PipeDream-flush) and zero-bubble ZB-H1 (Qi et al. 2023,
    arXiv:2401.10241, same peak as 1F1B): min(p − stage, m). Interleaved with v chunks
    (Korthikanti et al. 2022, Sec. 4.2.3: first stage holds L·(1 + (p−1)/(p·v)) layers'
    worth): p − stage + (p − 1)/v. GPipe: all m."""
    if p == 1:
        return 1
    if schedule == "gpipe":
        return m
    if schedule == "interleaved":
        return min(p - stage + (p - 1) / v, m)
    return min(p - stage, m)


@lru_cache(maxsize=1024)
def _state_bytes(precision: str, optimizer: str, model: ModelSpec):  # noqa: ANN202
    return state_bytes(precision, optimizer, model)


@lru_cache(maxsize=1)
def _consts() -> tuple[float, float, float, float, float, float]:
    return (constant("nf4_bytes_per_param"), constant("ddp_bucket_bytes"), constant("allocator_fragmentation"),
            constant("cuda_context_bytes"), constant("cublas_workspace_bytes"),
            constant("nccl_bytes_per_communicator"))


@lru_cache(maxsize=65536)
def model_states(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                 zero: int, nd: int, nd_e: int, offload: str, dp_group: int) -> tuple[float, ...]:
    """(weights, gradients, optimizer, cpu_offload, local optimizer params, zero buffers, params on rank,
    trainable params on rank) of one rank — see the module doc for the sharding rules."""
    method = training.method
    sb = _state_bytes(training.precision, training.optimizer, model)
    nf4, ddp_bucket = _consts()[:2]
    targets = training.lora_targets if method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank)

    def shard(dense: float, expert: float, on: bool) -> float:
        return dense / nd + expert / nd_e if on else dense + expert

    z = zero
    if method == "full":
        weights = shard(rp.dense, rp.expert, z >= 3) * sb.weight
        grads = shard(rp.dense, rp.expert, z >= 2) * sb.grad
        opt_local = shard(rp.dense, rp.expert, z >= 1)
        optimizer = opt_local * sb.optimizer
    else:
        # LoRA/QLoRA: frozen base in 16-bit (QLoRA: block linears in NF4), adapters trainable.
        # PEFT keeps adapters in fp32 under mixed precision (autocast_adapter_dtype=True),
        # so they need no separate master copy: 4 B weight + 4 B grad + moments.
        base = rp.dense + rp.expert
        if method == "qlora":
            base_bytes = rp.quantizable * nf4 + (base - rp.quantizable) * 2
        else:
            base_bytes = base * sb.weight
        mixed = training.precision in ("bf16", "fp16", "fp8")
        ad_w = 4 if mixed else sb.weight
        ad_g = 4 if mixed else sb.grad
        base_share = base_bytes / (nd if z >= 3 else 1)
        weights = base_share + shard(rp.adapters_dense, rp.adapters_expert, z >= 3) * ad_w
        grads = shard(rp.adapters_dense, rp.adapters_expert, z >= 2) * ad_g
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
    if z >= 3 or offload == "params":
        # FSDP: the layer being computed and the prefetched next one, unsharded, plus the
        # unsharded gradient of one layer before its reduce-scatter.
        buffers += rp.largest_layer * (2 * w_elem + (sb.grad if method == "full" else 0))
    elif dp_group > 1:
        buffers += 2 * ddp_bucket
    if method == "qlora":
        buffers += rp.largest_matrix * 2  # one weight dequantised to bf16 at a time
    trainable = (rp.dense + rp.expert) if method == "full" else rp.adapters_dense + rp.adapters_expert
    return weights, grads, optimizer, cpu, opt_local, buffers, rp.dense + rp.expert, trainable


def stage_activations(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                      cp: int, sp: bool, mb: int, recompute: str, flight: float) -> tuple[float, float, float]:
    """(activations per micro-batch, activations held at the peak, logits) of one rank."""
    per_mb, extra, logits = activation_parts(model, training, tp, ep, pp, vstages, stage, cp, sp, mb, recompute)
    if training.activation_factor != 1.0:  # a correction fitted by `gpuplan trace --calibrate`
        per_mb, extra = per_mb * training.activation_factor, extra * training.activation_factor
    return per_mb, per_mb * flight + extra, logits


@lru_cache(maxsize=65536)
def activation_parts(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                     cp: int, sp: bool, mb: int, recompute: str) -> tuple[float, float, float]:
    """(activations per micro-batch in flight, activations held once — the recompute working set and
    the last stage's LM-head inputs —, logits) of one rank."""
    targets = training.lora_targets if training.method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank)
    elem = ACT_BYTES[training.precision]
    x = ActShape(s=training.seq_len // cp, b=mb, t=tp, sp=sp, dropout=training.dropout > 0,
                 flash=training.attention == "flash", elem=elem,
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
        logits = logits_bytes(model, x.s, x.b, x.t)
    return per_mb, extra, logits


def stage_peak(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
               cp: int, dp: int, sp: bool, mb: int, recompute: str, zero: int, zero_group: int | None,
               offload: str, schedule: str) -> tuple:
    """Everything one stage's peak is made of, from plain numbers (the planner's hot path)."""
    nd = (zero_group or dp * cp) if zero else 1
    nd_e = max(1, min(nd, dp * cp // ep)) if zero else 1
    states = model_states(model, training, tp, ep, pp, vstages, stage, zero, nd, nd_e, offload, dp * cp)
    weights, grads, optimizer, cpu, opt_local, buffers, on_rank, trainable = states
    n_mb = micro_batch_count(training.global_batch, dp, mb, pp)
    flight = flight_of(pp, schedule, vstages, stage, n_mb)
    per_mb, activations, logits = stage_activations(model, training, tp, ep, pp, vstages, stage, cp, sp, mb,
                                                    recompute, flight)
    opt_temp = 0.0 if offload != "none" else \
        opt_local * optimizer_step_temp_bytes(training.optimizer, training.precision, training.optimizer_impl)
    frag_share, ctx, cublas, nccl = _consts()[2:]
    states_total = weights + grads + optimizer
    grads_held, act_held, logits_held = grads, activations, logits
    if zero == 0 and dp * cp * tp * pp == 1 and n_mb == 1:
        # One GPU, one micro-batch per step, gradients set to None after each step (PyTorch's
        # zero_grad default since 2.0): backward frees activations layer by layer while it
        # allocates gradients, so the peak is at its start (activations + loss buffers; then the
        # LM head's gradient beside the activations) or at its end (every gradient; with tied
        # embeddings the embedding's own V×h gradient and its out-of-place sum with the head's
        # beside them) — not the sum. Measured with `gpuplan trace`, allocated peak to the MiB:
        # Llama-3.2-1B (tied) seq 2048 = states without gradients + activations + logits
        # buffers, seq 256/1024 = states + 2 V×h gradients; Llama-3.1-8B (untied) seq 4096 =
        # the start, seq 512 = the optimizer step. Accumulation over micro-batches, data
        # parallelism (DDP/Megatron keep persistent gradient buffers) and pipelines keep the sum.
        full = trainable and training.method == "full"
        head = model.vocab * model.hidden * grads / trainable if full else 0.0
        end = grads + (2 * head if model.tied_embeddings else 0.0)
        if end >= max(activations + logits, activations + head):
            grads_held, act_held, logits_held = end, 0.0, 0.0  # the end: activations are gone
        elif head > logits:
            grads_held, logits_held = head, 0.0
        else:
            grads_held = 0.0
    train_phase = weights + optimizer + grads_held + act_held + logits_held + buffers
    step_phase = states_total + opt_temp
    allocated = max(train_phase, step_phase)
    fragmentation = frag_share * allocated
    communicators = (dp * cp > 1) + (tp > 1) + (pp > 1) + (cp > 1) + (ep > 1)  # one NCCL communicator per group
    fixed = ctx + cublas + nccl * communicators
    total = allocated + fragmentation + fixed
    return (total, states, per_mb, act_held, logits_held, buffers, opt_temp, fragmentation, fixed,
            train_phase >= step_phase, flight, grads_held)


def peak_stages(model: ModelSpec, pp: int, vstages: int) -> list[int]:
    """Stages that can be the most loaded. With identical layers and an even split, stage 0
    (embedding, p micro-batches in flight) dominates every middle stage; only the last (LM head,
    logits) can exceed it. Uneven splits and mixed layer types (DeepSeek's dense-then-MoE) need
    the neighbours too."""
    if len(model.layers) == 1 and model.n_layers % (pp * vstages) == 0:
        return sorted({0, pp - 1})
    return list(range(pp)) if pp <= 4 else sorted({0, 1, pp - 2, pp - 1})


def stage_memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout, stage: int) -> dict:
    (total, states, per_mb, activations, logits, buffers, opt_temp, fragmentation, fixed, train_peak,
     flight, grads_held) = stage_peak(model, training, layout.tp, layout.ep, layout.pp, layout.virtual_stages, stage,
                          layout.cp, layout.dp, layout.sequence_parallel, layout.micro_batch, layout.recompute,
                          layout.zero, layout.zero_group, layout.offload, layout.pp_schedule)
    weights, grads, optimizer, cpu, _opt_local, _buffers, on_rank, trainable = states
    states_total = weights + grads + optimizer
    peak_phase = "forward/backward" if train_peak else "optimizer step"
    detail = {
        "logits": logits if train_peak else 0.0,
        "comm_buffers": buffers if train_peak else 0.0,
        "optimizer_step": opt_temp if not train_peak else 0.0,
        # One GPU, one micro-batch (stage_peak): gradients are listed at full size, but the peak
        # comes before backward has allocated them (negative: the part not held) or at its end
        # with a tied embedding's second gradient and their sum beside them (positive).
        "backward_timing": grads_held - grads if train_peak else 0.0,
        "runtime": fixed,
        "fragmentation": fragmentation,
    }
    act_at_peak = activations if train_peak else 0.0
    return {
        "stage": stage,
        "weights": weights, "gradients": grads, "optimizer": optimizer, "activations": act_at_peak,
        "other": total - states_total - act_at_peak,
        "total": total,
        "detail": detail,
        "peak_phase": peak_phase,
        "activations_per_microbatch": per_mb,
        "microbatches_in_flight": flight,
        "cpu_offload": cpu,
        "params_on_rank": on_rank,
        "trainable_params_on_rank": trainable,
    }


def memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout) -> dict:
    """Memory of the most loaded rank; every byte count is per GPU."""
    worst = None
    for stage in peak_stages(model, layout.pp, layout.virtual_stages):
        mem = stage_memory(model, hw, training, layout, stage)
        if worst is None or mem["total"] > worst["total"]:
            worst = mem
    assert worst is not None
    if hw.memory_factor != 1.0:  # a correction fitted on the user's own measured runs
        extra = (hw.memory_factor - 1.0) * worst["total"]
        worst["total"] += extra
        worst["other"] += extra
        worst["detail"]["calibration"] = extra
    worst["capacity"] = hw.gpu.usable_memory_bytes
    # offloaded state lives in the node's CPU memory, shared by the node's GPUs
    worst["cpu_offload_per_node"] = worst["cpu_offload"] * min(hw.gpus, hw.gpus_per_node)
    worst["host_memory"] = hw.host_memory_bytes
    host_ok = hw.host_memory_bytes is None or worst["cpu_offload_per_node"] <= hw.host_memory_bytes
    worst["fits"] = worst["total"] <= worst["capacity"] and host_ok
    worst["headroom"] = worst["capacity"] - worst["total"]
    return worst
