"""Collective communication cost on a two-tier topology: a scale-up domain, then the network.

A group of ``n`` ranks ``stride`` apart places ``n_local`` members in each scale-up domain (NVLink /
NVSwitch node, NVL72 rack, Infinity Fabric node) and spans ``n_dom`` domains. A collective of B bytes
(nccl-tests' size: the all-reduce buffer, the all-gather output, the reduce-scatter input, the
all-to-all buffer of one rank) takes ``latency + bandwidth term / r(B)``:

* Bandwidth term, per algorithm NCCL/RCCL runs. Ring (Patarasuk & Yuan 2009): every rank moves
  V·B, V = 2(n − 1)/n for an all-reduce and (n − 1)/n for a reduce-scatter or all-gather, at the
  GPU's bus bandwidth: link × efficiency behind a switch; on a full mesh (MI300X Infinity Fabric, one
  64 GB/s link per GPU pair) a group of k members of one node drives its k − 1 links, so a pair has
  one. NVLink SHARP (NVLS: Hopper/Blackwell NVSwitch) all-reduce: each GPU sends its buffer into the
  switch once and takes the reduced result once, B·(1 + 1/n) per direction, at NCCL's nvlsEfficiency
  (src/graph/tuning.cc: Hopper 0.85, Blackwell 0.74): algorithm bandwidth link × efficiency ×
  nvlsEfficiency × n/(n + 1); the faster of ring and NVLS runs, as NCCL's tuner picks (NVLS from 5
  GPUs on H100, NVIDIA/nccl#1455: 258, 265, 270, 273 GB/s for 5 to 8 GPUs). Across domains NCCL's
  ring spans the nodes and enters and leaves each node once per channel, its channels spread over
  the node's NICs: a node's share of the network carries what one GPU's NVLink carries, and the
  ring's NVLink and network steps run at once, so t = max(V·B·(k − 1)/k / bw_up, V·B / (k·bw_out))
  for k members per node (pipelined, not added; ML-Engineering network/README.md, 'Inter-node speed
  depends on intra-node speed': the flat ring lands within 6 % of 4-node P6-B200 measurements). On exactly
  two NVLink SHARP nodes NCCL's default all-reduce is NVLSTree: each node's NICs carry the reduced buffer once
  each way, B instead of the ring's 2(n − 1)/n·B, beside the NVLS reduction inside the node (``_nvls_tree_s``).
  All-to-all: each rank sends (n − 1)/n·B, what goes to other domains over the network.
* r(B), the ramp: NCCL pipelines a collective in chunks over channels whose number and size follow
  the message size (src/enqueue.cc: fewer channels below nChannels·nThreads·threadThreshold bytes,
  smaller NVLS chunks for small messages), so the large-message bandwidth is reached only near
  1 GiB. r(B) is read off the fabric's measured sweep (fabrics.json ``collective_curve``): the rate of
  its bandwidth term at B against the largest message's, interpolated in log-log, non-decreasing and
  never so steep that a larger message takes less time; 1 where a fabric has no sweep. A collective that
  crosses the network ramps as the network's own sweep across two nodes does (a scale-out row's
  ``collective_curve``, or one it borrows), read at the bytes each NIC carries (the sweep's tree put B/8 through
  each of a node's 8 NICs; a pipeline send puts all of its message through one): its chunks reach the NICs' rate
  only near 1 GiB of buffer (half of it near 64 MiB), later than NVLink's.
* Latency: NCCL's ring model (tuning.cc): a base per call plus one hop per step, n − 1 steps for a
  reduce-scatter, all-gather or all-to-all, 2(n − 1) for an all-reduce (or the double binary tree's
  2·((n_local − 1) + ⌈log2 n_dom⌉) hops where fewer; Sanders et al. 2009), steps across domains at
  the network's hop. The hop inside a domain is read off the sweep's smallest message.

For its own collective and group the model returns a scale-up sweep's measured times (a network sweep lends
its ramp only). ``bw_up`` and ``bw_out`` are achievable bus bandwidths per GPU; across nodes, the node's NICs
are shared by its GPUs (one 400G NIC per GPU on AI clusters, one 10 GbE link per node on commodity Ethernet).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.constants import constant, table
from gpuplan.spec import GPU, BusCurve, Fabric, Hardware
from gpuplan.spec.hardware import scale_up_gpus

PCIE5_BYTES_PER_S = 63e9  # PCIe 5.0 x16 per direction (PCI-SIG), for nodes whose NVLink domain is a pair


@dataclass(frozen=True, slots=True)
class Topology:
    domain: int        # GPUs that share the scale-up fabric
    bw_up: float       # achievable bus bytes/s per GPU inside the domain (behind a switch)
    lat_up: float
    bw_out: float      # achievable bytes/s per GPU across domains
    lat_out: float
    ring_base: float = 0.0     # NCCL's latency model: per call, per step inside, per step across
    ring_up: float = 0.0       # (a fabric whose own hop latency is larger keeps its own)
    ring_out: float = 0.0
    mesh_link: float = 0.0     # full mesh: achievable bytes/s of one GPU-to-GPU link (0: a switch)
    nvls: float = 0.0          # NVLink SHARP all-reduce: NCCL's nvlsEfficiency (0: none)
    ramp_log_bytes: tuple[float, ...] = ()  # the ramp r(B): ln B of the measured sizes ...
    ramp_share: tuple[float, ...] = ()      # ... and the share of the large-message bandwidth reached
    out_log_bytes: tuple[float, ...] = ()   # the ramp of a collective that crosses the network (the scale-out
    out_share: tuple[float, ...] = ()       # fabric's measured sweep); none: the scale-up fabric's
    out_nics: float = 1.0                   # the NICs per node the sweep's two-node tree spread a buffer over
    nics_per_gpu: float = 1.0               # this node's NICs per GPU

    def per_nic(self, node_bytes: float, local: int) -> float:
        """Bytes each NIC carries when ``local`` GPUs of a node send ``node_bytes`` out of it over their NICs."""
        return node_bytes / max(1.0, local * self.nics_per_gpu)

    @property
    def hops(self) -> tuple[float, float]:
        """Seconds per collective step inside the domain and across it."""
        return max(self.ring_up, self.lat_up), max(self.ring_out, self.lat_out)

    def group_bw(self, local: int) -> float:
        """Bus bytes/s per GPU of a ring among ``local`` members of one domain: the switch's rate, or
        on a full mesh the ``local`` − 1 links each member drives."""
        return (local - 1) * self.mesh_link if self.mesh_link else self.bw_up

    def share(self, nbytes: float, nic_bytes: float | None = None) -> float:
        """r(B): the share of the large-message bandwidth a collective of ``nbytes`` reaches; the part that crosses the
        network, where the scale-out fabric has a measured sweep, on that sweep's ramp, read at the bytes each NIC
        carries (``nic_bytes``, ``per_nic``): the sweep's two-node tree sent each node's buffer once over its
        ``out_nics`` NICs, so its size B put B/``out_nics`` through each."""
        xs, ys = self.ramp_log_bytes, self.ramp_share
        if nic_bytes is not None and self.out_log_bytes:
            xs, ys, nbytes = self.out_log_bytes, self.out_share, nic_bytes * self.out_nics
        if not xs:
            return 1.0
        x = math.log(max(nbytes, 1.0))
        i = bisect.bisect_left(xs, x)
        if i == 0:
            return ys[0]
        if i == len(xs) or xs[i] == x:
            return ys[min(i, len(xs) - 1)]
        # a power law between the points (straight in log-log): r never falls, nor B/r, where neither does at the points
        x0, x1, r0, r1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return r0 * math.exp(math.log(r1 / r0) * (x - x0) / (x1 - x0))


@dataclass(frozen=True, slots=True)
class CurveProfile:
    """What a fabric's measured sweep says: its large-message efficiency, its small-message hop
    latency and its ramp (``Topology.share``)."""

    efficiency: float
    hop_s: float
    ramp_log_bytes: tuple[float, ...]
    ramp_share: tuple[float, ...]


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw / algbw (doc/PERFORMANCE.md): 2(n − 1)/n for an all-reduce, (n − 1)/n else."""
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def _ideal_s(curve: BusCurve, nbytes: float) -> float:
    """Seconds of the sweep's bandwidth term at efficiency 1 on the fabric it was measured on."""
    n = curve.gpus
    if curve.algorithm == "nvls":
        return nbytes / (curve.link_bytes_per_s * curve.nvls_efficiency * n / (n + 1))
    per_gpu = (n - 1) * curve.mesh_link_bytes_per_s if curve.mesh_link_bytes_per_s else curve.link_bytes_per_s
    return bus_factor(curve.collective, n) * nbytes / per_gpu


