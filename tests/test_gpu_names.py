"""GPUs and fabrics named as users write them (nvidia-smi, papers, cloud pages) find their catalogue row."""

import json
from pathlib import Path

import pytest

from gpuplan.catalog.hardware import _key, get_fabric, get_gpu
from gpuplan.errors import GpuplanError

CATALOG = Path(__file__).parents[1] / "src/gpuplan/catalog"


@pytest.mark.parametrize("name, gid", [
    ("H100 80GB HBM3", "h100-sxm"),            # nvidia-smi's name without the vendor
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("H100 SXM5 80GB HBM3", "h100-sxm"),
    ("h100_80gb", "h100-sxm"),
    ("A100 40GB PCIe", "a100-40gb-pcie"),       # the words in another order than the alias
    ("A100-PCIE-40GB", "a100-40gb-pcie"),
    ("NVIDIA A800-SXM4-80GB", "a800-80gb-sxm"),
    ("A800", "a800-80gb-sxm"),
    ("NVIDIA A800 80GB PCIe", "a800-80gb-pcie"),
    ("GH200", "gh200"),
    ("GH200 144GB", "gh200-144gb"),
    ("AMD Instinct MI250", "mi250"),
    ("MI250X", "mi250x"),
    ("MI210", "mi210"),
    ("Tesla V100-SXM2-16GB", "v100-16gb"),
    ("A10", "a10"),
    ("A10G", "a10g"),
    ("H20", "h20"),
    ("H200", "h200"),
    ("B100", "b100"),
    ("NVIDIA L20", "l20"),
    ("NVIDIA GeForce RTX 4080", "rtx-4080"),
    ("GeForce RTX 3090 Ti", "rtx-3090-ti"),
    ("RTX 2080 Ti", "rtx-2080-ti"),
    ("NVIDIA TITAN RTX", "titan-rtx"),
    ("Quadro RTX 8000", "quadro-rtx-8000"),
    ("NVIDIA RTX A4000", "rtx-a4000"),
    ("NVIDIA A2", "a2"),
    ("AMD Instinct MI300A", "mi300a"),
    ("MI300X OAM", "mi300x"),                   # AMD's module form factor is no part of the name
])
def test_a_gpu_as_users_write_it(name, gid):
    assert get_gpu(name).id == gid


@pytest.mark.parametrize("name, fid", [
    ("NDR", "ib-ndr-400g"), ("400G RoCE", "roce-400g"), ("100 GbE", "eth-100g"), ("NVLink 4", "nvlink4"),
    ("Slingshot", "slingshot-11"), ("EFA", "efa-p5"), ("EDR", "ib-edr-100g"),
])
def test_a_fabric_as_users_write_it(name, fid):
    assert get_fabric(name).id == fid


def test_no_two_catalogue_rows_share_a_lookup_key():
    for path, section in (("gpus.json", "gpus"), ("fabrics.json", "fabrics")):
        owner: dict[str, str] = {}
        for row in json.loads((CATALOG / path).read_text())[section]:
            for name in (row["id"], *row["aliases"]):
                assert owner.setdefault(_key(name), row["id"]) == row["id"], (name, owner[_key(name)])


def test_a_name_that_differs_in_a_number_is_not_matched():
    with pytest.raises(GpuplanError, match="unknown GPU 'H300'"):
        get_gpu("H300")


