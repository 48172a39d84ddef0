"""The expert all-to-all of a MoE layer: how many exchanges a step makes, which kernels make them, what is hidden.

Two dispatchers are timed (``training.moe_dispatcher``):

* ``alltoall`` — an NCCL all-to-all of the permuted tokens (Megatron-Core's alltoall dispatcher, torchtitan's and
  DeepSpeed-MoE's expert all-to-all): every (token, expert) pair is one row sent (``comm.all_to_all_s``);
* ``deepep`` — DeepEP's normal kernels (Megatron-Core's flex dispatcher with ``moe_enable_deepep``; DeepSeek-V3's
  own, Sec. 3.2.2): a token crosses the network once per remote node it reaches and is forwarded over NVLink inside
  the node (``comm.deepep_s``), grounded on DeepEP's published bandwidths (validation/components.json).

Unless given, a DualPipe run (DeepSeek-V3's schedule) exchanges through DeepSeek's kernels, every other run through
the all-to-all. The payload is the 16-bit hidden state (Megatron-Core's flex dispatcher hands DeepEP the hidden
states: megatron/core/transformer/moe/fused_a2a.py ``FusedDispatch.forward(x, ...)``), except DeepSeek-V3's FP8
recipe (a DualPipe fp8 run): the activations before the MoE up-projection and the activation gradients before the
down-projection are dispatched in FP8 with one fp32 scale per 128 values (Sec. 3.3.2-3.3.3); combines stay BF16.
DeepEP's rates are its V1 kernels' (what Megatron-Core's flex dispatcher calls, deep_ep.Buffer); V2 (README: 90 GB/s
logical at EP 8x2 on SM90 with 12 SMs) forwards over NVLink faster and is not modelled.
"""

from __future__ import annotations

from gpuplan.model.comm import Topology, all_to_all_s, deepep_s, full_peer_domain, placement, touched
from gpuplan.model.dp_comm import StageCompute
from gpuplan.spec import Hardware, Layout, ModelSpec, Training
from gpuplan.spec.job import moe_dispatcher_of

# Expert exchanges per MoE layer and pass: dispatch and combine, in the forward and again in the
# backward (Lepikhin et al. 2020, GShard; Megatron-Core token dispatcher); a recomputed forward
# dispatches and combines once more.
A2A_PER_MOE_LAYER = 4
A2A_PER_RECOMPUTED_MOE_LAYER = 2
# DeepSeek-V3's all-to-all kernels under DualPipe run on 20 SMs (arXiv:2412.19437, Sec. 3.2.2: "we ... partition 20 SMs
# into 10 communication channels"; "only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink")
DUALPIPE_A2A_SMS = 20
# FP8 dispatch: one byte per value and an fp32 scale per 1x128 tile (DeepSeek-V3 Sec. 3.3.2; DeepEP's tests count
# (1 + 4/128) bytes per value: tests/test_internode.py fp8_factor)
FP8_TOKEN_BYTES_PER_VALUE = 1 + 4 / 128


def unsupported_dispatcher(m: ModelSpec, hw: Hardware, tr: Training) -> str | None:
    """Why ``hw`` cannot run the expert exchange ``tr`` names for MoE model ``m``, or None. DeepEP's kernels need
    NVIDIA Ampere or later and peer access over NVLink between every pair of a node's GPUs (deepseek-ai/DeepEP
    docs/legacy.md, Requirements: 'Ampere (SM80), Hopper (SM90) GPUs'; 'NVLink with full directed CUDA peer access
    between every pair of participating intranode GPUs', a partial topology rejected) — not PCIe nodes nor NVLink-
    bridged pairs; AMD's Infinity Fabric nodes run ROCm ports of the same exchange."""
    if tr.moe_dispatcher != "deepep" or not m.n_experts:
        return None
    g = hw.gpu
    if g.vendor == "nvidia" and g.architecture in ("volta", "turing"):
        return (f"training.moe_dispatcher deepep: DeepEP's kernels run on NVIDIA Ampere and later, not {g.id} "
                f"({g.architecture}): use alltoall")
    if not full_peer_domain(hw):
        return (f"training.moe_dispatcher deepep: DeepEP needs NVLink between every pair of a node's GPUs; "
                f"{g.id} nodes connect them over {hw.scale_up.name}: use alltoall")
    return None


