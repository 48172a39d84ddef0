"""Collective communication cost on a two-tier topology: a scale-up domain, then the network.

Model (α–β, Hockney 1994; ring algorithms, Patarasuk & Yuan 2009; NCCL's hierarchical
collectives): a group of ``n`` ranks with stride ``stride`` between members places
``n_local`` members in each scale-up domain (NVLink/NVSwitch node, NVL72 rack) and spans
``n_dom`` domains. An all-reduce of a buffer of B bytes costs

    intra:  2·(n_local − 1)/n_local · B / bw_up        (reduce-scatter + all-gather in the domain)
    inter:  2·(n_dom − 1)/n_dom · (B / n_local) / bw_out   (each rank's shard crosses the network)

plus the latency of NCCL's cheaper algorithm: a ring (2(n − 1) hops) or a tree (2·((n_local − 1)
+ ⌈log2 n_dom⌉) hops; Sanders et al. 2009 double binary trees, NCCL ≥ 2.4). Reduce-scatter and
all-gather move half of that; NCCL runs them as one flat ring (its only algorithm for them on multi-GPU nodes), so
their latency is NCCL's own ring model (src/graph/tuning.cc): a base plus one hop per ring
step, n − 1 steps of which n_dom − 1 cross the network — per call, so a ZeRO-3 step that
gathers tensor by tensor pays it once per tensor. All-to-all sends (n − 1)/n · B, the part
leaving the domain over the network.
``bw_up`` and ``bw_out`` are achievable (bus) bandwidths per GPU: the fabric's per-direction
rate times a measured efficiency; across nodes, the node's NICs are shared by its GPUs
(one 400G NIC per GPU on AI clusters, one 10 GbE link per node on commodity Ethernet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.constants import constant, table
from gpuplan.spec import GPU, Fabric, Hardware

PCIE5_BYTES_PER_S = 63e9  # PCIe 5.0 x16 per direction (PCI-SIG), for nodes whose NVLink domain is a pair


@dataclass(frozen=True, slots=True)
class Topology:
    domain: int        # GPUs that share the scale-up fabric
    bw_up: float       # achievable bytes/s per GPU inside the domain
    lat_up: float
    bw_out: float      # achievable bytes/s per GPU across domains
    lat_out: float
    ring_base: float = 0.0     # NCCL's latency model: per call, per step inside, per step across
    ring_up: float = 0.0       # (a fabric whose own hop latency is larger keeps its own)
    ring_out: float = 0.0

    @property
    def hops(self) -> tuple[float, float]:
        """Seconds per collective step inside the domain and across it."""
        return max(self.ring_up, self.lat_up), max(self.ring_out, self.lat_out)


def topology(hw: Hardware) -> Topology:
    """The GPU's scale-up domain and the node's network, as per-GPU rates (cached by value)."""
    return _topology(hw.gpu, hw.gpus_per_node, hw.scale_up, hw.scale_out)


@lru_cache(maxsize=256)
def _topology(gpu: GPU, gpus_per_node: int, up: Fabric, out: Fabric | None) -> Topology:
    domain_gpus = up.domain_gpus or gpus_per_node
    eff_up = constant("scale_up_efficiency")
    if domain_gpus < gpus_per_node:  # e.g. H100 NVL bridge pairs: the node talks over PCIe
        bw_up, domain = PCIE5_BYTES_PER_S * eff_up, gpus_per_node
    else:
        bw_up, domain = (up.bytes_per_s_per_gpu or gpu.scale_up_bytes_per_s) * eff_up, domain_gpus
    ring = table("ring_latency_s")
    lat_up = up.latency_s or 1e-6
    if out is None or not out.link_bytes_per_s:
        return Topology(domain, bw_up, lat_up, 0.0, 0.0, ring["base"], ring["scale_up_step"])
    eff_out = out.efficiency if out.efficiency is not None else constant("scale_out_efficiency")
    nics = min(out.links_per_node or 1, gpus_per_node)
    bw_out = out.link_bytes_per_s * nics / gpus_per_node * eff_out
    lat_out = out.latency_s or 5e-6
    return Topology(domain, bw_up, lat_up, bw_out, lat_out, ring["base"], ring["scale_up_step"], ring["scale_out_step"])


def placement(n: int, stride: int, domain: int) -> tuple[int, int]:
    """(members per domain, domains spanned) of a group of ``n`` ranks ``stride`` apart."""
    if n <= 1:
        return 1, 1
    local = max(1, min(n, domain // stride)) if stride < domain else 1
    return local, -(-n // local)


def all_reduce_s(nbytes: float, n: int, stride: int, topo: Topology) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, doms = placement(n, stride, topo.domain)
    up, out = topo.hops
    # NCCL picks ring or (double binary) tree by size; both move the same bytes per rank, so the
    # cheaper latency wins: ring 2(n − 1) steps, tree 2·((n_local − 1) + ⌈log2 n_dom⌉) hops
    ring = 2 * (n - doms) * up + 2 * (doms - 1) * out
    tree = 2 * ((local - 1) * up + math.ceil(math.log2(doms)) * out)
    return _all_reduce_bw_s(nbytes, local, doms, topo) + topo.ring_base + min(ring, tree)


def _all_reduce_bw_s(nbytes: float, local: int, doms: int, topo: Topology) -> float:
    t = 0.0
    if local > 1:
        t += 2 * (local - 1) / local * nbytes / topo.bw_up
    if doms > 1:
        if topo.bw_out <= 0:
            raise ValueError("a group spans nodes but the hardware has no network between nodes")
        t += 2 * (doms - 1) / doms * (nbytes / local) / topo.bw_out
    return t


def ring_latency_s(n: int, stride: int, topo: Topology) -> float:
    """Latency of one ring all-gather or reduce-scatter: base + (n − n_dom)·hop inside the domain
    + (n_dom − 1)·hop across it (NCCL src/graph/tuning.cc, Ring/Simple)."""
    if n <= 1:
        return 0.0
    _, doms = placement(n, stride, topo.domain)
    up, out = topo.hops
    return topo.ring_base + (n - doms) * up + (doms - 1) * out


def reduce_scatter_s(nbytes: float, n: int, stride: int, topo: Topology, calls: int = 1) -> float:
    """Reduce-scatter (or all-gather) of ``nbytes`` in all (the unsharded size), issued as ``calls``
    collectives: the bytes cost half an all-reduce's, the latency is paid per call."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, doms = placement(n, stride, topo.domain)
    return _all_reduce_bw_s(nbytes, local, doms, topo) / 2 + calls * ring_latency_s(n, stride, topo)


all_gather_s = reduce_scatter_s


def all_to_all_s(nbytes: float, n: int, stride: int, topo: Topology) -> float:
    """Each rank holds ``nbytes`` and keeps 1/n of it."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    local, _ = placement(n, stride, topo.domain)
    intra = (local - 1) / n * nbytes / topo.bw_up
    inter = (n - local) / n * nbytes / topo.bw_out if n > local else 0.0
    lat = (local - 1) * topo.lat_up + (n - local) * topo.lat_out
    return max(intra, inter) + lat


def send_recv_s(nbytes: float, crosses_domain: bool, topo: Topology) -> float:
    if nbytes <= 0:
        return 0.0
    if crosses_domain:
        return nbytes / topo.bw_out + topo.lat_out
    return nbytes / topo.bw_up + topo.lat_up
