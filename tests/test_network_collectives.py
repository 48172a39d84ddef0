"""Collectives that cross the network (model/comm.py): the scale-out fabrics' efficiencies as NVIDIA's engineers and
published nccl-tests runs measured them, the network's own ramp read off a two-node sweep, and NCCL's NVLSTree on
two NVLink SHARP nodes — each against its source, and the component corpus's new points read back."""

from __future__ import annotations

import math

import pytest
from conftest import make

from gpuplan.catalog.hardware import get_fabric
from gpuplan.model.comm import Topology, all_reduce_s, bus_factor, curve_ramp, reduce_scatter_s, send_recv_s, topology
from gpuplan.validation import components as comp

GiB, MiB = 2**30, 2**20
POINTS = {p["id"]: p for p in comp.corpus()["points"]}


def _topo(gpu: str, nodes: int, scale_out: str) -> Topology:
    return topology(make(gpu=gpu, gpus=8 * nodes, hardware={"scale_out": scale_out}).hardware)


def _busbw(nbytes: float, n: int, topo: Topology) -> float:
    return nbytes * bus_factor("all_reduce", n) / all_reduce_s(nbytes, n, 1, topo)


def test_the_measured_network_efficiencies():
    # source: NVIDIA/nccl-tests#309 — 4 nodes x 8 H100 with 8 x CX-7 400G IB: "max busbw can get 365.84 GB/s"
    assert get_fabric("ib-ndr-400g", "scale_out").efficiency == pytest.approx(365.84 / 400, abs=1e-3)
    # source: NVIDIA/nccl#812 — "On an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards and we measure 192GB/s"
    assert get_fabric("ib-hdr-200g", "scale_out").efficiency == pytest.approx(192 / 200)
    # source: NVIDIA/nccl#1368 — 5 nodes of 8 H100 with 4 x 400G RoCE: "ring bandwidth (190GB/s)"
    for fid in ("roce-400g", "roce-400g-x4"):
        assert get_fabric(fid, "scale_out").efficiency == pytest.approx(190 / 200)


def test_four_h100_nodes_run_the_ring_at_the_network_rate():
    # source: NVIDIA/nccl-tests#309 — 365.84 GB/s busbw on 4 nodes: the ring's rate is the node's eight NICs'
    topo = _topo("h100-sxm", 4, "ib-ndr-400g")
    assert _busbw(8 * GiB, 32, topo) == pytest.approx(365.84e9, rel=0.01)
    assert topo.bw_out == pytest.approx(50e9 * 0.915)


def test_two_nvls_nodes_run_nvlstree():
    # source: NVIDIA/nccl-tests#309 — 2 nodes: "can still get 470 GB/s", one node 480: NVLSTree exchanges each node's
    # reduced buffer once over the network, beside the NVLS reduction in the node, so busbw passes the 400 GB/s NICs;
    # that reduction runs at nvls_tree_share (0.91) of one node's NVLS (constants.json: four two-node H100 sweeps)
    topo = _topo("h100-sxm", 2, "ib-ndr-400g")
    t = all_reduce_s(8 * GiB, 16, 1, topo)
    network = 8 * GiB / (8 * topo.bw_out)
    nvls = 8 * GiB / (topo.bw_up * topo.nvls * 8 / 9) / 0.91
    ring = 8 * GiB * bus_factor("all_reduce", 16) / (8 * topo.bw_out)
    assert nvls > network  # H100's NVLS sets the pace on two nodes of eight 400G NICs
    assert t == pytest.approx(topo.ring_base + 2 * (7 * topo.hops[0] + topo.hops[1]) + nvls, rel=1e-9)
    assert t < ring
    assert _busbw(8 * GiB, 16, topo) > 400e9 > _busbw(8 * GiB, 32, _topo("h100-sxm", 4, "ib-ndr-400g"))
    assert _busbw(8 * GiB, 16, topo) == pytest.approx(470e9, rel=0.02)
    # A100 nodes have no NVLS: the ring, whose busbw the network caps (Azure NDm A100 v4: 189.2 GB/s at 8 GiB)
    a100 = _topo("a100-80gb-sxm", 2, "ib-hdr-200g")
    assert _busbw(8 * GiB, 16, a100) == pytest.approx(189.2e9, rel=0.03)
    assert _busbw(8 * GiB, 16, a100) < 8 * 25e9


