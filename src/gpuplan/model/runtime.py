"""Step time: compute of the slowest pipeline stage, exposed communication, pipeline bubble,
optimizer step — one function per concern, assembled by ``step_time``.

Compute per layer is model/compute.py. Communication (comm.py) per micro-batch: tensor/sequence
parallel (2 all-reduce-equivalents per layer forward and 2 backward, exposed unless async TP),
context parallel ring exchange (overlapped with attention), expert all-to-all (exposed),
pipeline send/recv; per step: data-parallel gradient reduction (and ZeRO parameter gathers)
overlapped with compute as in PyTorch DDP / FSDP, exposed only beyond the compute that hides it;
ZeRO-3 gathers go per block (FSDP), per submodule (DeepSpeed) or per tensor and blocking
(DeepSpeed of 2021, never hidden), each call paying the ring latency. The bubble is model/pipeline.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_comm import overlaps_pp_comm, sp_layout_copies
from gpuplan.catalog.frameworks import converts_every_block_linear, fp8_recipe_of
from gpuplan.model.act_parts import activation_parts, offloaded
from gpuplan.model.comm import (
    Topology,
    all_gather_s,
    all_reduce_s,
    reduce_scatter_s,
    send_recv_s,
    topology,
)
from gpuplan.model.compute import Device, attention_s, device, fp8_tp_gather, layer_time, matmul_s, sp_layout_copies_s
from gpuplan.model.dp_comm import StageCompute, dp_comm, trainable
from gpuplan.model.ep_comm import ep_comm, ep_hidden, ep_interference
from gpuplan.model.kept import activation_flags, amp_of
from gpuplan.model.muon import adapter_ns_flops_per_param, muon_split
from gpuplan.model.params import RankParams, rank_params
from gpuplan.model.pipeline import bubble_s, micro_batches, peak_stages, pipeline_comm_s
from gpuplan.model.software import software_of
from gpuplan.spec import Hardware, Layout, ModelSpec, Training
from gpuplan.spec.corrections import NONE, Corrections
from gpuplan.spec.job import has_reference, per_step

# ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): the CPU Adam update and PCIe transfers.
PCIE_HOST_BYTES_PER_S = 25e9   # achievable host<->device PCIe 4/5 x16 copy rate (estimate)
CPU_ADAM_PARAMS_PER_S = 2e9    # DeepSpeed CPU-Adam on a multi-core host per GPU share (estimate)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTime:
    """Seconds per optimizer step and its breakdown; ``to_json`` gives the contract's keys."""

    step_s: float
    compute_s: float
    comm_exposed_s: float
    bubble_s: float
    optimizer_s: float
    microbatches: int
    recompute_s: float
    interference_s: float
    comm_detail: dict[str, float]  # tp, tp_exposed, cp, ep, pp, pp_exposed, dp_total, dp_exposed (s per step)
    fp8_layers: bool = False  # precision fp8: the blocks' linears run fp8 (False: bf16, where fp8 does not pay)
    scan_s: float = 0.0  # of compute_s, the recurrent mixers' scans: a borrowed kernel rate (widens the interval)


# entries per memo table before it is emptied: the plan over every catalogue GPU type to 16,384 GPUs times ~66k
# pipelines (39 types); a table emptied inside one plan times them all again (2.2 s where 0.9 s with a warm table)
_STAGES_MAX = 1 << 18


@lru_cache(maxsize=1)
def _memo() -> tuple[dict[tuple, StageCompute], dict[tuple, PipelinePart]]:
    """The step model's memo tables (``_stage_compute`` and ``_pipeline`` by the values they read; the
    planner asks ~10^5 times). Their keys hold no constant, so they live behind an lru_cache:
    ``catalog.constants.override`` (the fitting scripts) clears it and new values reach the model —
    memo dicts at module level kept the first values scored for good."""
    return {}, {}


