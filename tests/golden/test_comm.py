"""Collective costs against the α–β ring formulas (comm.py)."""

import pytest
from conftest import make

from gpuplan.catalog.constants import constant
from gpuplan.model.comm import (
    Topology,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    placement,
    reduce_scatter_s,
    ring_latency_s,
    send_recv_s,
    topology,
)

# a hand-made two-tier topology: 8 GPUs per domain, 100 GB/s inside, 10 GB/s per GPU across
TOPO = Topology(domain=8, bw_up=100e9, lat_up=1e-6, bw_out=10e9, lat_out=5e-6)
GB = 1e9


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


def test_ring_all_gather_latency_is_nccls_ring_model():
    # source: NVIDIA/nccl src/graph/tuning.cc (Ring/Simple): baseLat 8.4 µs + (n − nodes)·3.4 µs over
    # NVLink + (nodes − 1)·9.6 µs over the network, for an all-gather of n ranks on `nodes` nodes.
    topo = topology(make(gpu="a100-80gb-sxm", gpus=1536, hardware={"scale_out": "ib-hdr-200g"}).hardware)
    expected_lat = 8.4e-6 + (1536 - 192) * 3.4e-6 + (192 - 1) * 9.6e-6
    assert expected_lat == pytest.approx(6.4116e-3, rel=1e-12)
    assert ring_latency_s(1536, 1, topo) == pytest.approx(expected_lat, rel=1e-12)
    # one rank per node: every step crosses the network
    assert ring_latency_s(4, 8, topo) == pytest.approx(8.4e-6 + 3 * 9.6e-6, rel=1e-12)
    # inside one node: NVLink steps only
    assert ring_latency_s(8, 1, topo) == pytest.approx(8.4e-6 + 7 * 3.4e-6, rel=1e-12)


def test_gathering_tensor_by_tensor_pays_the_latency_per_call():
    # 1 GB in one call vs the same bytes in 1,152 calls (96 GPT layers × 12 tensors): the byte
    # term is the same, the ring latency is paid 1,151 more times
    topo = topology(make(gpu="a100-80gb-sxm", gpus=1536, hardware={"scale_out": "ib-hdr-200g"}).hardware)
    one = all_gather_s(GB, 1536, 1, topo)
    many = all_gather_s(GB, 1536, 1, topo, calls=1152)
    assert many - one == pytest.approx(1151 * ring_latency_s(1536, 1, topo), rel=1e-9)
    assert many - one == pytest.approx(7.38, rel=1e-3)  # seconds: latency dominates at 1,536 ranks


def test_slow_ethernet_hops_keep_their_own_latency():
    # NCCL's 9.6 µs per network step is a floor: a 10 GbE hop (30 µs in fabrics.json) costs more
    topo = topology(make(gpu="a100-80gb-sxm", gpus=32, hardware={"scale_out": "eth-10g"}).hardware)
    assert ring_latency_s(4, 8, topo) == pytest.approx(8.4e-6 + 3 * 30e-6, rel=1e-12)


def test_one_rank_per_node_uses_the_network():
    # stride 8 = domain: 4 ranks on 4 nodes, every hop over the network. NCCL's double binary tree
    # needs 2·⌈log2 4⌉ = 4 network hops where the ring needs 2·3 = 6; the bytes are the ring's.
    expected = 2 * 3 / 4 * GB / 10e9 + 2 * 2 * 5e-6
    assert all_reduce_s(GB, 4, 8, TOPO) == pytest.approx(expected, rel=1e-12)
    assert all_reduce_s(GB, 4, 8, TOPO) == pytest.approx(0.15002, rel=1e-12)


