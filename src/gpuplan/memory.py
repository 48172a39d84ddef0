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

from gpuplan.activations import (
    ACT_BYTES,
    FP8_LINEAR_INPUT_BYTES,
    ActShape,
    layer_bytes,
    logits_bytes,
    recompute_working_set,
)
from gpuplan.modelspec import ModelSpec, Weight
from gpuplan.spec import Hardware, Layout, Training
from gpuplan.states import constant, optimizer_step_temp_bytes, state_bytes

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
    if training.global_batch is None:
        return max(layout.pp, 1) if layout.pp > 1 else 1
    return training.global_batch // (layout.dp * layout.micro_batch)


def in_flight(layout: Layout, stage: int, m: int) -> float:
    """Micro-batches whose activations a stage holds at its peak.
    1F1B (Narayanan et al. 2021, PipeDream-flush) and zero-bubble ZB-H1 (Qi et al. 2023,
    arXiv:2401.10241, same peak as 1F1B): min(p − stage, m). Interleaved with v chunks
    (Korthikanti et al. 2022, Sec. 4.2.3: first stage holds L·(1 + (p−1)/(p·v)) layers'
    worth): p − stage + (p − 1)/v. GPipe: all m."""
    p = layout.pp
    if p == 1:
        return 1
    if layout.pp_schedule == "gpipe":
        return m
    if layout.pp_schedule == "interleaved":
        return min(p - stage + (p - 1) / layout.virtual_stages, m)
    return min(p - stage, m)


def communicators(layout: Layout) -> int:
    return sum(1 for n in (layout.dp * layout.cp, layout.tp, layout.pp, layout.cp, layout.ep) if n > 1)


@lru_cache(maxsize=1024)
def _state_bytes(precision: str, optimizer: str, model: ModelSpec):  # noqa: ANN202
    return state_bytes(precision, optimizer, model)


@lru_cache(maxsize=1)
def _consts() -> tuple[float, float, float, float, float, float]:
    return (constant("nf4_bytes_per_param"), constant("ddp_bucket_bytes"), constant("allocator_fragmentation"),
            constant("cuda_context_bytes"), constant("cublas_workspace_bytes"),
            constant("nccl_bytes_per_communicator"))


def stage_memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout, stage: int) -> dict:
    method = training.method
    sb = _state_bytes(training.precision, training.optimizer, model)
    nf4, ddp_bucket, frag_share, ctx, cublas, nccl = _consts()
    targets = training.lora_targets if method != "full" else None
    rp = rank_params(model, layout.tp, layout.ep, layout.pp, layout.virtual_stages, stage, targets,
                     training.lora_rank)
    nd = layout.shard_group if layout.zero else 1
    nd_e = max(1, min(nd, layout.dp * layout.cp // layout.ep)) if layout.zero else 1

    def shard(dense: float, expert: float, on: bool) -> float:
        return dense / nd + expert / nd_e if on else dense + expert

    z = layout.zero
    if method == "full":
        weights = shard(rp.dense, rp.expert, z >= 3) * sb.weight
        trainable_local = shard(rp.dense, rp.expert, z >= 2)
        grads = trainable_local * sb.grad
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
    if layout.offload in ("optimizer", "params"):
        cpu += optimizer
        optimizer = 0.0
    if layout.offload == "params":
        cpu += weights + grads
        weights = grads = 0.0

    # ---- activations ------------------------------------------------------------------------
    elem = ACT_BYTES[training.precision]
    x = ActShape(s=training.seq_len // layout.cp, b=layout.micro_batch, t=layout.tp,
                 sp=layout.sequence_parallel, dropout=training.dropout > 0,
                 flash=training.attention == "flash", elem=elem,
                 linear_in=FP8_LINEAR_INPUT_BYTES if training.precision == "fp8" else elem)
    m = micro_batches(training, layout)
    flight = in_flight(layout, stage, m)
    per_mb = (rp.dense_layers * layer_bytes(model, False, x, layout.recompute)
              + rp.moe_layers * layer_bytes(model, True, x, layout.recompute))
    activations = per_mb * flight
    if layout.recompute in ("full", "selective-op") and (rp.dense_layers or rp.moe_layers):
        activations += recompute_working_set(model, rp.moe_layers > 0, x)
    logits = 0.0
    if stage == layout.pp - 1:
        rep = 1 / x.t if x.sp else 1.0
        activations += 2 * elem * x.s * x.b * model.hidden * rep  # final norm input and LM-head input
        logits = logits_bytes(model, x.s, x.b, x.t)

    # ---- transient buffers ------------------------------------------------------------------
    w_elem = 4 if training.precision == "fp32" else 2
    buffers = 0.0
    if z >= 3 or layout.offload == "params":
        # FSDP: the layer being computed and the prefetched next one, unsharded, plus the
        # unsharded gradient of one layer before its reduce-scatter.
        buffers += rp.largest_layer * (2 * w_elem + (sb.grad if method == "full" else 0))
    elif layout.dp * layout.cp > 1:
        buffers += 2 * ddp_bucket
    if method == "qlora":
        buffers += rp.largest_matrix * 2  # one weight dequantised to bf16 at a time
    opt_temp = 0.0 if layout.offload != "none" else \
        opt_local * optimizer_step_temp_bytes(training.optimizer, training.precision, training.optimizer_impl)

    states_total = weights + grads + optimizer
    train_phase = states_total + activations + logits + buffers
    step_phase = states_total + opt_temp
    allocated = max(train_phase, step_phase)
    fragmentation = frag_share * allocated
    fixed = ctx + cublas + nccl * communicators(layout)
    total = allocated + fragmentation + fixed
    peak_phase = "forward/backward" if train_phase >= step_phase else "optimizer step"
    detail = {
        "logits": logits if peak_phase == "forward/backward" else 0.0,
        "comm_buffers": buffers if peak_phase == "forward/backward" else 0.0,
        "optimizer_step": opt_temp if peak_phase == "optimizer step" else 0.0,
        "runtime": fixed,
        "fragmentation": fragmentation,
    }
    if peak_phase == "optimizer step":
        act_at_peak = 0.0
    else:
        act_at_peak = activations
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
        "params_on_rank": rp.dense + rp.expert,
        "trainable_params_on_rank": (rp.dense + rp.expert) if method == "full"
        else rp.adapters_dense + rp.adapters_expert,
    }


def memory(model: ModelSpec, hw: Hardware, training: Training, layout: Layout) -> dict:
    """Memory of the most loaded rank; every byte count is per GPU."""
    worst = None
    p = layout.pp
    # With identical layers and an even split, stage 0 (embedding, p micro-batches in flight)
    # dominates every middle stage; only the last (LM head, logits) can exceed it. Uneven splits
    # and mixed layer types (DeepSeek's dense-then-MoE) need the neighbours too.
    uniform = len(model.layers) == 1 and model.n_layers % (p * layout.virtual_stages) == 0
    stages = sorted({0, p - 1}) if uniform else (range(p) if p <= 4 else sorted({0, 1, p - 2, p - 1}))
    for stage in stages:
        mem = stage_memory(model, hw, training, layout, stage)
        if worst is None or mem["total"] > worst["total"]:
            worst = mem
    assert worst is not None
    worst["capacity"] = hw.gpu.usable_memory_bytes
    worst["fits"] = worst["total"] <= worst["capacity"]
    worst["headroom"] = worst["capacity"] - worst["total"]
    return worst
