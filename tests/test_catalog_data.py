"""Checks on the cited hardware catalogue (gpus.json, fabrics.json).

Reads the JSON directly so it does not depend on any loader code.
"""

import json
from pathlib import Path

import pytest

CATALOG = Path(__file__).parents[1] / "src/gpuplan/catalog"
GPUS_PATH = CATALOG / "gpus.json"
FABRICS_PATH = CATALOG / "fabrics.json"

GPU_KEYS = {
    "id", "name", "aliases", "vendor", "architecture", "memory_gib", "usable_memory_mib",
    "memory_bw_tb_per_s", "fp32_dense_tflops", "tf32_dense_tflops", "bf16_dense_tflops",
    "fp16_dense_tflops", "fp8_dense_tflops", "fp4_dense_tflops", "scale_up", "scale_up_gb_per_s",
    "gpus_per_node", "scale_up_domain", "tdp_w", "price_usd_per_gpu_hour", "price_date",
    "price_source", "source", "notes", "sm_count",
}
GPU_NUMERIC = [
    "memory_gib", "usable_memory_mib", "memory_bw_tb_per_s", "fp32_dense_tflops",
    "tf32_dense_tflops", "bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops",
    "fp4_dense_tflops", "scale_up_gb_per_s", "gpus_per_node", "scale_up_domain", "tdp_w",
    "price_usd_per_gpu_hour",
]
FABRIC_COMMON = {"id", "name", "aliases", "kind", "latency_us", "source"}
FABRIC_KIND_KEYS = {
    "scale_up": {"gb_per_s_per_gpu", "domain_gpus"},
    "scale_out": {"link_gbit_per_s", "links_per_node", "efficiency"},
}
FABRIC_NUMERIC = [
    "gb_per_s_per_gpu", "domain_gpus", "latency_us", "link_gbit_per_s", "links_per_node",
    "efficiency",
]
REQUIRED_GPU_IDS = {
    "h100-sxm", "h100-pcie", "h100-nvl", "a100-80gb-sxm", "a100-40gb-sxm", "a100-80gb-pcie",
    "a100-40gb-pcie", "v100-32gb", "a10g", "l4", "l40s", "rtx-4090", "rtx-6000-ada", "h800",
    "h200", "b200", "gb200", "gb300", "mi250x", "mi300x", "mi325x",
}


@pytest.fixture(scope="module")
def gpus():
    return json.loads(GPUS_PATH.read_text())["gpus"]


@pytest.fixture(scope="module")
def fabrics():
    return json.loads(FABRICS_PATH.read_text())["fabrics"]


def _by_id(rows):
    return {r["id"]: r for r in rows}


def _names(rows):
    out = []
    for r in rows:
        out.append(r["id"].lower())
        out.extend(a.lower() for a in r["aliases"])
    return out


def test_files_have_comment_and_rows():
    for path, key in ((GPUS_PATH, "gpus"), (FABRICS_PATH, "fabrics")):
        doc = json.loads(path.read_text())
        assert doc.get("_comment"), f"{path.name} lacks a _comment"
        assert isinstance(doc[key], list) and doc[key]


# a GPU that comes in instances with their own network names it, with the source (gpus.json); a GPU priced from
# the price catalogue names the provider (price_provider)
GPU_OPTIONAL = {"scale_out", "scale_out_source", "host_memory_gb_per_node", "host_memory_source", "price_provider"}


def test_gpu_rows_have_exactly_required_keys(gpus, fabrics):
    fabric_ids = {f["id"] for f in fabrics}
    for g in gpus:
        assert set(g) - GPU_OPTIONAL == GPU_KEYS, (g.get("id"), (set(g) - GPU_OPTIONAL) ^ GPU_KEYS)
        assert ("scale_out" in g) == ("scale_out_source" in g), g["id"]
        assert ("host_memory_gb_per_node" in g) == ("host_memory_source" in g), g["id"]
        assert g.get("scale_out", "ib-ndr-400g") in fabric_ids, g["id"]
        assert g["vendor"] in {"nvidia", "amd"}
        assert isinstance(g["aliases"], list)


def test_fabric_rows_have_required_keys(fabrics):
    for f in fabrics:
        assert f["kind"] in FABRIC_KIND_KEYS, f["id"]
        missing = (FABRIC_COMMON | FABRIC_KIND_KEYS[f["kind"]]) - set(f)
        assert not missing, (f["id"], missing)
        assert isinstance(f["aliases"], list)


def test_gpu_ids_and_aliases_unique_case_insensitive(gpus):
    names = _names(gpus)
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes


def test_fabric_ids_and_aliases_unique_case_insensitive(fabrics):
    names = _names(fabrics)
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes


def test_every_scale_up_names_a_scale_up_fabric(gpus, fabrics):
    fab = _by_id(fabrics)
    for g in gpus:
        assert g["scale_up"] in fab, (g["id"], g["scale_up"])
        assert fab[g["scale_up"]]["kind"] == "scale_up", g["id"]


def test_numeric_fields_positive_where_present(gpus, fabrics):
    for g in gpus:
        for k in GPU_NUMERIC:
            v = g[k]
            assert v is None or (isinstance(v, (int, float)) and v > 0), (g["id"], k, v)
    for f in fabrics:
        for k in FABRIC_NUMERIC:
            v = f.get(k)
            assert v is None or (isinstance(v, (int, float)) and v > 0), (f["id"], k, v)
        if f.get("efficiency") is not None:
            assert f["efficiency"] <= 1


