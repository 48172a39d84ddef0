"""Collective costs (model/comm.py): the ring formulas on hand-made topologies, the fabrics' measured
sweeps read back, and NVLS, the full mesh and the cross-node ring against published measurements
that are not in the component corpus."""

from dataclasses import replace

import pytest
from conftest import make

from gpuplan.catalog.constants import table
from gpuplan.catalog.hardware import get_fabric
from gpuplan.model.comm import (
    Topology,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    bus_factor,
    curve_profile,
    placement,
    reduce_scatter_s,
    ring_latency_s,
    send_recv_s,
    topology,
)

# a hand-made two-tier topology: 8 GPUs per domain, 100 GB/s inside, 10 GB/s per GPU across, no ramp
TOPO = Topology(domain=8, bw_up=100e9, lat_up=1e-6, bw_out=10e9, lat_out=5e-6)
GB, GiB = 1e9, 2**30
BASE = table("ring_latency_s")["base"]


def topo_of(gpu: str, gpus: int = 8, scale_out: str | None = None) -> Topology:
    return topology(make(gpu=gpu, gpus=gpus, hardware={"scale_out": scale_out} if scale_out else {}).hardware)


def algbw(nbytes: float, seconds: float) -> float:
    return nbytes / seconds


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_inside_one_node(n):
    # source: Patarasuk & Yuan 2009 (J. Parallel Distrib. Comput. 69(2)) — ring all-reduce moves
    # 2(n−1)/n · B per rank in 2(n−1) steps: t = 2(n−1)/n · B/β + 2(n−1)·α.
    expected = 2 * (n - 1) / n * GB / 100e9 + 2 * (n - 1) * 1e-6
    assert all_reduce_s(GB, n, 1, TOPO) == pytest.approx(expected, rel=1e-12)


def test_ring_all_reduce_8_ranks_value():
    # 2·7/8 · 1 GB / 100 GB/s = 17.5 ms, plus 14 hops × 1 µs
    assert all_reduce_s(GB, 8, 1, TOPO) == pytest.approx(0.0175 + 14e-6, rel=1e-12)


@pytest.mark.parametrize("n, stride", [(8, 1), (4, 2), (4, 8), (32, 1)])
def test_reduce_scatter_and_all_gather_move_half_an_all_reduce(n, stride):
    # source: Patarasuk & Yuan 2009 / NCCL — all-reduce = reduce-scatter + all-gather, each (n−1)/n · B.
    # Without latency the byte terms must be exactly half.
    flat = Topology(domain=8, bw_up=100e9, lat_up=0.0, bw_out=10e9, lat_out=0.0)
    ar = all_reduce_s(GB, n, stride, flat)
    assert ar > 0
    assert reduce_scatter_s(GB, n, stride, flat) == pytest.approx(ar / 2, rel=1e-12)
    assert all_gather_s(GB, n, stride, flat) == pytest.approx(ar / 2, rel=1e-12)


def test_a100_hop_is_read_off_the_smallest_message_of_its_sweep():
    # source: stas00/ml-engineering network/README.md @744d01e, 8x A100 all_reduce_perf: 32 KiB in
    # 43.83 µs (busbw 1.31 GB/s); NCCL's ring model (tuning.cc) = baseLat 8.4 µs + 2(8−1) steps, so a
    # step over NVLink 3 costs (43.77 − 8.4)/14 = 2.53 µs
    topo = topo_of("a100-80gb-sxm", 1536, "ib-hdr-200g")
    hop = (32768 * 1.75 / 1.31e9 - 8.4e-6) / 14
    assert hop == pytest.approx(2.526e-6, rel=1e-3)
    assert topo.hops[0] == pytest.approx(hop, rel=1e-12)
    # an all-gather of 1,536 ranks on 192 nodes: 1,344 NVLink steps and 191 network steps of NCCL's
    # 9.6 µs (tuning.cc, Ring/Simple over the network)
    assert ring_latency_s(1536, 1, topo) == pytest.approx(8.4e-6 + 1344 * hop + 191 * 9.6e-6, rel=1e-12)
    assert ring_latency_s(4, 8, topo) == pytest.approx(8.4e-6 + 3 * 9.6e-6, rel=1e-12)  # one rank per node


def test_gathering_tensor_by_tensor_pays_the_latency_per_call():
    # 1 GB in one call vs the same bytes in 1,152 calls (96 GPT layers × 12 tensors): the ring latency
    # is paid 1,151 more times, and each 0.87 MB call reaches a smaller share of the bandwidth
    topo = topo_of("a100-80gb-sxm", 1536, "ib-hdr-200g")
    one = all_gather_s(GB, 1536, 1, topo)
    many = all_gather_s(GB, 1536, 1, topo, calls=1152)
    latency = 1151 * ring_latency_s(1536, 1, topo)
    assert many - one > latency
    assert latency == pytest.approx(6.03, rel=1e-2)  # seconds: latency dominates at 1,536 ranks