def ep_hidden(lay: Layout) -> bool:
    return lay.ep_overlap or lay.pp_schedule == "dualpipe"


def ep_interference(hw: Hardware, lay: Layout, share: float) -> float:
    """Compute seconds lost per second of hidden expert all-to-all: the fitted ``comm_interference``; under DualPipe,
    whose kernels hold a stated number of SMs, at most what losing those SMs costs the compute running beside them
    (the other SMs do its work: k / (SMs − k))."""
    sms = hw.gpu.sm_count
    if lay.pp_schedule != "dualpipe" or not sms or sms <= DUALPIPE_A2A_SMS:
        return share
    return min(share, DUALPIPE_A2A_SMS / (sms - DUALPIPE_A2A_SMS))


def ep_comm(m: ModelSpec, tr: Training, lay: Layout, sc: StageCompute, tokens: float, topo: Topology,
            n_mb: int) -> tuple[float, float]:
    """(all, exposed) expert exchange seconds per micro-batch. Exposed, unless ``ep_overlap``: then
    one micro-batch's dispatch and combine run under another's compute (DeepSeek-V3's DualPipe,
    Liu et al. 2024, arXiv:2412.19437, Sec. 3.2.1: forward and backward chunks paired so that
    all-to-all hides under computation; Megatron-Core ``--overlap-moe-expert-parallel-comm``) and
    only what exceeds the stage's compute stays exposed — where the step has another micro-batch
    (``n_mb`` ≥ 2) to run beside it."""
    if lay.ep == 1 or not sc.params.moe_layers:
        return 0.0, 0.0
    # the expert grid is laid out apart from the dense one, expert-tensor ranks first, then expert-parallel, no context
    # parallelism (Megatron-Core parallel_state.py: RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1,
    # order="tp-cp-ep-dp-pp")): ep ranks sit etp apart — tp where ep divides dp × cp, 1 folded (Layout.expert_tp)
    stride = lay.expert_tp
    local = tokens / lay.tp
    # a recomputed forward's exchanges: full recomputation, or the moe module recomputed (Megatron-Core)
    recomputed = A2A_PER_RECOMPUTED_MOE_LAYER * (1.0 if "moe" in lay.recompute_modules and lay.recompute == "selective"
                                                 else lay.recompute_share)
    if moe_dispatcher_of(tr, lay.pp_schedule) == "deepep":
        per_layer = _deepep_layer_s(m, tr, lay, local, stride, topo, recomputed)
    else:
        a2a = all_to_all_s(local * m.top_k * m.hidden * 2, lay.ep, stride, topo)
        per_layer = (A2A_PER_MOE_LAYER + recomputed) * a2a
    total = sc.params.moe_layers * per_layer
    if not ep_hidden(lay) or n_mb < 2:
        return total, total
    return total, max(0.0, total - sc.total)


def _deepep_layer_s(m: ModelSpec, tr: Training, lay: Layout, tokens: float, stride: int, topo: Topology,
                    recomputed: float) -> float:
    """One MoE layer's DeepEP exchanges: the forward's dispatch and combine, the backward's (the dispatch's backward
    is a combine, the combine's a dispatch), and a recomputed forward's pair."""
    _, doms = placement(lay.ep, stride, topo.domain)
    ranks = touched(m.n_experts, m.top_k, lay.ep, m.route_groups, m.route_topk_groups)
    nodes = touched(m.n_experts, m.top_k, doms, m.route_groups, m.route_topk_groups)
    fp8 = tr.precision == "fp8" and lay.pp_schedule == "dualpipe"
    dispatch_bytes = m.hidden * (FP8_TOKEN_BYTES_PER_VALUE if fp8 else 2)

    def call(token_bytes: float) -> float:
        return deepep_s(tokens, token_bytes, ranks, nodes, lay.ep, stride, topo)

    dispatch, combine = call(dispatch_bytes), call(m.hidden * 2)
    return 2 * (dispatch + combine) + recomputed / 2 * (dispatch + combine)