def _stage_compute(m: ModelSpec, tr: Training, lay: Layout, dev: Device, dev16: Device | None, tokens: float,
                   corrections: Corrections, n_mb: int = 1) -> StageCompute:
    """The slowest of the stages that can be slowest (model/pipeline.py), one micro-batch; cached by
    what it reads: the layout's tp, ep, whether the experts fold (``Layout.folded_etp``: dp × cp decides it), whether
    async TP splits the matmuls (``tp_overlap``), sequence parallelism, recompute, pp and virtual stages (not dp
    itself, ZeRO or the schedule), and the micro-batch count only where an fp8 weight cast is spread over it; whether
    the run is PyTorch AMP (ZeRO-0 on its stacks: model/amp.py) and then whether it accumulates gradients."""
    amp = amp_of(tr, lay)
    key = (m, tr, lay.tp, lay.ep, lay.folded_etp, lay.tp_overlap, lay.sequence_parallel, lay.recompute_mode,
           lay.recompute_every, lay.pp, lay.virtual_stages, dev, dev16, tokens, corrections.compute,
           n_mb if dev16 is not None else 0, amp, amp and n_mb > 1)
    stages = _memo()[0]
    hit = stages.get(key)
    if hit is None:
        if len(stages) >= _STAGES_MAX:
            stages.clear()
        hit = stages[key] = _stage_compute_of(m, tr, lay, dev, dev16, tokens, corrections, n_mb)
    return hit


def _stage_compute_of(m: ModelSpec, tr: Training, lay: Layout, dev: Device, dev16: Device | None, tokens: float,
                      corrections: Corrections, n_mb: int) -> StageCompute:
    # one block of each kind (dense, MoE, a hybrid's mixers: ModelSpec.kinds) sets its time
    times = [layer_time(m, lg, tokens, tr.seq_len, lay, tr, dev, dev16, n_mb) for lg in m.kinds]
    targets = tr.lora_targets if tr.method != "full" else None
    # the LM head stays in bf16 under fp8 (frameworks.json fp8_recipe.high_precision: torchtitan's
    # filter_fqns 'output', Megatron-Core's fp8 only inside the transformer blocks)
    head_mm = matmul_s(tokens, m.vocab / lay.tp, m.hidden, dev16 or dev)
    loss_bytes = tokens * m.vocab / lay.tp * software_of(tr, m).loss_per_logit
    best: StageCompute | None = None
    share = 1.0 / lay.recompute_every  # recompute full of every k-th block only
    for stage in peak_stages(m, lay.pp, lay.virtual_stages):
        rp = rank_params(m, lay.tp, lay.ep, lay.pp, lay.virtual_stages, stage, targets, tr.lora_rank, lay.folded_etp)
        f = b = r = mm = scan = ad = 0.0
        for lt, n in zip(times, rp.kind_layers, strict=True):
            if n:
                f, b, r, mm = f + n * lt.fwd, b + n * lt.bwd, r + n * lt.recompute * share, mm + n * lt.mm
                scan, ad = scan + n * lt.scan, ad + n * lt.adapters
        if stage == lay.pp - 1:  # the LM head (frozen under LoRA/QLoRA: no weight gradient)
            f += head_mm + loss_bytes / 2 / dev.bw
            b += (2 if tr.method == "full" else 1) * head_mm + loss_bytes / 2 / dev.bw
        if has_reference(tr):  # DPO's reference model: a forward over the same sequences under no_grad (TRL's
            f = 2 * f - ad  # _compute_loss) — the policy's, less the adapters it runs without (PEFT's disable_adapters)
        if best is None or f + b + r > best.total:
            best = StageCompute(fwd=f, bwd=b, recompute=r, mm_fwd=mm, params=rp, scan=scan)
    assert best is not None
    c = corrections.compute
    if c != 1.0:  # a correction fitted on the user's own measured runs
        best = StageCompute(fwd=best.fwd / c, bwd=best.bwd / c, recompute=best.recompute / c,
                            mm_fwd=best.mm_fwd / c, params=best.params, scan=best.scan / c)
    return best