def test_slow_ethernet_hops_keep_their_own_latency():
    # NCCL's 9.6 µs per network step is a floor: a 10 GbE hop (30 µs in fabrics.json) costs more
    topo = topo_of("a100-80gb-sxm", 32, "eth-10g")
    assert ring_latency_s(4, 8, topo) == pytest.approx(8.4e-6 + 3 * 30e-6, rel=1e-12)


def test_one_rank_per_node_uses_the_network():
    # stride 8 = domain: 4 ranks on 4 nodes, every hop over the network. NCCL's double binary tree
    # needs 2·⌈log2 4⌉ = 4 network hops where the ring needs 2·3 = 6; the bytes are the ring's.
    expected = 2 * 3 / 4 * GB / 10e9 + 2 * 2 * 5e-6
    assert all_reduce_s(GB, 4, 8, TOPO) == pytest.approx(expected, rel=1e-12)
    assert all_reduce_s(GB, 4, 8, TOPO) == pytest.approx(0.15002, rel=1e-12)


def test_ring_across_nodes_runs_nvlink_and_network_at_once():
    # NCCL's ring over 4 nodes × 8 GPUs enters and leaves each node once per channel: the node's
    # 8 NICs carry the ring's 2(n−1)/n · B, each GPU's NVLink 7/8 of it; both run at once, the slower
    # sets the pace (ML-Engineering network/README.md, 'Inter-node speed depends on intra-node speed')
    moved = 2 * 31 / 32 * GB
    network, nvlink = moved / (8 * 10e9), moved * 7 / 8 / 100e9
    assert network > nvlink
    latency = 2 * (7 * 1e-6 + 2 * 5e-6)  # the tree's 2·(7 NVLink + ⌈log2 4⌉ network) hops
    assert latency < 2 * (28 * 1e-6 + 3 * 5e-6)
    assert all_reduce_s(GB, 32, 1, TOPO) == pytest.approx(network + latency, rel=1e-12)
    assert all_reduce_s(GB, 32, 1, TOPO) == pytest.approx(0.0242188 + 34e-6, rel=1e-5)
    # eight GPUs' NICs serve the ring, where one rank per node has only its own
    assert all_reduce_s(GB, 32, 1, TOPO) < all_reduce_s(GB, 4, 8, TOPO)


def test_two_per_node_spanning_nodes():
    # stride 4: two members per domain, 4 domains for 8 ranks; each node's share of the network is
    # its two GPUs' NICs, its NVLink carries half the ring's steps
    assert placement(8, 4, 8) == (2, 4)
    moved = 2 * 7 / 8 * GB
    bandwidth = max(moved / 2 / 100e9, moved / (2 * 10e9))
    latency = 2 * (1 * 1e-6 + 2 * 5e-6)  # tree: one NVLink hop and ⌈log2 4⌉ network hops, each way
    assert all_reduce_s(GB, 8, 4, TOPO) == pytest.approx(bandwidth + latency, rel=1e-12)


def test_all_reduce_latency_at_scale_is_the_trees():
    # 16,384 GPUs (2,048 nodes): a ring would take 2·16,383 steps, the tree 2·(7 + 11) hops
    topo = topo_of("h100-sxm", 16384, "ib-ndr-400g")
    up, out = topo.hops
    expected = 8.4e-6 + 2 * (7 * up + 11 * out)
    bandwidth = all_reduce_s(1.0, 16384, 1, topo) - expected  # one byte: nothing but latency
    assert 0 <= bandwidth < 1e-8
    assert all_reduce_s(1.0, 16384, 1, topo) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("n, stride, domain, expected", [
    (1, 1, 8, (1, 1)),
    (8, 1, 8, (8, 1)),
    (4, 1, 8, (4, 1)),
    (3, 1, 8, (3, 1)),
    (4, 2, 8, (4, 1)),     # ranks 0,2,4,6: one node
    (8, 2, 8, (4, 2)),     # ranks 0..14 step 2: two nodes of 4
    (16, 1, 8, (8, 2)),
    (12, 1, 8, (8, 2)),    # the last node half full
    (4, 8, 8, (1, 4)),     # one rank per node
    (2, 16, 8, (1, 2)),
    (72, 1, 72, (72, 1)),  # NVL72 rack
    (144, 1, 72, (72, 2)),
])
def test_placement(n, stride, domain, expected):
    assert placement(n, stride, domain) == expected