def test_b200_nodes_on_two_nodes_are_network_bound():
    # source: dstack examples/clusters/a4 — 2 x GCP A4 (8 B200, 8 x CX-7 RoCE): 364.6 GB/s algbw at 8 GiB, the
    # node's network: B200's NVLS reduces faster than eight 400G NICs carry the buffer
    topo = _topo("b200", 2, "roce-400g")
    t = all_reduce_s(8 * GiB, 16, 1, topo)
    assert 8 * GiB / (8 * topo.bw_out) > 8 * GiB / (topo.bw_up * topo.nvls * 8 / 9)
    assert 8 * GiB / t == pytest.approx(364.55e9, rel=0.06)


def test_the_network_ramps_as_its_own_sweep():
    # source: dstack examples/clusters/nebius — 2 x 8 H100 on InfiniBand: 266.35 GB/s busbw at 64 MiB against 467.54
    # at 8 GiB; NVLink's NVLS sweep (nvlink4: Azure ND H100 v5) reaches 361.78 of 478.87 at 64 MiB
    topo = _topo("h100-sxm", 2, "ib-ndr-400g")
    xs, ys = curve_ramp(get_fabric("ib-ndr-400g", "scale_out").curve)
    assert topo.out_share == ys and topo.out_log_bytes == xs and topo.out_nics == 8 and topo.nics_per_gpu == 1
    # the sweep's own case (each node's 8 NICs carry its buffer once: B/8 each) reads the sweep at its own size
    assert topo.share(64 * MiB, 64 * MiB / 8) == pytest.approx(ys[xs.index(math.log(64 * MiB))])
    assert topo.share(64 * MiB, 64 * MiB / 8) < 0.75 * topo.share(64 * MiB)
    assert topo.share(8 * GiB, GiB) == topo.share(8 * GiB) == 1.0
    # one NIC carrying the whole message (a pipeline send) fills as the sweep does at 8x the size
    assert topo.share(16 * MiB, 16 * MiB) == topo.share(128 * MiB, 16 * MiB) > topo.share(16 * MiB, 2 * MiB)
    assert topo.per_nic(64 * MiB, 8) == 8 * MiB and topo.per_nic(64 * MiB, 1) == 64 * MiB
    # p4d nodes have 4 NICs for 8 GPUs: eight GPUs' 64 MiB goes through 4 NICs, one GPU's through one
    p4d = _topo("a100-80gb-sxm", 2, "efa-p4d")
    assert p4d.nics_per_gpu == 0.5 and p4d.out_nics == 4
    assert p4d.per_nic(64 * MiB, 8) == 16 * MiB and p4d.per_nic(64 * MiB, 1) == 64 * MiB
    # a collective inside the node keeps NVLink's ramp; one that crosses takes the network's
    one = _topo("h100-sxm", 1, "ib-ndr-400g")
    assert reduce_scatter_s(64 * MiB, 8, 1, one) < reduce_scatter_s(64 * MiB, 16, 1, topo)
    # a send between two nodes goes through one NIC: the sweep's ramp at 8x its size (nccl-tests#232: one H100 per
    # node, 39.9 GB/s at 16 MiB against 41.3 at 32 MiB; the ramp reads 0.74 at 16 MiB, 0.38 at the message's own size)
    assert send_recv_s(64 * MiB, True, topo) == pytest.approx(
        topo.ring_base + topo.hops[1] + 64 * MiB / topo.bw_out / topo.share(512 * MiB, 64 * MiB), rel=1e-12)
    assert 0.7 < topo.share(16 * MiB, 16 * MiB) < 0.95 and topo.share(16 * MiB, 2 * MiB) < 0.45
    # RoCE over the same CX-7 NICs borrows the InfiniBand ramp; EFA has its own (p5); TCP none measured
    assert _topo("h100-sxm", 2, "roce-400g").out_share == ys
    assert _topo("h100-sxm", 2, "efa-p5").out_share != ys
    eth = _topo("h100-sxm", 2, "eth-10g")
    assert eth.out_share == () and eth.share(64 * MiB, 8 * MiB) == eth.share(64 * MiB)


def test_the_ramp_is_non_decreasing_and_ends_at_one():
    for fid in ("ib-ndr-400g", "ib-hdr-200g", "efa-p5", "efa-p4d"):
        _, ys = curve_ramp(get_fabric(fid, "scale_out").curve)
        assert all(a <= b for a, b in zip(ys, ys[1:], strict=False)) and ys[-1] == 1.0 and ys[0] > 0