@pytest.mark.parametrize("words, fid", [
    # networks as papers describe them: InfiniBand by generation or rate per port, RoCE and Ethernet by rate
    ("200 Gb/s HDR InfiniBand", "ib-hdr-200g"), ("8x 400Gb/s InfiniBand", "ib-ndr-400g"), ("NDR 400", "ib-ndr-400g"),
    ("InfiniBand EDR", "ib-edr-100g"), ("XDR InfiniBand", "ib-xdr-800g"), ("Spectrum-X", "roce-400g"),
    ("RoCE 200G", "roce-200g"), ("100GbE", "eth-100g"), ("25 GbE", "eth-25g"), ("10 Gb Ethernet", "eth-10g"),
    # a rate given decides over the generation: an HDR port split to 100 Gb/s
    ("HDR 100Gb/s", "ib-edr-100g"), ("HDR100 InfiniBand", "ib-edr-100g"),
    # by product: NVIDIA Quantum switch generations, AWS EFA generations, Omni-Path
    ("NVIDIA Quantum-2", "ib-ndr-400g"), ("Quantum-X800", "ib-xdr-800g"), ("Mellanox Quantum HDR", "ib-hdr-200g"),
    ("AWS EFA", "efa-p5"), ("EFAv2", "efa-p5"), ("EFA v3 3200 Gbps", "efa-p5"), ("EFA v1", "efa-p4d"),
    ("EFA 400 Gbps", "efa-p4d"), ("Elastic Fabric Adapter", "efa-p5"), ("Omni-Path 100", "opa-100g"),
])
def test_a_network_described_in_words_is_its_fabric(words, fid):
    assert get_fabric(words, "scale_out").id == fid


def test_infiniband_without_a_generation_is_the_gpus_own_network_or_an_error():
    assert get_fabric("InfiniBand", "scale_out", default="ib-ndr-400g").id == "ib-ndr-400g"
    with pytest.raises(GpuplanError, match="unknown fabric 'InfiniBand'"):
        get_fabric("InfiniBand", "scale_out", default="eth-10g")
    with pytest.raises(GpuplanError, match="unknown fabric 'RoCEv2'"):
        get_fabric("RoCEv2", "scale_out")  # no rate: which one is not said
    with pytest.raises(GpuplanError, match="unknown fabric '3200 Gbps InfiniBand'"):
        get_fabric("3200 Gbps InfiniBand", "scale_out", default="ib-ndr-400g")  # a node's total, not a port's


@pytest.mark.parametrize("name, gid, bf16, fp8, memory_gib", [
    # RTX 5090: FP16 tensor 838.4 TFLOPS sparse (FP16 accumulate) = 419.2 dense; GeForce halves it with FP32
    # accumulate (NVIDIA RTX Blackwell whitepaper; 47.0 vs 87.9 TFLOP/s measured on an RTX 5060 Ti) -> 209.6
    ("GeForce RTX 5090", "rtx-5090", 209.6e12, None, 32),
    # RTX PRO 6000 Blackwell: 4,000 AI TOPS = FP4 sparse; dense BF16 503.8 (FP32 accumulate at full rate), FP8 1,007.6
    ("RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000", 503.8e12, 1007.6e12, 96),
    # H20: FP8 dense = its cited INT8 296 TOPS (Hopper runs FP8 and INT8 at one rate)
    ("NVIDIA H20", "h20", 148e12, 296e12, 96),
])
def test_recent_gpus_read_by_their_market_names_with_datasheet_rates(name, gid, bf16, fp8, memory_gib):
    g = get_gpu(name)
    assert g.id == gid
    assert g.peak_flops["bf16"] == bf16
    assert g.peak_flops.get("fp8") == fp8
    assert g.memory_bytes == memory_gib * 2**30


def test_consumer_blackwell_attends_with_flashattention2():
    # sm_120 has no tcgen05 / tensor memory: FlashAttention-3/4 do not run there; FA2 does
    from gpuplan.model.attention import attention_kernel
    for gid in ("rtx-5090", "rtx-pro-6000"):
        assert attention_kernel("generic", get_gpu(gid).architecture) == "flash2"


@pytest.mark.parametrize("name, gid", [
    ("RTX 4090 24GB", "rtx-4090"), ("L40S 48 GB", "l40s"), ("H200 141GB", "h200"), ("RTX 3090 24 GB", "rtx-3090"),
    ("MI300X 192GB", "mi300x"),
    # the family's other memory size, nearest the named part in form factor: "A100" alone is the 80 GB SXM part
    ("A100-40G", "a100-40gb-sxm"), ("A100 40G", "a100-40gb-sxm"), ("A100-PCIE-40G", "a100-40gb-pcie"),
    ("V100-16G", "v100-16gb"),
])
def test_a_name_with_a_memory_size_is_the_card_of_that_size(name, gid):
    assert get_gpu(name).id == gid