def test_trivial_groups_and_empty_buffers_cost_nothing():
    assert all_reduce_s(GB, 1, 1, TOPO) == 0.0
    assert all_reduce_s(0, 8, 1, TOPO) == 0.0
    assert all_to_all_s(GB, 1, 1, TOPO) == 0.0
    assert send_recv_s(0, True, TOPO) == 0.0


def test_spanning_nodes_without_a_network_is_an_error():
    no_net = Topology(domain=8, bw_up=100e9, lat_up=1e-6, bw_out=0.0, lat_out=0.0)
    assert all_reduce_s(GB, 8, 1, no_net) > 0
    with pytest.raises(ValueError):
        all_reduce_s(GB, 16, 1, no_net)


def test_all_to_all_inside_one_node():
    # each rank keeps 1/n and sends (n−1)/n · B over the scale-up fabric; n − 1 steps of latency
    assert all_to_all_s(GB, 8, 1, TOPO) == pytest.approx(7 / 8 * GB / 100e9 + 7 * 1e-6, rel=1e-12)


def test_all_to_all_across_two_nodes():
    # 16 ranks, 8 per node: 7/16 of B stays on NVLink, 8/16 leaves over the network; the slower wins;
    # latency: the ring's 14 NVLink steps and one network step
    intra = 7 / 16 * GB / 100e9
    inter = 8 / 16 * GB / 10e9
    expected = max(intra, inter) + 14 * 1e-6 + 1 * 5e-6
    assert all_to_all_s(GB, 16, 1, TOPO) == pytest.approx(expected, rel=1e-12)
    assert all_to_all_s(GB, 16, 1, TOPO) == pytest.approx(0.05 + 19e-6, rel=1e-12)


def test_send_recv():
    assert send_recv_s(GB, False, TOPO) == pytest.approx(0.01 + 1e-6, rel=1e-12)
    assert send_recv_s(GB, True, TOPO) == pytest.approx(0.1 + 5e-6, rel=1e-12)


@pytest.mark.parametrize("fabric", ["nvlink3", "nvlink4", "nvlink5", "nvlink5-nvl72", "infinity-fabric-mi300x"])
def test_a_fabric_returns_its_own_sweep(fabric):
    # the model read efficiency, ramp and hop off the sweep: for the sweep's own collective and group
    # it returns the published times, never faster (the ramp is the sweep's non-decreasing envelope;
    # the smallest message adds its own small bandwidth term to the latency it defines)
    gpu = {"nvlink3": "a100-80gb-sxm", "nvlink4": "h100-sxm", "nvlink5": "b200", "nvlink5-nvl72": "gb200",
           "infinity-fabric-mi300x": "mi300x"}[fabric]
    curve = get_fabric(fabric, "scale_up").curve
    topo = topo_of(gpu, 8)
    if curve.algorithm == "ring":
        topo = replace(topo, nvls=0.0)
    n, factor = curve.gpus, bus_factor(curve.collective, curve.gpus)
    published = [b * factor / bus for b, bus in zip(curve.sizes, curve.bus_bytes_per_s, strict=True)]
    modelled = [all_reduce_s(b, n, 1, topo) for b in curve.sizes]
    assert modelled[0] == pytest.approx(published[0], rel=0.08)
    assert modelled[-1] == pytest.approx(published[-1], rel=2e-3)
    # exact where the sweep's own time does not fall below a smaller message's (its noise is held out of the ramp:
    # model/comm.py curve_ramp keeps the time monotone in size)
    rising = [i for i in range(len(published)) if published[i] >= max(published[:i], default=0.0)]
    exact = [modelled[i] == pytest.approx(published[i], rel=1e-6) for i in rising]
    assert sum(exact) >= len(exact) // 2
    assert all(m >= p * (1 - 1e-9) for m, p in zip(modelled, published, strict=True))  # never faster


def test_ramp_reaches_half_the_bandwidth_near_16_mib_on_hopper():
    # source: Azure ND H100 v5 nccl-tests all-reduce (fabrics.json nvlink4): 234.45 GB/s at 16 MiB of
    # 478.87 at 8 GiB — the α–β model saturated near 10 MB, the measured curve near 1 GiB
    topo = topo_of("h100-sxm", 8)
    share = [topo.share(b) for b in (2**20, 2**24, 2**26, 2**28, 2**30, 2**33)]
    assert share == sorted(share) and share[-1] == 1.0
    assert 0.5 < share[1] < 0.7 and 0.8 < share[2] < 0.9 and share[4] > 0.98