@lru_cache(maxsize=64)
def curve_profile(curve: BusCurve, base_s: float) -> CurveProfile:
    """Efficiency = ideal / measured time of the largest message; hop = (smallest message's time −
    the base) / steps; ramp r(B) (``curve_ramp``)."""
    n, times = curve.gpus, _times(curve)
    t_min, t_top = min(times), times[-1]
    steps = 2 * (n - 1) if curve.collective == "all_reduce" else n - 1
    xs, ys = curve_ramp(curve)
    return CurveProfile(efficiency=_ideal_s(curve, curve.sizes[-1]) / t_top, hop_s=max(0.0, (t_min - base_s) / steps),
                        ramp_log_bytes=xs, ramp_share=ys)


def _times(curve: BusCurve) -> list[float]:
    """The sweep's seconds per size (nccl-tests' busbw undone)."""
    factor = bus_factor(curve.collective, curve.gpus)
    return [b * factor / bus for b, bus in zip(curve.sizes, curve.bus_bytes_per_s, strict=True)]


@lru_cache(maxsize=64)
def curve_ramp(curve: BusCurve) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The ramp r(B) of a sweep, (ln B, share): (t_max/B_max) / ((t(B) − t_min)/B), at most 1, made non-decreasing
    (running minimum from the largest message down), then held to at most B'/B times its value at the size B below,
    so that the time it gives, B/r(B), never falls as B grows (``Topology.share`` interpolates in log-log): a sweep's
    noise at small sizes (a larger message timed faster than a smaller one) is no faster collective."""
    times = _times(curve)
    t_min, t_top, b_top = min(times), times[-1], curve.sizes[-1]
    shares, low = [], 1.0
    for b, t in zip(reversed(curve.sizes), reversed(times), strict=True):
        low = min(low, t_top / b_top * b / max(t - t_min, 1e-12))
        shares.append(low)
    xs, ys = tuple(math.log(b) for b in curve.sizes), list(reversed(shares))
    for i in range(1, len(ys)):
        ys[i] = min(ys[i], ys[i - 1] * math.exp(xs[i] - xs[i - 1]))
    return xs, tuple(ys)


def topology(hw: Hardware) -> Topology:
    """The GPU's scale-up domain and the node's network, as per-GPU rates (cached by value)."""
    return _topology(hw.gpu, hw.gpus_per_node, hw.scale_up, hw.scale_out)


@lru_cache(maxsize=256)
def _topology(gpu: GPU, gpus_per_node: int, up: Fabric, out: Fabric | None) -> Topology:
    ring = table("ring_latency_s")
    prof = curve_profile(up.curve, ring["base"]) if up.curve else None
    own = prof is not None and up.curve_scope == "all"
    eff_up = prof.efficiency if own else constant("scale_up_efficiency")  # type: ignore[union-attr]
    hop_up = prof.hop_s if own else ring["scale_up_step"]  # type: ignore[union-attr]
    lat_up = hop_up if own else (up.latency_s or 1e-6)
    domain_gpus = scale_up_gpus(gpu, gpus_per_node, up)
    if domain_gpus < gpus_per_node:  # e.g. H100 NVL bridge pairs: the node talks over PCIe
        bw_up, domain, mesh, nvls = PCIE5_BYTES_PER_S * eff_up, gpus_per_node, 0.0, 0.0
    else:
        bw_up, domain = (up.bytes_per_s_per_gpu or gpu.scale_up_bytes_per_s) * eff_up, domain_gpus
        mesh, nvls = (up.mesh_link_bytes_per_s or 0.0) * eff_up, up.nvls_efficiency or 0.0
    ramp = (prof.ramp_log_bytes, prof.ramp_share) if prof else ((), ())
    common = dict(domain=domain, bw_up=bw_up, lat_up=lat_up, ring_base=ring["base"], ring_up=hop_up,
                  mesh_link=mesh, nvls=nvls, ramp_log_bytes=ramp[0], ramp_share=ramp[1])
    if out is None or not out.link_bytes_per_s:
        return Topology(bw_out=0.0, lat_out=0.0, **common)  # type: ignore[arg-type]
    eff_out = out.efficiency if out.efficiency is not None else constant("scale_out_efficiency")
    nics = min(out.links_per_node or 1, gpus_per_node)
    bw_out = out.link_bytes_per_s * nics / gpus_per_node * eff_out
    out_ramp = curve_ramp(out.curve) if out.curve else ((), ())  # the network's own sweep, where measured
    # a sweep across two nodes: the NICs of its nodes, at most one per GPU (its ranks over two)
    out_nics = min(out.curve.nics or out.curve.gpus / 2, out.curve.gpus / 2) if out.curve else 1.0
    return Topology(bw_out=bw_out, lat_out=out.latency_s or 5e-6, ring_out=ring["scale_out_step"],
                    out_log_bytes=out_ramp[0], out_share=out_ramp[1], out_nics=out_nics,
                    nics_per_gpu=nics / gpus_per_node, **common)  # type: ignore[arg-type]


def full_peer_domain(hw: Hardware) -> bool:
    """Whether every pair of a node's GPUs shares the scale-up fabric (NVLink/NVSwitch, Infinity Fabric): not a node
    whose GPUs talk over PCIe (the catalogue's pcie* fabrics), nor NVLink-bridged pairs in a larger node."""
    return not hw.scale_up.id.startswith("pcie") and \
        scale_up_gpus(hw.gpu, hw.gpus_per_node, hw.scale_up) >= hw.gpus_per_node


def placement(n: int, stride: int, domain: int) -> tuple[int, int]:
    """(members per domain, domains spanned) of a group of ``n`` ranks ``stride`` apart."""
    if n <= 1:
        return 1, 1
    local = max(1, min(n, domain // stride)) if stride < domain else 1
    return local, -(-n // local)


def _ring_s(factor: float, nbytes: float, local: int, doms: int, topo: Topology, call: float | None = None) -> float:
    """The ring's bandwidth term, ramps applied (``call``: the bytes of one call, ``nbytes`` by default): each rank
    moves ``factor``·B. Inside one domain at the group's bus bandwidth; across domains the NVLink steps ((k − 1)/k of
    them) and the node's network share (one ring edge per node, over k GPUs' NICs) run at once and the slower sets
    the pace — each on its own fabric's ramp, the network's read at the bytes a call puts through each NIC."""
    call = nbytes if call is None else call
    moved = factor * nbytes
    if doms == 1:
        return moved / topo.group_bw(local) / topo.share(call)
    if topo.bw_out <= 0:
        raise ValueError("a group spans nodes but the hardware has no network between nodes")
    intra = moved * (local - 1) / local / topo.group_bw(local) / topo.share(call) if local > 1 else 0.0
    return max(intra, moved / (local * topo.bw_out) / topo.share(call, topo.per_nic(call, local)))


def _nvls_s(nbytes: float, local: int, topo: Topology) -> float:
    """NVLS all-reduce inside one domain: B·(1 + 1/n) per direction at nvlsEfficiency (module doc)."""
    return nbytes / (topo.bw_up * topo.nvls * local / (local + 1))


def all_reduce_s(nbytes: float, n: int, stride: int, topo: Topology) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, doms = placement(n, stride, topo.domain)
    up, out = topo.hops
    # NCCL picks ring or (double binary) tree by size; both move the same bytes per rank, so the
    # cheaper latency wins: ring 2(n − 1) steps, tree 2·((n_local − 1) + ⌈log2 n_dom⌉) hops
    ring = 2 * (n - doms) * up + 2 * (doms - 1) * out
    tree = 2 * ((local - 1) * up + math.ceil(math.log2(doms)) * out)
    bw = _ring_s(2 * (n - 1) / n, nbytes, local, doms, topo)
    if doms == 1 and topo.nvls and local > 2:
        bw = min(bw, _nvls_s(nbytes, local, topo) / topo.share(nbytes))
    elif doms == 2 and topo.nvls and local > 2:
        bw = min(bw, _nvls_tree_s(nbytes, local, topo))
    return topo.ring_base + min(ring, tree) + bw


def _nvls_tree_s(nbytes: float, local: int, topo: Topology) -> float:
    """NCCL's NVLSTree all-reduce over two NVLink SHARP nodes (what NCCL runs there by default): each node reduces
    its buffer in the switch, the two nodes exchange it once over the network — a node's NICs carry B each way, not
    the ring's 2(n − 1)/n·B — and the switch broadcasts the result; the network and NVLS steps run at once, the
    slower sets the pace ("on two nodes, NCCL uses the tree (or nvlstree) algorithm which can indeed go beyond the
    network bottleneck (provided the intra-node bandwidth can sustain that higher speed)", NVIDIA/nccl-tests#196;
    measured 470 GB/s busbw on 2 x 8 H100 with 8 x 400G, 365.8 on 4 nodes, 480 on one, NVIDIA/nccl-tests#309). The
    NVLS part runs at ``nvls_tree_share`` of a one-node NVLS all-reduce (constants.json: four two-node H100 sweeps)."""
    slower = max(nbytes / (local * topo.bw_out), _nvls_s(nbytes, local, topo) / constant("nvls_tree_share"))
    return slower / topo.share(nbytes, topo.per_nic(nbytes, local))  # the two-node sweeps time this very algorithm


def ring_latency_s(n: int, stride: int, topo: Topology) -> float:
    """Latency of one ring all-gather or reduce-scatter: base + (n − n_dom)·hop inside the domain
    + (n_dom − 1)·hop across it (NCCL src/graph/tuning.cc, Ring)."""
    if n <= 1:
        return 0.0
    _, doms = placement(n, stride, topo.domain)
    up, out = topo.hops
    return topo.ring_base + (n - doms) * up + (doms - 1) * out


def reduce_scatter_s(nbytes: float, n: int, stride: int, topo: Topology, calls: int = 1) -> float:
    """Reduce-scatter (or all-gather) of ``nbytes`` in all (the unsharded size), issued as ``calls``
    collectives of ``nbytes``/``calls`` each: (n − 1)/n of the bytes per rank, at the share the size of
    one call reaches, and the ring latency once per call."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, doms = placement(n, stride, topo.domain)
    return _ring_s((n - 1) / n, nbytes, local, doms, topo, nbytes / calls) + calls * ring_latency_s(n, stride, topo)


all_gather_s = reduce_scatter_s


def all_to_all_s(nbytes: float, n: int, stride: int, topo: Topology) -> float:
    """Each rank holds ``nbytes`` and keeps 1/n of it; NCCL's all-to-all is n − 1 concurrent
    send/recv pairs, its latency the ring's n − 1 steps."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, _ = placement(n, stride, topo.domain)
    intra = (local - 1) / n * nbytes / topo.group_bw(local) / topo.share(nbytes) if local > 1 else 0.0
    remote = (n - local) / n * nbytes  # each GPU's share for other nodes, out through the node's NICs
    inter = remote / topo.bw_out / topo.share(nbytes, topo.per_nic(local * remote, local)) if n > local else 0.0
    return max(intra, inter) + ring_latency_s(n, stride, topo)


def send_recv_s(nbytes: float, crosses_domain: bool, topo: Topology) -> float:
    """One point-to-point transfer: over the network, or inside the domain (on a full mesh over the
    one link between the pair); a call's base and one hop."""
    if nbytes <= 0:
        return 0.0
    up, out = topo.hops
    if crosses_domain:
        bw, hop = topo.bw_out, out
    else:
        bw, hop = topo.mesh_link or topo.bw_up, up
    return topo.ring_base + hop + nbytes / bw / topo.share(nbytes, topo.per_nic(nbytes, 1) if crosses_domain else None)


def touched(experts: int, k: int, bins: int, groups: int = 0, topk_groups: int = 0) -> float:
    """How many of ``bins`` (ranks or nodes, each holding experts/bins consecutive experts) a token's top-``k``
    experts fall in, on average, the scores uniform: hypergeometric over all experts; under group-limited routing
    (``groups`` equal groups of consecutive experts, the top ``topk_groups`` chosen first — DeepSeek-V2/V3) a bin
    holding whole groups is reached when one of its groups is chosen (the group score, a group's best affinities,
    picks groups that hold the token's top experts: DeepSeek-V3 Sec. 3.2.2, each token reaches at most M nodes),
    and a bin inside a group by the k experts drawn from the chosen groups' experts."""
    if bins <= 1:
        return 1.0
    per = experts / bins
    limited = 0 < topk_groups < groups and (groups % bins == 0 or bins % groups == 0)
    if not limited:
        return bins * _hit(experts, per, k)
    if groups % bins == 0:  # whole groups in a bin
        q = groups // bins
        return bins * (1 - math.comb(groups - q, topk_groups) / math.comb(groups, topk_groups))
    pool = topk_groups * experts // groups  # a bin inside a group: reached when its group is chosen
    return bins * topk_groups / groups * _hit(pool, per, k)


def _hit(pool: float, per: float, k: int) -> float:
    """P(at least one of ``k`` draws without replacement from ``pool`` experts lands in a bin of ``per``)."""
    pool_i, per_i = round(pool), round(per)
    if k >= pool_i - per_i + 1:
        return 1.0
    return 1 - math.comb(pool_i - per_i, k) / math.comb(pool_i, k)


def deepep_s(tokens: float, token_bytes: float, ranks: float, nodes: float, n: int, stride: int,
             topo: Topology) -> float:
    """DeepEP's normal dispatch or combine (deepseek-ai/DeepEP, V1 ``Buffer.dispatch``/``combine``; DeepSeek-V3
    Sec. 3.2.2) of ``tokens`` per rank of ``token_bytes`` each over ``n`` expert-parallel ranks, a token reaching
    ``ranks`` distinct ranks and ``nodes`` distinct nodes (``touched``). Across nodes a token crosses the network
    once per remote node it reaches (not once per expert, as an all-to-all sends it), to the GPU of the same local
    index, which forwards it over NVLink to the GPUs holding its experts; the two run pipelined, the slower sets the
    time. Every token a rank receives crosses its node's NVLink once, its own rank's included (the kernels copy those
    through the same buffers: validation/components.json's DeepEP points, within 15 % with it, +20 % without).
    No NCCL ramp: DeepEP's kernels are its own; a call's base latency."""
    if n <= 1 or tokens <= 0:
        return 0.0
    _, doms = placement(n, stride, topo.domain)
    nvlink = tokens * ranks * token_bytes / topo.bw_up
    if doms == 1:
        return topo.ring_base + nvlink
    if topo.bw_out <= 0:
        raise ValueError("a group spans nodes but the hardware has no network between nodes")
    network = tokens * nodes * (doms - 1) / doms * token_bytes / topo.bw_out
    return topo.ring_base + max(nvlink, network)