def _tp_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, tokens: float,
             topo: Topology, fp8_layers: bool, dev: Device) -> tuple[float, float]:
    """(all, exposed) tensor-parallel collective seconds per micro-batch, with the layout copies of the
    framework's sequence-parallel collectives (``compute.sp_layout_copies_s``)."""
    if lay.tp == 1:
        return 0.0, 0.0
    act_bytes = tokens * m.hidden * 2
    passes = 2 + lay.recompute_share  # forward, backward (+ recomputed forward)
    gathered = act_bytes
    if fp8_layers and fp8_tp_gather(tr.framework, fp8_recipe_of(tr), lay.tp, lay.sequence_parallel):
        # the all-gathers (block inputs forward, output gradients backward) carry fp8, 1 B per
        # element; the reduce-scatters stay bf16 (frameworks.json fp8_recipe.tp_all_gather)
        gathered = act_bytes / 2
    if lay.sequence_parallel:  # a reduce-scatter and an all-gather: rings (NVLS speeds all-reduces only)
        per_pass = all_gather_s(gathered, lay.tp, 1, topo) + reduce_scatter_s(act_bytes, lay.tp, 1, topo)
    else:
        per_pass = all_reduce_s(act_bytes, lay.tp, 1, topo)
    # folded experts (Layout.expert_tp 1) run no tp collective, unless a shared expert (split over tp) runs beside
    unsplit = sc.params.moe_layers if lay.folded_etp is not None and not m.shared_ffn else 0
    # experts split over their tensor ranks (etp = tp, sequence parallel): the router reads the local tokens, and the
    # tokens the all-to-all brought are all-gathered over the expert-tensor ranks and their outputs reduce-scattered
    # back — top_k copies of each token (Megatron-Core token_dispatcher.py, MoEAlltoAllTokenDispatcher: permute,
    # all-to-all over ep, all-gather over etp; the reverse), not the block's plain sequence-parallel pair
    routed = sc.params.moe_layers if lay.folded_etp is None and lay.expert_tp > 1 and lay.sequence_parallel else 0
    if lay.sequence_parallel and not lay.tp_overlap and sp_layout_copies(tr.framework):
        per_pass += sp_layout_copies_s(act_bytes, gathered, lay.micro_batch, dev)
    tp_s = (sc.params.sublayers - unsplit - routed) * passes * per_pass
    if routed:
        k = m.top_k
        expert_pass = all_gather_s(gathered * k, lay.tp, 1, topo) + reduce_scatter_s(act_bytes * k, lay.tp, 1, topo)
        tp_s += routed * passes * (expert_pass + (per_pass if m.shared_ffn else 0.0))
    if not lay.tp_overlap or not tp_s:
        return tp_s, tp_s
    # async TP (PyTorch, torchtitan) / Megatron --tp-comm-overlap: each all-gather / reduce-
    # scatter is split into tp steps that run under the partial matmuls that need them (Wang
    # et al. 2023, 'Overlap Communication with Dependent Computation via Decomposition',
    # ASPLOS): the first step of each stays exposed, the rest hides behind the weight matmuls
    # of forward, backward (twice the forward's) and a recomputed forward
    window = sc.mm_fwd * (1 + (2 if tr.method == "full" else 1) + lay.recompute_share)
    return tp_s, tp_s / lay.tp + max(0.0, tp_s * (lay.tp - 1) / lay.tp - window)


def _cp_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, tokens: float, dev: Device,
             topo: Topology) -> float:
    """Exposed context-parallel ring exchange of K/V per micro-batch (hidden under attention)."""
    if lay.cp == 1:
        return 0.0
    kv_bytes = tokens * 2 * max(m.n_kv_heads / lay.tp, 1) * m.head_dim * 2
    ring = (lay.cp - 1) * send_recv_s(kv_bytes, lay.tp * lay.cp > topo.domain, topo)
    att_f, att_b = attention_s(m, tokens, tr.seq_len, lay.tp, tr.dropout, dev,
                               software_of(tr, m).fused_softmax)
    return sc.params.attention_layers * (max(0.0, ring - att_f) + max(0.0, 2 * ring - att_b))


