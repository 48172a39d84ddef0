"""The price catalogue (catalog/prices.json, catalog/prices.py): every built-in row passes the rules a user's row
must pass, rows are the published figures (source on the line above), and the user catalogue adds or replaces rows."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from gpuplan.catalog import load_json
from gpuplan.catalog.prices import (
    GEOS,
    PRICINGS,
    STALE_AFTER_DAYS,
    builtin_rows,
    check_price_row,
    find_prices,
    prices,
)
from gpuplan.catalog.user import use_catalog
from gpuplan.cli import main
from gpuplan.errors import GpuplanError

GPU_IDS = {r["id"] for r in load_json("gpus.json")["gpus"]}
TODAY = dt.date(2026, 12, 2)


@pytest.fixture
def catalog(tmp_path):
    """Write a user catalogue and use it for this test only."""
    def write(text: str):
        path = tmp_path / "mine.yaml"
        path.write_text(text)
        use_catalog(str(path))
        return str(path)

    yield write
    use_catalog(None)


def test_built_in_rows_pass_the_rules_user_rows_must_pass():
    for i, row in enumerate(builtin_rows()):
        check_price_row(row, f"prices.json[{i}]", GPU_IDS, TODAY)
    keys = [(r["provider"], r["region"], r["gpu"], r["pricing"]) for r in builtin_rows()]
    assert len(keys) == len(set(keys)), "one price per provider × region × GPU × pricing"


def test_a_gpus_default_price_is_its_providers_newest_list_price():
    # gpus.json price_provider: the GPU's default price (hardware.price_per_gpu_hour not given) is that provider's
    # newest on-demand row here, so the two catalogues cannot drift apart (H100 SXM was $2.69 from a May 2026
    # transcription while RunPod's own page read $3.99 in November)
    named = [g for g in load_json("gpus.json")["gpus"] if g.get("price_provider")]
    assert {g["id"] for g in named} >= {"h100-sxm", "h200", "a100-80gb-sxm", "b200"}
    for g in named:
        rows = [r for r in builtin_rows() if r["gpu"] == g["id"] and r["provider"] == g["price_provider"]
                and r["pricing"] == "on_demand"]
        newest = max(rows, key=lambda r: r["date"])
        assert (g["price_usd_per_gpu_hour"], g["price_date"]) == (newest["usd_per_gpu_hour"], newest["date"]), g["id"]
    # RunPod pricing (Secure Cloud pods), read 2026-11-09: H100 SXM $3.99 per GPU-hour
    assert next(g for g in named if g["id"] == "h100-sxm")["price_usd_per_gpu_hour"] == 3.99


def test_what_the_catalogue_holds():
    rows = builtin_rows()
    assert Counter(r["provider"] for r in rows) == {"gcp": 42, "aws": 12, "runpod": 7, "coreweave": 5, "lambda": 4,
                                                    "azure": 3, "hyperstack": 3, "nebius": 2}
    assert {r["pricing"] for r in rows} == set(PRICINGS) and {r["geo"] for r in rows} <= set(GEOS)
    eu = {(r["provider"], r["region"]) for r in rows if r["geo"] == "eu"}
    assert eu == {("gcp", "europe-west4"), ("gcp", "europe-west1"), ("gcp", "europe-north1"), ("gcp", "europe-west3"),
                  ("aws", "eu-north-1")}


# Google Cloud Billing Catalog API via Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml generated 2025-03-06:
# a3-highgpu-1g europe-west4 hour 14.0675598969041, hour_spot 3.96990063013699, month_1y 7123.99568024 (730 h)
@pytest.mark.parametrize(("pricing", "usd"), [("on_demand", 14.0676), ("spot", 3.9699),
                                              ("reserved_1y", round(7123.99568024 / 730, 4))])
def test_gcp_h100_in_the_netherlands(pricing, usd):
    (p,) = find_prices(provider="gcp", region="europe-west4", gpu="h100-sxm", pricing=pricing)
    assert p.usd_per_gpu_hour == usd and p.geo == "eu" and p.date == dt.date(2025, 3, 6)
    assert p.stale(TODAY) and p.age_days(TODAY) == 636 > STALE_AFTER_DAYS


# dstack PR #4110 (2026-08-06): `dstack offer` p5en.48xlarge (8× H200) eu-north-1 $67.7267 on-demand, $39.8158 spot
def test_aws_h200_in_stockholm():
    od, = find_prices(provider="aws", region="eu-north-1", pricing="on_demand")
    spot, = find_prices(provider="aws", region="eu-north-1", pricing="spot")
    assert (od.gpu, od.usd_per_gpu_hour, spot.usd_per_gpu_hour) == ("h200", 8.4658, 4.977)
    assert od.instance == "p5en.48xlarge" and od.date == dt.date(2026, 8, 6)


# CoreWeave pricing page as transcribed 2026-09-20: HGX H100 $49.24/h for 8 GPUs, spot $19.71/h (North America)
def test_coreweave_per_gpu_is_the_instance_price_over_its_gpus():
    (od,) = find_prices(provider="coreweave", gpu="h100-sxm", pricing="on_demand")
    assert od.usd_per_gpu_hour == round(49.24 / 8, 4) and od.region == "north-america"


def test_find_prices_is_cheapest_first_and_filters_by_geo():
    eu_spot = find_prices(geo="eu", pricing="spot", gpu="h100-sxm")
    assert [p.region for p in eu_spot] == ["europe-west4", "europe-west1", "europe-north1", "europe-west3"]
    assert all(a.usd_per_gpu_hour <= b.usd_per_gpu_hour for a, b in zip(eu_spot, eu_spot[1:], strict=False))


def test_user_rows_add_and_replace(catalog):
    catalog("prices:\n"
            "  - {provider: acme, region: fr-par-2, geo: eu, gpu: h100-sxm, pricing: reserved_1y,\n"
            "     usd_per_gpu_hour: 1.95, date: '2026-11-30', source: our contract annex B}\n"
            "  - {provider: gcp, region: europe-west4, geo: eu, gpu: h100-sxm, pricing: on_demand,\n"
            "     usd_per_gpu_hour: 9.5, date: '2026-11-01', source: negotiated}\n")
    (acme,) = find_prices(provider="acme")
    assert (acme.usd_per_gpu_hour, acme.date, acme.user) == (1.95, dt.date(2026, 11, 30), True)
    (gcp,) = find_prices(provider="gcp", region="europe-west4", gpu="h100-sxm", pricing="on_demand")
    assert gcp.usd_per_gpu_hour == 9.5 and gcp.user
    assert len(prices()) == len(builtin_rows()) + 1


@pytest.mark.parametrize(("row", "message"), [
    ("{provider: acme, region: x, geo: mars, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: 1, date: '2026-01-01',"
     " source: s}", "geo must be one of eu, us, asia, other, any"),
    ("{provider: acme, region: x, geo: eu, gpu: h1000, pricing: spot, usd_per_gpu_hour: 1, date: '2026-01-01',"
     " source: s}", "'h1000' is not a catalogue GPU id"),
    ("{provider: acme, region: x, geo: eu, gpu: h100-sxm, pricing: hourly, usd_per_gpu_hour: 1, date: '2026-01-01',"
     " source: s}", "pricing must be one of on_demand, spot, reserved_1y"),
    ("{provider: acme, region: x, geo: eu, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: -2, date: '2026-01-01',"
     " source: s}", "usd_per_gpu_hour must be a price"),
    ("{provider: acme, region: x, geo: eu, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: 1, date: '2999-01-01',"
     " source: s}", "is in the future"),
    ("{provider: acme, region: x, geo: eu, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: 1, date: '2026-01-01'}",
     "missing source"),
    ("{provider: acme, region: '*', geo: eu, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: 1, date: '2026-01-01',"
     " source: s}", "geo is 'any' exactly when region is '*'"),
])
def test_a_bad_user_row_names_the_file_and_the_entry(catalog, row, message):
    path = catalog(f"prices:\n  - {row}\n")
    with pytest.raises(GpuplanError) as err:
        prices()
    assert f"{path}: prices[0] (acme" in str(err.value) and message in str(err.value)


def test_an_unquoted_yaml_date_is_refused_at_the_boundary(catalog):
    """YAML reads 2026-11-30 as a date object; the catalogue file's boundary (bounds.py) takes text: quote it."""
    catalog("prices:\n  - {provider: acme, region: x, geo: eu, gpu: h100-sxm, pricing: spot, usd_per_gpu_hour: 1,\n"
            "     date: 2026-11-30, source: s}\n")
    with pytest.raises(GpuplanError, match="prices.date is a date"):
        prices()


def test_the_command_line_reports_a_bad_price_row(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text("prices:\n  - {provider: acme}\n")
    try:
        assert main(["gpus", "--catalog", str(path)]) == 2
    finally:
        use_catalog(None)
    assert "prices[0]" in capsys.readouterr().err
