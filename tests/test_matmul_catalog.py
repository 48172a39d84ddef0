"""Checks on catalog/matmul.json (published achievable-matmul measurements) and its loader."""

import json
from pathlib import Path

import pytest

from gpuplan.catalog.matmul import (
    fp8_scaling_costs,
    fp8_scaling_facts,
    matmul_profile,
    matmul_profiles,
    not_measured,
    not_measured_reason,
    shape_facts,
)

CATALOG = Path(__file__).parents[1] / "src/gpuplan/catalog"
GPUS = {g["id"]: g for g in json.loads((CATALOG / "gpus.json").read_text())["gpus"]}
RAW = json.loads((CATALOG / "matmul.json").read_text())


def _measurements():
    for p in matmul_profiles():
        for m in (p.measured, *p.alternates):
            yield p, m


def test_every_bf16_architecture_has_a_profile_or_a_reason():
    archs = {g["architecture"] for g in GPUS.values() if g["bf16_dense_tflops"]}
    assert archs  # the catalogue has bf16 GPUs
    for arch in sorted(archs):
        assert matmul_profile(arch, "bf16") is not None or not_measured_reason(arch, "bf16"), arch


def test_every_catalogued_precision_pair_is_covered():
    # fp8 too: a GPU with an fp8 peak has an fp8 profile or a stated reason
    for g in GPUS.values():
        for prec in ("bf16", "fp8"):
            if g[f"{prec}_dense_tflops"]:
                arch = g["architecture"]
                assert matmul_profile(arch, prec) or not_measured_reason(arch, prec), (arch, prec)


def test_not_measured_does_not_contradict_profiles():
    for n in not_measured():
        assert n.reason.strip()
        assert matmul_profile(n.architecture, n.precision) is None, (n.architecture, n.precision)


def test_architectures_are_those_of_the_catalogue():
    archs = {g["architecture"] for g in GPUS.values()}
    assert {p.architecture for p in matmul_profiles()} <= archs
    assert {n.architecture for n in not_measured()} <= archs


@pytest.mark.parametrize("profile", matmul_profiles(), ids=lambda p: f"{p.architecture}-{p.precision}")
def test_shares_are_fractions(profile):
    assert 0 < profile.mamf_share <= 1
    assert profile.msmf_share is None or 0 < profile.msmf_share <= profile.mamf_share
    assert profile.mamf_share == profile.measured.mamf_share
    for a in profile.anchors:
        assert 0 < a.share <= 1 and a.flops == 2 * a.m * a.n * a.k


def test_every_measurement_and_anchor_has_a_source():
    for _, m in _measurements():
        assert m.source.url.startswith("https://") and m.source.section.strip(), m.gpu
        assert 0 < m.mamf_share <= 1, m.gpu
        assert m.msmf_share is None or m.msmf_share <= m.mamf_share, m.gpu
        assert m.software.strip()
    for p in matmul_profiles():
        assert p.source == p.measured.source
        assert p.anchors or p.anchors_note.strip(), "say that no shape data is published"
        for a in p.anchors:
            assert a.source.url.startswith("https://")
    for fact in (*shape_facts(), *fp8_scaling_facts()):
        assert fact.fact.strip() and fact.source.url.startswith("https://")
    for cost in fp8_scaling_costs():
        assert cost.source.url.startswith("https://") and cost.kernels


def test_peaks_are_the_catalogue_datasheet_peaks():
    for p, m in _measurements():
        if m.gpu_id is not None:
            row = GPUS[m.gpu_id]
            assert row["architecture"] == p.architecture
            peak = {"mxfp4": "fp4"}.get(p.precision, p.precision)  # MXFP4 runs on the FP4 tensor cores
            assert m.peak_tflops == row[f"{peak}_dense_tflops"], (m.gpu_id, p.precision)


def test_stored_shares_match_the_numbers():
    for prof in RAW["profiles"]:
        for m in (prof["measured"], *prof["alternates"]):
            assert m["mamf_share"] == pytest.approx(m["mamf_tflops"] / m["peak_tflops"], abs=5e-4)
            if "msmf_tflops" in m:
                assert m["msmf_share"] == pytest.approx(m["msmf_tflops"] / m["peak_tflops"], abs=5e-4)
        for a in prof["anchors"]:
            assert a["share"] == pytest.approx(a["tflops"] / a["peak_tflops"], abs=5e-4)