@pytest.mark.parametrize("name", [
    "RTX 4090 48GB",  # a modified card, not the catalogue's 24 GB one
    "A100 48GB",      # no A100 of that size
])
def test_a_memory_size_no_part_of_the_family_has_matches_nothing(name):
    with pytest.raises(GpuplanError, match=f"unknown GPU '{name}'"):
        get_gpu(name)


@pytest.mark.parametrize("name, gid", [
    # AWS EC2 P4/P5 pages: p4d.24xlarge 8x A100 40 GB, p4de 8x A100 80 GB, p5.48xlarge 8x H100 80 GB, p5en 8x H200
    ("p4d.24xlarge", "a100-40gb-sxm"), ("p4de.24xlarge", "a100-80gb-sxm"), ("p5.48xlarge", "h100-sxm"),
    ("p5en.48xlarge", "h200"), ("g5.12xlarge", "a10g"),
    # Azure ND series pages: ND A100 v4 8x A100 40 GB, NDm A100 v4 80 GB, ND H100 v5, ND MI300X v5
    ("Standard_ND96asr_v4", "a100-40gb-sxm"), ("NDm A100 v4", "a100-80gb-sxm"), ("ND H100 v5", "h100-sxm"),
    ("ND MI300X v5", "mi300x"),
    # Google Cloud accelerator-optimized machines: A2 High 40 GB, A2 Ultra 80 GB, A3 High/Mega H100, A3 Ultra H200
    ("a2-highgpu-8g", "a100-40gb-sxm"), ("a2-ultragpu-8g", "a100-80gb-sxm"), ("a3-megagpu-8g", "h100-sxm"),
    ("A3 Ultra", "h200"), ("A2 Ultra", "a100-80gb-sxm"),
    # DGX-2 / DGX-2H datasheets: 16x V100 32 GB on NVSwitch
    ("DGX-2", "v100-32gb"), ("DGX-2H", "v100-32gb"),
    # DGX A100 datasheet: the 320 GB system holds 40 GB A100s, the 640 GB one 80 GB; DGX/HGX + a GPU name is that GPU
    ("DGX A100 320GB", "a100-40gb-sxm"), ("DGX A100 640GB", "a100-80gb-sxm"), ("DGX H100", "h100-sxm"),
    ("NVIDIA DGX-H200", "h200"), ("HGX A100 40GB", "a100-40gb-sxm"), ("HGX B200", "b200"),
])
def test_systems_and_cloud_instances_name_their_gpu(name, gid):
    assert get_gpu(name).id == gid


def test_a_system_name_is_said_under_read_as():
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "p4d.24xlarge", "gpus": 8}})
    (field, given, value, rule), = [w for w in sc.read_as if w[0] == "hardware.gpu"]
    assert (given, value) == ("p4d.24xlarge", "a100-40gb-sxm") and "aws.amazon.com/ec2/instance-types/p4" in rule
    # a GPU's own name is no reading
    assert not [w for w in parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "A100 40GB"}}).read_as
                if w[0] == "hardware.gpu"]


def test_a_system_of_sixteen_gpus_is_its_node():
    from gpuplan.io.scenario import parse_scenario

    # NVIDIA DGX-2 datasheet: 16 V100s a system, as the ZeRO (arXiv:1910.02054) and Megatron-LM (arXiv:1909.08053)
    # runs used them: 64 GPUs are 4 nodes, said with the GPU
    sc = parse_scenario({"model": "gpt2-xl", "hardware": {"gpu": "DGX-2H", "gpus": 64}})
    assert (sc.hardware.gpus_per_node, sc.hardware.nodes) == (16, 4)
    assert any(w[0] == "hardware.gpu" and "16 GPUs per node" in w[3] for w in sc.read_as)
    # a node the scenario gives stands
    sc = parse_scenario({"model": "gpt2-xl", "hardware": {"gpu": "DGX-2", "gpus": 32, "gpus_per_node": 8}})
    assert sc.hardware.gpus_per_node == 8