def _optimizer_s(m: ModelSpec, tr: Training, lay: Layout, rp: RankParams, dev: Device) -> float:
    """The optimizer step: at HBM bandwidth on the GPU, or over PCIe and on the host CPU when offloaded; Muon
    adds its Newton–Schulz GEMMs (model/muon.py)."""
    t_dense, t_expert = trainable(tr, rp)
    dp_n = lay.dp * lay.cp
    edp_n = max(1, lay.expert_dp)
    dense = t_dense / (dp_n if lay.zero >= 1 else 1)
    expert = t_expert / (edp_n if lay.zero >= 1 else 1)
    local = dense + expert
    ns = _newton_schulz_s(m, tr, dense, expert, dev)  # offloaded too: timed at the GPU's rate (noted)
    if lay.offload == "none":
        return local * constant("optimizer_bytes_per_param") / dev.bw + ns
    # grads down and weights up over PCIe, the update on the host CPU
    return local * (4 + 2) / PCIE_HOST_BYTES_PER_S + local / CPU_ADAM_PARAMS_PER_S + ns


def step_time(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections = NONE,
              allow_bf16: bool = True) -> StepTime:
    """Seconds per optimizer step and its breakdown, for the slowest pipeline stage. Under fp8 the
    blocks' linear layers run the fp8 recipe; a framework that runs every one of them in fp8
    (frameworks.json ``fp8_recipe.scope``: torchtitan, Megatron-Core) does so even where that is
    slower; otherwise (``allow_bf16``) the step runs them in bf16 where fp8 does not pay, as
    Transformer Engine users leave layers out of ``fp8_autocast`` — ``fp8_layers`` says which."""
    tr = per_step(tr)  # the caches key on the step's fields only (spec/job.py)
    st = _step_time(m, hw, tr, lay, corrections, fp8_layers=tr.precision == "fp8")
    if allow_bf16 and tr.precision == "fp8" and not converts_every_block_linear(tr.framework):
        st16 = _step_time(m, hw, bf16_run(tr), lay, corrections, fp8_layers=False)
        if st16.step_s < st.step_s:
            return st16
    return st


def step_floor(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections = NONE) -> float:
    """A lower bound on ``step_time(...).step_s`` (with or without ``allow_bf16``): the step without its
    data-parallel collectives and their interference — the pipeline's compute and exposed per-micro-batch
    collectives, its bubble, the optimizer step. ``_step_time`` adds the missing non-negative terms inside
    the same sums, so the bound holds in floating point exactly. The planner times the layouts of a GPU
    count in the order of their floor and stops once the floor is above the best step found."""
    tr = per_step(tr)
    if tr.precision != "fp8":
        return _pipeline(m, hw, tr, lay, corrections, False).floor
    floor = _pipeline(m, hw, tr, lay, corrections, True).floor
    if not converts_every_block_linear(tr.framework):  # the bf16 linears ``step_time`` may fall back to
        floor = min(floor, _pipeline(m, hw, bf16_run(tr), lay, corrections, False).floor)
    return floor


def bf16_run(tr: Training) -> Training:
    """The bf16 mixed-precision run an fp8 run falls back to where fp8 does not pay (its memory and time)."""
    return replace(tr, precision="bf16", fp8_recipe=None)


FLOOR_SLACK = 1e-12  # relative, for safety: the floor is below the step by construction


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelinePart:
    """What a step's time owes to its pipeline, whatever the data-parallel sharding: the slowest stage's
    compute and its tensor/context/expert/pipeline collectives per micro-batch, the bubble, the optimizer."""

    sc: StageCompute
    n_mb: int
    dev: Device
    topo: Topology
    tp_s: float
    tp_exposed: float
    cp_s: float
    ep_s: float
    ep_exposed: float
    pp_s: float
    pp_exposed: float
    bubble: float
    opt_s: float

    @property
    def per_mb_comm(self) -> float:
        return self.tp_exposed + self.ep_exposed + self.cp_s + self.pp_exposed

    @property
    def floor(self) -> float:
        return self.n_mb * self.sc.total + self.n_mb * self.per_mb_comm + self.bubble + self.opt_s