@pytest.mark.parametrize("n, published", [(5, 258e9), (6, 265e9), (7, 270e9), (8, 273e9)])
def test_nvls_all_reduce_on_h100_grows_with_the_group(n, published):
    # source: NVIDIA/nccl#1455 (8x H100 SXM, NCCL_ALGO=NVLS all_reduce_perf at 2-4 GB): algbw 258, 265,
    # 270, 273 GB/s for 5-8 GPUs. Model: 450 GB/s × efficiency × nvlsEfficiency 0.85 × n/(n+1)
    modelled = algbw(4 * GiB, all_reduce_s(4 * GiB, n, 1, topo_of("h100-sxm", 8)))
    assert modelled == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_bus_bandwidth_on_h100_is_the_same_for_every_group(n):
    # source: NVIDIA/nccl#1455: with NCCL_ALGO=RING busbw 365-370 GB/s from 2 to 8 H100; sjeaugey in
    # NVIDIA/nccl-tests#212: 'NCCL can get an effective NVLink bandwidth of 370GB/s' of 450
    topo = replace(topo_of("h100-sxm", 8), nvls=0.0)
    busbw = algbw(4 * GiB, all_reduce_s(4 * GiB, n, 1, topo)) * 2 * (n - 1) / n
    assert busbw == pytest.approx(367.5e9, rel=0.03)


def test_nvls_on_h800():
    # source: NVIDIA/nccl#1374 (8x H800, NVLink 200 GB/s per direction): all-reduce busbw 215 GB/s
    busbw = algbw(8 * GiB, all_reduce_s(8 * GiB, 8, 1, topo_of("h800", 8))) * 1.75
    assert busbw == pytest.approx(215e9, rel=0.03)


def test_mi300x_pair_has_one_link_and_the_node_seven():
    # source: AMD ROCm docs, MI300 microarchitecture: seven 64 GB/s Infinity Fabric links per GPU, one
    # per peer. A pair's ring drives one link, eight GPUs drive seven: 7× the bus bandwidth
    topo = topo_of("mi300x", 8)
    bus2 = algbw(4 * GiB, all_reduce_s(4 * GiB, 2, 1, topo))
    bus8 = algbw(4 * GiB, all_reduce_s(4 * GiB, 8, 1, topo)) * 1.75
    assert bus8 / bus2 == pytest.approx(7, rel=5e-3)
    assert topo.mesh_link == pytest.approx(64e9 * curve_profile(get_fabric(
        "infinity-fabric-mi300x", "scale_up").curve, BASE).efficiency, rel=1e-12)
    # a pipeline send between two GPUs of the node crosses their one link too
    assert send_recv_s(GB, False, topo) > GB / topo.mesh_link


def test_h100_node_topology_from_catalogue():
    # source: NVIDIA H100 datasheet — NVLink 4: 900 GB/s bidirectional = 450 GB/s per direction per GPU;
    # InfiniBand NDR: 400 Gb/s = 50 GB/s per NIC, one NIC per GPU on an HGX H100 node. The efficiency
    # is the nvlink4 sweep's: 478.87 GB/s busbw at 8 GiB under NVLS on 8 GPUs.
    hw = make(gpus=16, hardware={"scale_out": "ib-ndr-400g"}).hardware
    topo = topology(hw)
    assert topo.domain == 8
    nvls_algbw = 478.87e9 / 1.75
    efficiency = nvls_algbw / (450e9 * 0.85 * 8 / 9)
    assert efficiency == pytest.approx(0.805, abs=1e-3)
    assert topo.bw_up == pytest.approx(450e9 * efficiency, rel=1e-3)
    assert topo.nvls == 0.85
    assert hw.scale_out.efficiency is not None
    assert topo.bw_out == pytest.approx(400e9 / 8 * hw.scale_out.efficiency, rel=1e-12)
    assert topo.lat_out == pytest.approx(5e-6)


def test_10gbe_link_is_shared_by_the_node():
    # source: IEEE 802.3ae — 10 Gb/s per link; a commodity node has one link for its 8 GPUs.
    hw = make(gpus=16, hardware={"scale_out": "eth-10g"}).hardware
    topo = topology(hw)
    assert topo.bw_out == pytest.approx(10e9 / 8 / 8 * hw.scale_out.efficiency, rel=1e-12)
    ib_hw = make(gpus=16, hardware={"scale_out": "ib-ndr-400g"}).hardware
    ib = topology(ib_hw)
    # 8 NICs of 400G against one of 10G: 320× the raw rate per GPU, times the efficiency ratio
    ratio = 320 * ib_hw.scale_out.efficiency / hw.scale_out.efficiency
    assert ib.bw_out / topo.bw_out == pytest.approx(ratio, rel=1e-12)
    assert ratio > 300


def test_default_network_is_ndr_infiniband():
    hw = make(gpus=16).hardware
    assert hw.scale_out.id == "ib-ndr-400g"