def test_precision_ordering(gpus):
    for g in gpus:
        bf16, fp16, fp8 = g["bf16_dense_tflops"], g["fp16_dense_tflops"], g["fp8_dense_tflops"]
        if bf16 is not None and fp8 is not None:
            assert bf16 < fp8, g["id"]
        if bf16 is not None and fp16 is not None:
            assert fp16 >= bf16, g["id"]


def test_every_row_has_a_source(gpus, fabrics):
    for row in gpus + fabrics:
        assert isinstance(row["source"], str) and row["source"].strip(), row["id"]


def test_prices_carry_date_and_source(gpus):
    for g in gpus:
        if g["price_usd_per_gpu_hour"] is not None:
            assert g["price_date"] and g["price_source"], g["id"]


def test_required_gpu_ids_present(gpus):
    assert REQUIRED_GPU_IDS <= set(_by_id(gpus))


def test_golden_values(gpus):
    g = _by_id(gpus)
    # source: NVIDIA H100 datasheet, BF16 1,979 TFLOPS with sparsity -> 989.4 dense (Hopper whitepaper)
    assert g["h100-sxm"]["bf16_dense_tflops"] == pytest.approx(989.4, rel=0.01)
    # source: NVIDIA H100 datasheet, H100 SXM GPU memory 80 GB
    assert g["h100-sxm"]["memory_gib"] == 80
    # source: NVIDIA A100 datasheet, A100 80GB SXM memory bandwidth 2,039 GB/s
    assert g["a100-80gb-sxm"]["memory_bw_tb_per_s"] == pytest.approx(2.039)
    # source: AMD Instinct MI300X datasheet / ROCm MI300 docs, 192 GB HBM3
    assert g["mi300x"]["memory_gib"] == 192
    # source: NVIDIA L40 datasheet, BFLOAT16 Tensor Core 181.05 | 362.1* TFLOPS (* = with sparsity)
    assert g["l40"]["bf16_dense_tflops"] == pytest.approx(181.05)
    # source: NVIDIA A40 datasheet, memory bandwidth 696 GB/s
    assert g["a40"]["memory_bw_tb_per_s"] == pytest.approx(0.696)
    # source: NVIDIA A800 datasheet, A800 80GB SXM: 2,039 GB/s, NVLink 400 GB/s (bidirectional: 200 per direction)
    assert g["a800-80gb-sxm"]["memory_bw_tb_per_s"] == pytest.approx(2.039)
    assert g["a800-80gb-sxm"]["scale_up_gb_per_s"] == 200
    # source: NVIDIA GH200 datasheet, 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at 4.9 TB/s; BF16 1,979* TFLOPS -> 989.4
    assert (g["gh200"]["memory_gib"], g["gh200"]["memory_bw_tb_per_s"]) == (96, pytest.approx(4.0))
    assert (g["gh200-144gb"]["memory_gib"], g["gh200-144gb"]["memory_bw_tb_per_s"]) == (144, pytest.approx(4.9))
    assert g["gh200"]["bf16_dense_tflops"] == pytest.approx(989.4)
    # source: AMD MI250 spec page, 362.1 TFLOPS FP16/BF16 per OAM of 2 GCDs -> 181 per GCD; MI210 181.0, 1.6384 TB/s
    assert g["mi250"]["bf16_dense_tflops"] == pytest.approx(362.1 / 2, rel=1e-3)
    assert g["mi210"]["memory_bw_tb_per_s"] == pytest.approx(1.6384)
    # source: NVIDIA A30 datasheet, BF16 165 | 330* TFLOPS, 24 GB HBM2 at 933 GB/s
    assert (g["a30"]["bf16_dense_tflops"], g["a30"]["memory_gib"]) == (pytest.approx(165.0), 24)
    # source: NVIDIA HGX B100 table, FP16/BF16 3.5 PF and FP8 7 PF "with sparsity" -> 1,750 and 3,500 dense; 700 W
    assert (g["b100"]["bf16_dense_tflops"], g["b100"]["fp8_dense_tflops"], g["b100"]["tdp_w"]) == (1750.0, 3500.0, 700)
    # source: NVIDIA Quadro RTX 8000 datasheet, 130.5 Tensor TFLOPS (FP16 or FP32 accumulate), 672 GB/s, 48 GB
    assert (g["quadro-rtx-8000"]["fp16_dense_tflops"], g["quadro-rtx-8000"]["memory_bw_tb_per_s"]) == (130.5, 0.672)
    # source: NVIDIA RTX A4000 datasheet, Tensor performance 153.4 TFLOPS (with sparsity) -> 76.7 dense; 448 GB/s
    assert (g["rtx-a4000"]["bf16_dense_tflops"], g["rtx-a4000"]["memory_bw_tb_per_s"]) == (76.7, 0.448)
    # source: AMD MI300A specifications, peak BF16 980.6 TFLOPS, 128 GB HBM3 at 5.3 TB/s, 4 APUs per node (LLNL)
    m = g["mi300a"]
    assert (m["bf16_dense_tflops"], m["memory_gib"], m["gpus_per_node"]) == (980.6, 128, 4)