def _pipeline(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
              fp8_layers: bool) -> PipelinePart:
    """``PipelinePart`` of a layout, cached by what it reads: not the ZeRO stage (only whether the
    optimizer state is sharded), nor the hybrid-shard group, nor how ZeRO-3 gathers; the experts' tensor ranks (etp
    places the expert-parallel group and sizes its tensor-parallel exchange) it does — given, or derived from the
    degrees in the key (Layout.expert_tp)."""
    key = (m, tr, hw.gpu, hw.gpus, hw.gpus_per_node, hw.scale_up, hw.scale_out, hw.power_limit_w, lay.dp, lay.tp,
           lay.pp, lay.cp, lay.ep, lay.etp, lay.micro_batch, lay.recompute_mode, lay.recompute_every,
           lay.sequence_parallel,
           lay.pp_schedule, lay.virtual_stages, lay.offload, lay.tp_overlap, lay.ep_overlap, lay.zero >= 1,
           corrections.compute, corrections.gpu, fp8_layers)
    parts = _memo()[1]
    hit = parts.get(key)
    if hit is None:
        if len(parts) >= _STAGES_MAX:
            parts.clear()
        hit = parts[key] = _pipeline_of(m, hw, tr, lay, corrections, fp8_layers)
    return hit


def _pipeline_of(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
                 fp8_layers: bool) -> PipelinePart:
    dev, dev16, tokens, n_mb = _rates(hw, tr, lay, fp8_layers)
    topo = topology(hw)
    sc = _stage_compute(m, tr, lay, dev, dev16 if fp8_layers else None, tokens, corrections.on(hw.gpu.id), n_mb)
    tp_s, tp_exposed = _tp_comm(m, tr, lay, sc, tokens, topo, fp8_layers, dev)
    cp_s = _cp_comm(m, tr, lay, sc, tokens, dev, topo)
    ep_s, ep_exposed = ep_comm(m, tr, lay, sc, tokens, topo, n_mb)
    pp_s = pipeline_comm_s(m, hw, lay, tokens, topo)
    pp_exposed = _pp_exposed(tr, lay, pp_s, sc.total)
    per_mb_comm = tp_exposed + ep_exposed + cp_s + pp_exposed
    return PipelinePart(sc=sc, n_mb=n_mb, dev=dev, topo=topo, tp_s=tp_s, tp_exposed=tp_exposed, cp_s=cp_s, ep_s=ep_s,
                        ep_exposed=ep_exposed, pp_s=pp_s, pp_exposed=pp_exposed,
                        # the send/recv is counted once, in the exposed communication
                        bubble=bubble_s(lay, sc.total + per_mb_comm - pp_exposed),
                        opt_s=_optimizer_s(m, tr, lay, sc.params, dev))


def _pp_exposed(tr: Training, lay: Layout, pp_s: float, compute_s: float) -> float:
    """Pipeline send/recv left exposed per micro-batch. DualPipe hides it under the paired forward/backward chunk
    (arXiv:2412.19437, Sec. 3.2.1); an interleaved schedule that posts each chunk's isend/irecv before the next
    chunk's compute (catalog/frameworks.json ``pp_comm_overlap``: Megatron-Core) leaves only what exceeds that
    compute."""
    if lay.pp_schedule == "dualpipe":
        return 0.0
    if lay.pp_schedule == "interleaved" and overlaps_pp_comm(tr.framework):
        return max(0.0, pp_s - compute_s)
    return pp_s