def test_golden_published_numbers():
    h200 = matmul_profile("hopper", "bf16")
    # ML Engineering MAMF & MSMF table (commit 0359db8), BF16: H200 SXM MAMF 850, MSMF 755 of 989
    assert (h200.measured.mamf_tflops, h200.measured.msmf_tflops) == (850, 755)
    mi300x = matmul_profile("cdna3", "bf16").alternates[0]
    # AMD ROCm blog 'Measuring Max-Achievable FLOPs - Part 2', Table 1: MI300X MAF BF16 708 TFLOPs (1207 MHz)
    assert (mi300x.gpu_id, mi300x.mamf_tflops) == ("mi300x", 708)
    big = next(a for a in matmul_profile("hopper", "fp8").anchors if (a.m, a.n, a.k) == (4096, 7168, 16384))
    # DeepGEMM README (Feb 2025), 'Normal GEMMs for dense models', H800: M=4096 N=7168 K=16384 -> 1358 TFLOPS
    assert big.tflops == 1358


def test_shape_dependence_is_monotone_in_m_where_published():
    # DeepGEMM H800 fp8: for each (N, K), M=64 < M=128 < M=4096
    by_nk: dict = {}
    for a in matmul_profile("hopper", "fp8").anchors:
        by_nk.setdefault((a.n, a.k), {})[a.m] = a.share
    assert len(by_nk) == 6
    for shares in by_nk.values():
        assert shares[64] < shares[128] < shares[4096]


def test_lookup_is_lenient_in_spelling_and_strict_in_content():
    assert matmul_profile(" Hopper ", "bfloat16") is matmul_profile("hopper", "bf16")
    assert matmul_profile("hopper", "float8_e4m3fn") is matmul_profile("hopper", "fp8")
    assert matmul_profile("hopper", "tf32") is None and not_measured_reason("hopper", "tf32")
    assert matmul_profile("pascal", "bf16") is None and not_measured_reason("pascal", "bf16") is None


def test_fp8_scaling_costs():
    tensorwise = {c.role: c for c in fp8_scaling_costs("tensorwise")}
    # torchao roofline_utils: amax read (2 B) + cast read 2 B, write fp8 twice (2 x 1 B)
    assert tensorwise["input_or_grad_output"].bytes_per_element == 6
    assert {c.recipe for c in fp8_scaling_costs()} == {"tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8",
                                                       "delayed", "nvfp4", "mxfp4"}
    assert fp8_scaling_costs("no-such-recipe") == ()
    delayed = fp8_scaling_costs("delayed")[0]
    assert delayed.bytes_per_element < tensorwise["input_or_grad_output"].bytes_per_element


def test_every_architecture_has_a_gemm_kernel_model_with_cited_tiles():
    from gpuplan.catalog.matmul import kernel_model

    rows = RAW["kernel_model"]["architectures"]
    for arch in {g["architecture"] for g in GPUS.values()}:
        km = kernel_model(arch)
        assert km.tiles and all(tm % 64 == 0 and tn % 64 == 0 for tm, tn in km.tiles), arch
        assert km.splits[0] == 1 and km.floor_s > 0 and km.tile_k >= 0 and km.reduce_s >= 0
        row = rows.get(arch) or rows["default"]
        base = rows[row["as"]] if "as" in row else row
        assert base["tiles_source"] and base["split_source"] and base["tile_depth_source"]
    align = RAW["kernel_model"]["alignment"]
    assert align["bytes"] == 16 and 0 < align["factor"] < 1 and "cublas_tensor_core_usage" in align["source"]


def test_every_sweep_is_cited_and_measured_on_a_catalogue_gpu():
    from gpuplan.catalog.matmul import matmul_sweep

    for s in RAW["sweeps"]:
        assert s["source"] in RAW["sources"] and s["gpu_id"] in GPUS
        assert GPUS[s["gpu_id"]]["architecture"] == s["architecture"]
        sweep = matmul_sweep(s["architecture"], s["precision"])
        peak = GPUS[s["gpu_id"]][f"{s['precision']}_dense_tflops"]
        assert all(0 < tf < peak for *_, tf in sweep.points)
