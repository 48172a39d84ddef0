"""GPUs per node as a count reads them, and the scale-up domain inside a node (catalog/hardware.node_for,
spec/hardware.scale_up_gpus)."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate_scenario, plan_scenario
from gpuplan.catalog.hardware import make_hardware
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.comm import topology
from gpuplan.search.space import tp_domain


def test_a_count_of_4_gpu_nodes_is_read_as_such_and_said():
    # 12 A100s are no whole number of 8-GPU nodes (DGX/HGX A100 8-GPU): three 4-GPU nodes (HGX A100 4-GPU,
    # Perlmutter, Polaris, Leonardo, JUWELS Booster) — before, an error
    sc = parse_scenario({"model": "llama-2-7b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 12},
                         "training": {"tokens": 1e9}})
    assert (sc.hardware.gpus_per_node, sc.hardware.nodes) == (4, 3)
    rule = next(a for a in evaluate_scenario(sc).to_json()["assumed"] if a["field"] == "hardware.gpus_per_node")
    assert rule["value"] == 4 and rule["rule"].startswith("12 GPUs are no whole number of the GPU's usual 8-GPU nodes")
    # the host memory is the reference node's per GPU (DGX A100 640GB: 2 TB over 8) times 4
    assert sc.hardware.host_memory_bytes == pytest.approx(2000e9 / 8 * 4)


@pytest.mark.parametrize("gpus, per_node", [(8, 8), (16, 8), (4, 8), (20, 4), (36, 4)])
def test_whole_nodes_keep_the_usual_node(gpus, per_node):
    assert make_hardware("h100-sxm", gpus=gpus).gpus_per_node == per_node


def test_a_count_no_node_size_divides_is_still_refused_with_the_counts_that_fit():
    with pytest.raises(GpuplanError, match=r"hardware.gpus=9 is more than one node but not a multiple of "
                                           r"gpus_per_node=8: use 8 or 16"):
        make_hardware("a100-80gb-sxm", gpus=9)


def test_an_8_gpu_nvlink_board_in_a_4_gpu_node_joins_4():
    # NVLink 3's domain is an HGX board's 8 GPUs; a node of 4 holds 4 of them: tp 8 crosses the network
    four = make_hardware("a100-80gb-sxm", gpus=16, gpus_per_node=4)
    eight = make_hardware("a100-80gb-sxm", gpus=16)
    assert (topology(four).domain, tp_domain(four)) == (4, 4)
    assert (topology(eight).domain, tp_domain(eight)) == (8, 8)

    def tp_s(hw):
        sc = parse_scenario({"model": "llama-2-13b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 16,
                                                                  "gpus_per_node": hw.gpus_per_node},
                             "training": {"seq_len": 4096, "tokens": 1e9}, "layout": {"tp": 8, "pp": 1}})
        return evaluate_scenario(sc).to_json()["time"]["comm_detail"]["tp"]
    assert tp_s(four) > 1.3 * tp_s(eight)


def test_rack_scale_and_bridged_domains_are_unchanged():
    # GB200 NVL72: 72 GPUs over 4-GPU trays; H100 NVL: bridged pairs in a node of 8 talk over PCIe
    assert topology(make_hardware("gb200", gpus=72)).domain == 72
    assert tp_domain(make_hardware("gb200", gpus=72)) == 72
    assert topology(make_hardware("h100-nvl", gpus=8)).domain == 8


def test_a_plan_on_4_gpu_nodes_keeps_tensor_parallelism_inside_the_node():
    sc = parse_scenario({"model": "llama-2-70b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 12},
                         "training": {"seq_len": 4096, "tokens": 1e12}})
    res = plan_scenario(sc).result
    assert res.best is not None and res.best.gpus == 12 and res.best.layout.tp <= 4


# the network between nodes a data-center GPU's reference node has (gpus.json scale_out, each cited): bytes per
# second per GPU before the fabric's efficiency
@pytest.mark.parametrize("gpu, fabric, gbit_per_gpu", [
    # NVIDIA DGX-1 (V100) datasheet: 4 IB EDR per 8 GPUs
    ("v100-32gb", "ib-edr-100g", 50),
    # NVIDIA DGX A100 datasheet: 8x ConnectX-6 200Gb/s HDR InfiniBand
    ("a100-80gb-sxm", "ib-hdr-200g", 200), ("a100-40gb-sxm", "ib-hdr-200g", 200),
    # OLCF Frontier user guide: four Slingshot 200 Gbps NICs per node of 8 GCDs
    ("mi250x", "slingshot-11", 100),
    # H100/H200 HGX: one NDR 400 Gb/s NIC per GPU (the default)
    ("h100-sxm", "ib-ndr-400g", 400),
    # NVIDIA DGX B300 user guide: eight ConnectX-8 at 800 Gb/s
    ("b300", "ib-xdr-800g", 800),
    # NVIDIA AI Enterprise RA, H200 NVL PCIe Optimized 2-8-5: four 400G east-west NICs per eight cards
    ("h200-nvl", "roce-400g-x4", 200),
])
def test_a_data_center_gpu_plans_on_its_generations_network(gpu, fabric, gbit_per_gpu):
    hw = make_hardware(gpu, gpus=64)
    assert hw.scale_out.id == fabric
    nics = min(hw.scale_out.links_per_node, hw.gpus_per_node)
    assert hw.scale_out.link_bytes_per_s * nics / hw.gpus_per_node == pytest.approx(gbit_per_gpu * 1e9 / 8)


def test_the_answer_cites_the_network_it_assumed():
    from gpuplan.api import evaluate_scenario

    est = evaluate_scenario(parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h200-nvl", "gpus": 32},
                                            "training": {"seq_len": 4096}})).to_json()
    (rule,) = [a["rule"] for a in est["assumed"] if a["field"] == "hardware.scale_out"]
    assert "PCIe Optimized 2-8-5" in rule and "docs.nvidia.com" in rule


def test_an_open_gpu_count_is_said_where_evaluate_answers_on_one_gpu():
    # evaluate with hardware.gpus open answers on one GPU and says so (DESIGN: every filled field under assumed);
    # a given count, or one a plan's search chose, is no assumption
    def gpus_rule(raw):
        return [a for a in evaluate_scenario(parse_scenario(raw)).to_json()["assumed"] if a["field"] == "hardware.gpus"]

    base = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm"}, "training": {"tokens": 1e9}}
    (rule,) = gpus_rule(base)
    assert rule["value"] == 1 and "gpuplan fit" in rule["rule"]
    assert gpus_rule({**base, "hardware": {"gpu": "h100-sxm", "gpus": 8}}) == []
    best = plan_scenario(parse_scenario(base)).to_json()["best"]
    assert best["scenario"]["hardware"]["gpus"] >= 1
    assert not [a for a in best["assumed"] if a["field"] == "hardware.gpus"]