def test_hierarchical_8_per_node_times_4_nodes():
    # comm.py: intra 2(n_l−1)/n_l · B/bw_up + inter 2(n_d−1)/n_d · (B/n_l)/bw_out; latency of the
    # tree, 2·(7 NVLink hops + 2 network hops), which beats the flat ring's 2·(28 + 3) hops
    intra = 2 * 7 / 8 * GB / 100e9
    inter = 2 * 3 / 4 * (GB / 8) / 10e9
    latency = 2 * (7 * 1e-6 + 2 * 5e-6)
    assert latency < 2 * (28 * 1e-6 + 3 * 5e-6)
    assert all_reduce_s(GB, 32, 1, TOPO) == pytest.approx(intra + inter + latency, rel=1e-12)
    assert all_reduce_s(GB, 32, 1, TOPO) == pytest.approx(0.0175 + 0.01875 + 34e-6, rel=1e-12)
    # the hierarchy beats a flat ring over the network by the 8 GPUs sharing each node's shard
    assert all_reduce_s(GB, 32, 1, TOPO) < all_reduce_s(GB, 4, 8, TOPO)


def test_two_per_node_spanning_nodes():
    # stride 4: two members per domain, 4 domains for 8 ranks
    assert placement(8, 4, 8) == (2, 4)
    intra = 2 * 1 / 2 * GB / 100e9
    inter = 2 * 3 / 4 * (GB / 2) / 10e9
    latency = 2 * (1 * 1e-6 + 2 * 5e-6)  # tree: one NVLink hop and ⌈log2 4⌉ network hops, each way
    assert all_reduce_s(GB, 8, 4, TOPO) == pytest.approx(intra + inter + latency, rel=1e-12)


def test_all_reduce_latency_at_scale_is_the_trees():
    # 16,384 GPUs (2,048 nodes): a ring would take 2·16,383 steps, the tree 2·(7 + 11) hops
    topo = topology(make(gpu="h100-sxm", gpus=16384, hardware={"scale_out": "ib-ndr-400g"}).hardware)
    up, out = max(3.4e-6, topo.lat_up), max(9.6e-6, topo.lat_out)
    assert all_reduce_s(1.0, 16384, 1, topo) == pytest.approx(8.4e-6 + 2 * (7 * up + 11 * out), rel=1e-3)


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
    # each rank keeps 1/n and sends (n−1)/n · B over the scale-up fabric, one message per peer
    assert all_to_all_s(GB, 8, 1, TOPO) == pytest.approx(7 / 8 * GB / 100e9 + 7 * 1e-6, rel=1e-12)


def test_all_to_all_across_two_nodes():
    # 16 ranks, 8 per node: 7/16 of B stays on NVLink, 8/16 leaves over the network; the slower wins
    intra = 7 / 16 * GB / 100e9
    inter = 8 / 16 * GB / 10e9
    expected = max(intra, inter) + 7 * 1e-6 + 8 * 5e-6
    assert all_to_all_s(GB, 16, 1, TOPO) == pytest.approx(expected, rel=1e-12)
    assert all_to_all_s(GB, 16, 1, TOPO) == pytest.approx(0.05 + 47e-6, rel=1e-12)


def test_send_recv():
    assert send_recv_s(GB, False, TOPO) == pytest.approx(0.01 + 1e-6, rel=1e-12)
    assert send_recv_s(GB, True, TOPO) == pytest.approx(0.1 + 5e-6, rel=1e-12)


def test_h100_node_topology_from_catalogue():
    # source: NVIDIA H100 datasheet — NVLink 4: 900 GB/s bidirectional = 450 GB/s per direction per GPU;
    # InfiniBand NDR: 400 Gb/s = 50 GB/s per NIC, one NIC per GPU on an HGX H100 node.
    hw = make(gpus=16, hardware={"scale_out": "ib-ndr-400g"}).hardware
    topo = topology(hw)
    assert topo.domain == 8
    assert topo.bw_up == pytest.approx(450e9 * constant("scale_up_efficiency"), rel=1e-12)
    assert hw.scale_out.efficiency is not None
    assert topo.bw_out == pytest.approx(400e9 / 8 * hw.scale_out.efficiency, rel=1e-12)
    assert topo.lat_up == pytest.approx(1e-6)
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