def test_an_unknown_instance_is_still_refused_with_suggestions():
    with pytest.raises(GpuplanError, match="unknown GPU 'p9.48xlarge'"):
        get_gpu("p9.48xlarge")


def test_every_system_name_resolves_to_its_own_gpu():
    # no system name is shadowed by a GPU name or another system's (catalog/systems.json)
    rows = json.loads((Path(__file__).resolve().parents[1] / "src/gpuplan/catalog/systems.json").read_text())["systems"]
    for row in rows:
        assert row["source"].count("https://") >= 1
        for name in row["names"]:
            assert get_gpu(name).id == row["gpu"], name


@pytest.mark.parametrize("name, gid", [
    # as papers' and benchmark tables' hardware columns write them: remarks in parentheses or after a comma
    ("A100-SXM4-80GB (Selene)", "a100-80gb-sxm"),
    ("V100-32GB (DGX-2)", "v100-32gb"),
    ("H100-SXM5-80GB (DGX H100)", "h100-sxm"),
    ("H100-80GB HBM3, 700 W TDP (Grand Teton)", "h100-sxm"),
    ("L4 (AD104, 72 W)", "l4"),
    ("GeForce RTX 4090 (AD102)", "rtx-4090"),
    ("GB200 (per B200-class GPU in NVL72)", "gb200"),
    ("A10 (GA102, 24GB GDDR6)", "a10"),
])
def test_a_name_with_remarks_is_read_as_the_gpu_it_names_and_says_so(name, gid):
    from gpuplan.io.scenario import parse_scenario

    assert get_gpu(name).id == gid
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": name, "gpus": 8}})
    (reading,) = [r for r in sc.read_as if r[0] == "hardware.gpu"]
    assert reading[1:3] == (name, gid) and "remarks" in reading[3]


def test_remarks_do_not_rescue_an_unknown_gpu():
    with pytest.raises(GpuplanError, match="'Gaudi2 \\(HLS-Gaudi2\\)' is an Intel Gaudi HPU, not a GPU"):
        get_gpu("Gaudi2 (HLS-Gaudi2)")
    with pytest.raises(GpuplanError, match="unknown GPU 'Z100 \\(our lab\\)'"):
        get_gpu("Z100 (our lab)")
    assert get_gpu("A100 (80GB)").id == "a100-80gb-sxm"  # parentheses as separators: the name itself


@pytest.mark.parametrize("name, kind, default, fid", [
    # RDMA of a stated rate, its kind not stated: the GPU's own network at that rate, else InfiniBand's
    ("RDMA backend network, 400 Gb/s per GPU", "scale_out", "ib-ndr-400g", "ib-ndr-400g"),
    ("400 Gb/s per GPU RDMA (ConnectX-7)", "scale_out", "roce-400g", "roce-400g"),
    ("RDMA 200 Gb/s", "scale_out", "ib-ndr-400g", "ib-hdr-200g"),
    # remarks in parentheses or after a comma
    ("PCIe4, no NVLink", "scale_up", None, "pcie4"),
    ("PCIe5 (63 GB/s uni)", "scale_up", None, "pcie5"),
    ("NVLink4 (900 GB/s bidir)", "scale_up", None, "nvlink4"),
])
def test_a_network_as_papers_describe_it(name, kind, default, fid):
    assert get_fabric(name, kind, default=default).id == fid


def test_rdma_without_a_rate_is_not_guessed():
    with pytest.raises(GpuplanError, match="unknown fabric 'RDMA'"):
        get_fabric("RDMA", "scale_out", default="ib-ndr-400g")