def test_the_new_corpus_points_read_back():
    # NVIDIA/nccl-tests#309: 4 nodes, "max busbw can get 365.84 GB/s"; 2 nodes "470 GB/s"
    assert POINTS["collective/nccl309/h100/all_reduce/4node"]["measured"]["value"] == 365.84e9
    assert POINTS["collective/nccl309/h100/all_reduce/2node"]["measured"]["value"] == 470e9
    # aws-samples awsome-distributed-training @0162aacd: 2 x p5.48xlarge, 17179869184 B: 487.09 GB/s busbw
    assert POINTS[f"collective/aws/p5_2node/all_reduce/{16 * GiB}"]["measured"]["value"] == 487.09e9
    # JingchaoZhang.github.io @4d2258f6: 2 x ND96amsr_A100_v4, 8589934592 B: 189.20 GB/s busbw
    assert POINTS[f"collective/azure_aks/ndm_a100_2node/all_reduce/{8 * GiB}"]["measured"]["value"] == 189.2e9
    rows = {r["id"]: r for r in comp.rows()}
    for pid in POINTS:
        if pid.startswith(("collective/nccl309", "collective/nccl1368", "collective/dstack/a4_2node")):
            assert math.isfinite(rows[pid]["error"]) and abs(rows[pid]["error"]) < 0.15, pid


def test_a_user_network_brings_its_own_two_node_sweep(tmp_path, monkeypatch):
    # a scale-out fabric with a sweep of its own across two nodes: only its ramp is read (the rate is the row's
    # efficiency): at 1 MiB (120 µs against 40 µs at 32 KiB) the bandwidth term takes 80 µs where the 1 GiB rate
    # (1 GiB in 10 ms) would take 9.8 µs — a share of 0.122; a row that borrows another's ramp takes it
    from gpuplan.catalog import user
    from gpuplan.catalog.hardware import make_hardware

    t32k, t1m, t1g = 40e-6, 120e-6, 10e-3
    bus = [round(b * 1.875 / t / 1e9, 6) for b, t in ((32768, t32k), (2**20, t1m), (2**30, t1g))]
    path = tmp_path / "net.yaml"
    path.write_text("fabrics:\n  - {id: my-net, name: Mine, kind: scale_out, link_gbit_per_s: 400, links_per_node: 8,\n"
                    "     efficiency: 0.9, source: my nccl-tests run,\n"
                    "     collective_curve: {collective: all_reduce, gpus: 16, algorithm: tree,\n"
                    f"     bytes: [32768, 1048576, 1073741824], busbw_gb_per_s: {bus}, source: my run}}}}\n"
                    "  - {id: my-net2, name: Mine 2, kind: scale_out, link_gbit_per_s: 200, links_per_node: 8,\n"
                    "     source: mine, collective_ramp: ib-ndr-400g}\n")
    monkeypatch.setenv(user.ENV, str(path))
    user.use_catalog(None)
    topo = topology(make_hardware("h100-sxm", gpus=16, scale_out="my-net"))
    assert topo.bw_out == pytest.approx(50e9 * 0.9)
    assert topo.share(2**30, 2**30 / 8) == 1.0
    assert topo.share(2**20, 2**20 / 8) == pytest.approx((t1g / 2**30 * 2**20) / (t1m - t32k), rel=1e-3)
    borrowed = topology(make_hardware("h100-sxm", gpus=16, scale_out="my-net2"))
    assert borrowed.out_share == curve_ramp(get_fabric("ib-ndr-400g", "scale_out").curve)[1]