def _activation_offload_s(m: ModelSpec, tr: Training, lay: Layout, compute_s: float) -> float:
    """Activation offloading, per micro-batch: its saved activations cross PCIe to the host in forward and back in
    backward on a side stream (torchtune OffloadActivations use_streams; Megatron-Core's offload context), two
    blocks' staying on the GPU (model/memory.py) — exposed where the copies outlast the micro-batch's compute."""
    if not offloaded(tr, lay.recompute):
        return 0.0
    per_mb, _, _ = activation_parts(m, tr, lay.tp, lay.ep, lay.pp, lay.virtual_stages, 0, lay.cp, lay.sequence_parallel,
                                    lay.micro_batch, lay.recompute_mode, *activation_flags(tr, lay))
    moved = per_mb * max(0.0, 1 - 2 / m.n_layers)
    return max(0.0, 2 * moved / PCIE_HOST_BYTES_PER_S - compute_s)


def _newton_schulz_s(m: ModelSpec, tr: Training, dense: float, expert: float, dev: Device) -> float:
    """Muon's orthogonalisation of the rank's share of the matrices, as bf16 GEMMs at the GPU's best GEMM share."""
    if tr.optimizer != "muon":
        return 0.0
    if tr.method != "full":
        flops = (dense + expert) * adapter_ns_flops_per_param(tr.lora_rank, m.hidden)
    else:
        _, per_dense, per_expert = muon_split(m)
        flops = dense * per_dense + expert * per_expert
    return flops / (dev.peak16 * dev.e_gemm)


def _rates(hw: Hardware, tr: Training, lay: Layout, fp8_layers: bool) -> tuple[Device, Device | None, float, int]:
    """(the linears' device, the bf16 device under fp8, local tokens of one micro-batch, micro-batches)."""
    dev16 = device(hw, tr, "bf16") if tr.precision == "fp8" else None
    dev = device(hw, tr) if fp8_layers or dev16 is None else dev16
    return dev, dev16, lay.micro_batch * tr.seq_len / lay.cp, micro_batches(tr, lay)


def _step_time(m: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
               fp8_layers: bool) -> StepTime:
    p = _pipeline(m, hw, tr, lay, corrections, fp8_layers)
    sc, n_mb = p.sc, p.n_mb
    dp = dp_comm(m, tr, lay, sc, n_mb, p.topo)
    # Overlapped collectives are not free: NCCL kernels take SMs and HBM bandwidth from the
    # compute they hide behind (interference, see constants.json "comm_interference").
    share = constant("comm_interference")
    interference = share * (dp.hidden + n_mb * (p.tp_s - p.tp_exposed + p.pp_s - p.pp_exposed)) \
        + ep_interference(hw, lay, share) * n_mb * (p.ep_s - p.ep_exposed)
    compute_s = n_mb * sc.total + interference
    offload_s = _activation_offload_s(m, tr, lay, sc.total)
    comm_exposed = n_mb * (p.per_mb_comm + offload_s) + dp.exposed
    return StepTime(
        step_s=compute_s + comm_exposed + p.bubble + p.opt_s, compute_s=compute_s, comm_exposed_s=comm_exposed,
        bubble_s=p.bubble, optimizer_s=p.opt_s, microbatches=n_mb, recompute_s=n_mb * sc.recompute,
        interference_s=interference,
        comm_detail={"tp": n_mb * p.tp_s, "tp_exposed": n_mb * p.tp_exposed, "cp": n_mb * p.cp_s,
                     "ep": n_mb * p.ep_s, **({"ep_exposed": n_mb * p.ep_exposed} if ep_hidden(lay) else {}),
                     "pp": n_mb * p.pp_s, "pp_exposed": n_mb * p.pp_exposed,
                     "dp_total": dp.total, "dp_exposed": dp.exposed,
                     **({"activation_offload": n_mb * offload_s} if offloaded(tr, lay.recompute) else {})},
        fp8_layers=fp8_layers,
        # the scans' share of the stage's compute, and of the pipeline bubble that compute sets
        scan_s=sc.scan / sc.total * (n_mb * sc.total + p.bubble) if sc.scan else 0.0)