@pytest.mark.parametrize("network, gpu, fid", [
    # a rate per node is shared by the node's GPUs (llm-foundry's A100 table: "1600 Gbps per node (RoCE)")
    ("1600 Gbps per node (RoCE)", "a100-80gb-sxm", "roce-200g"),
    ("3.2 Tbps per node InfiniBand", "h100-sxm", "ib-ndr-400g"),
    ("1600 Gb/s per node InfiniBand", "gb200", "ib-ndr-400g"),  # a GB200 tray: 4 GPUs
    # a figure above any one port's 800 Gb/s is the node's NICs together (Azure ND H100 v5: "3.2 Tbps InfiniBand")
    ("3.2 Tbps InfiniBand", "h100-sxm", "ib-ndr-400g"),
    ("1,600 Gbps node-node interconnect (RoCE)", "a100-80gb-sxm", "roce-200g"),
    ("800 Gb/s InfiniBand", "h100-sxm", "ib-xdr-800g"),  # one XDR port: a port's rate, not the node's
])
def test_a_network_rate_per_node_is_read_per_gpu(network, gpu, fid):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": gpu, "gpus": 16, "scale_out": network}})
    assert sc.hardware.scale_out.id == fid


def test_a_rate_per_node_that_names_no_network_says_so():
    from gpuplan.io.scenario import parse_scenario

    with pytest.raises(GpuplanError, match="shared by the node's 8 GPUs it is '50 Gb/s per GPU Ethernet'"):
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 16,
                                                               "scale_out": "400 Gbps per node Ethernet"}})


@pytest.mark.parametrize("name, kind", [("Gaudi2", "Intel Gaudi"), ("Intel Gaudi 3", "Intel Gaudi"),
                                        ("TPU v5p", "Google TPU"), ("TPUv4", "Google TPU"),
                                        ("Ascend 910B", "Huawei Ascend"), ("Trainium2", "AWS Trainium")])
def test_an_accelerator_that_is_no_gpu_is_named_with_the_way_to_estimate_it(name, kind):
    from gpuplan.catalog.hardware import get_gpu

    with pytest.raises(GpuplanError, match=f"is an? {kind}.*not a GPU gpuplan models.*user catalogue"):
        get_gpu(name)


def test_grace_hopper_by_its_full_name():
    from gpuplan.catalog.hardware import get_gpu

    assert get_gpu("NVIDIA GH200 Grace Hopper Superchip").id == get_gpu("GH200 Grace Hopper").id == "gh200"


@pytest.mark.parametrize(("name", "gpu", "count"), [
    # an HGX baseboard is the GPU's 8-GPU system ('HGX B200' was read as one B200: the name was a GPU alias)
    ("HGX B200", "b200", 8), ("HGX-B300", "b300", 8),
    # NVIDIA GB200 NVL72 page: 'connects 36 Grace CPUs and 72 Blackwell GPUs in a rack-scale design'; DGX GB200 is
    # that rack — 72 GPUs over 18 trays of the GPU's 4 (a tray was read as the system)
    ("GB200 NVL72", "gb200", 72), ("DGX GB200", "gb200", 72), ("GB300 NVL72", "gb300", 72),
])
def test_a_system_named_without_a_count_is_one_whole_system(name, gpu, count):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": name}, "training": {"seq_len": 4096}})
    assert (sc.hardware.gpu.id, sc.hardware.gpus) == (gpu, count)
    assert sc.hardware.gpus_per_node == {"b200": 8, "b300": 8}.get(gpu, 4)  # the rack keeps its 4-GPU trays


@pytest.mark.parametrize(("name", "gpu", "count"), [
    # a count joined to the GPU's name, as shell scripts and cluster names write it; a GPU's own name that ends in a
    # letter x and digits is its name, not a count ('RTX3090')
    ("H100x8", "h100-sxm", 8), ("A100*16", "a100-80gb-sxm", 16), ("RTX3090", "rtx-3090", 1),
])
def test_a_count_joined_to_the_gpu_name(name, gpu, count):
    from gpuplan.io.scenario import parse_scenario

    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": name}, "training": {"seq_len": 4096}})
    assert (sc.hardware.gpu.id, sc.hardware.gpus) == (gpu, count)