def test_a_network_sweep_runs_over_two_nodes(tmp_path, monkeypatch, capsys):
    # the ramp is read per NIC from the sweep's GPUs per node, its ranks over two nodes: an odd count is one error
    from gpuplan.catalog import user
    from gpuplan.cli import main

    path = tmp_path / "odd.yaml"
    path.write_text("fabrics:\n  - {id: odd-net, name: Odd, kind: scale_out, link_gbit_per_s: 400, source: s,\n"
                    "     collective_curve: {collective: all_reduce, gpus: 9, algorithm: tree, bytes: [1024, 2048],\n"
                    "                        busbw_gb_per_s: [1, 2], source: s}}\n")
    monkeypatch.setenv(user.ENV, str(path))
    assert main(["evaluate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "collective_curve.gpus of a network sweep is its ranks over two nodes" in err and "Traceback" not in err


def test_a_ring_across_pcie_nodes_keeps_pcie_on_its_own_ramp():
    # the ring's intra-node steps ramp as the scale-up fabric does, the network's as the network's sweep: on PCIe nodes
    # (L40S) the PCIe steps set the pace, so the network's slower ramp must not slow them
    topo = _topo("l40s", 2, "roce-400g")
    t = reduce_scatter_s(4 * MiB, 16, 1, topo)
    intra = 15 / 16 * 4 * MiB * 7 / 8 / topo.group_bw(8) / topo.share(4 * MiB)
    inter = 15 / 16 * 4 * MiB / (8 * topo.bw_out) / topo.share(4 * MiB, topo.per_nic(4 * MiB, 8))
    assert intra > inter
    assert t == pytest.approx(intra + 2 * topo.ring_base - topo.ring_base + 14 * topo.hops[0] + topo.hops[1], rel=1e-9)


def test_a_network_sweep_is_no_nvlink_sweep(tmp_path, monkeypatch, capsys):
    # a scale-up fabric cannot borrow a network's two-node sweep (nor the other way round): one error, not a crash
    from gpuplan.catalog import user
    from gpuplan.cli import main

    path = tmp_path / "mix.yaml"
    path.write_text("fabrics:\n  - {id: my-up, name: Up, kind: scale_up, gb_per_s_per_gpu: 450, domain_gpus: 8,\n"
                    "     source: s, collective_curve: ib-ndr-400g}\n")
    monkeypatch.setenv(user.ENV, str(path))
    assert main(["evaluate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert "is not a scale_up fabric with a measured collective_curve" in err and "Traceback" not in err


@pytest.mark.parametrize(("gpu", "net"), [
    # source: AWS EC2 P4 page — '400 Gbps EFA' per p4d.24xlarge / p4de.24xlarge (4 x 100G)
    ("8x p4d.24xlarge", "efa-p4d"), ("p4de.24xlarge", "efa-p4d"),
    # source: AWS EC2 P5 page — '3200 Gbps EFAv2' per p5.48xlarge
    ("p5.48xlarge", "efa-p5"),
    # source: AWS EC2 P3 page — p3.16xlarge 25 Gbps (no EFA)
    ("p3.16xlarge", "eth-25g"),
    # source: Azure ND A100 v4 / NDm A100 v4 pages — 200 Gb/s HDR InfiniBand per GPU; DGX A100 datasheet: 8 x HDR
    ("ND A100 v4", "ib-hdr-200g"), ("NDm A100 v4", "ib-hdr-200g"), ("DGX A100 640GB", "ib-hdr-200g"),
    # a name with remarks is the system before them: its network too, not only its GPU
    ("p4d.24xlarge (AWS)", "efa-p4d"), ("p5.48xlarge, us-east-1", "efa-p5"),
])
def test_a_named_instance_brings_its_network(gpu, net):
    from gpuplan.io.scenario import parse_scenario

    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": gpu, "gpus": 64}, "training": {"seq_len": 4096}}
    sc = parse_scenario(raw)
    assert sc.hardware.scale_out.id == net
    # a network the scenario gives is kept
    raw["hardware"]["scale_out"] = "roce-400g"
    assert parse_scenario(raw).hardware.scale_out.id == "roce-400g"


def test_a_system_named_with_remarks_says_its_network_and_the_unread_remarks():
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "p4d.24xlarge (AWS)", "gpus": 16},
                         "training": {"seq_len": 4096}})
    (field, given, gid, why), = [r for r in sc.read_as if r[0] == "hardware.gpu"]
    assert (given, gid) == ("p4d.24xlarge (AWS)", "a100-40gb-sxm")
    assert "its network between nodes efa-p4d" in why and "remarks" in why and "aws.amazon.com" in why


def test_64_p4d_instances_train_slower_than_on_eight_400g_nics():
    # the p4d's four 100G EFA links carry an eighth of an 8 x 400G InfiniBand node's bandwidth: a 7B under ZeRO-3 on
    # 64 A100s waits longer on its gathers there than the same GPUs named without the instance
    from gpuplan.api import evaluate_scenario
    from gpuplan.io.scenario import parse_scenario

    def step(hw: dict) -> float:
        raw = {"model": {"params": 7e9}, "hardware": hw, "training": {"seq_len": 4096, "global_batch": 512},
               "layout": {"zero": 3, "micro_batch": 1}}
        return evaluate_scenario(parse_scenario(raw)).to_json()["time"]["step_s"]

    assert step({"gpu": "p4d.24xlarge", "gpus": 64}) > 1.2 * step({"gpu": "a100-40gb-sxm", "gpus": 64,
                                                                   "scale_out": "ib-ndr-400g"})
