"""Plans priced where users buy (issue 24 item 2): provider × region × pricing from the dated price catalogue,
spot's preemption allowance, stale prices flagged, the catalogue listed."""

from __future__ import annotations

import datetime as dt
import json
from functools import cache

import pytest

import gpuplan
from gpuplan.catalog.prices import STALE_AFTER_DAYS, prices
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.io.options import offers, plan_options
from gpuplan.model.estimate import failure_overhead, preemption_overhead

DAY = 86400.0


@cache
def _eu_spot() -> dict:
    return gpuplan.plan(model="llama-3.1-70b", tokens="2T", deadline_s="30d", region="eu", pricing="spot").to_json()


def test_the_issue_example_answers_with_provider_region_dated_price_and_preemption_allowance():
    res = _eu_spot()
    best = res["best"]
    m = best["cost"]["market"]
    assert m["geo"] in ("eu", "any") and m["pricing"] == "spot"
    assert m["usd_per_gpu_hour"] == best["scenario"]["hardware"]["price_per_gpu_hour"]
    assert m["preemption_overhead"] == best["time"]["preemption_overhead"] > 0
    assert best["time"]["train_s"] <= 30 * DAY
    # the row it names is in the catalogue, with that date and source
    row = next(p for p in prices() if (p.provider, p.region, p.gpu, p.pricing)
               == (m["provider"], m["region"], best["scenario"]["hardware"]["gpu"], "spot"))
    assert row.date.isoformat() == m["date"] and row.source == m["source"]
    assert m["stale"] == ((dt.date.today() - row.date).days > STALE_AFTER_DAYS)


def test_each_gpu_type_is_priced_at_its_cheapest_matching_row():
    options = plan_options({"region": "eu", "pricing": "spot"})
    for c in _eu_spot()["candidates"]:
        gpu = c["scenario"]["hardware"]["gpu"]
        rows = offers(gpu, options)
        assert rows and c["cost"]["market"]["usd_per_gpu_hour"] == min(p.usd_per_gpu_hour for p in rows)
        assert all(p.geo in ("eu", "any") and p.pricing == "spot" for p in rows)


def test_a_type_without_a_matching_price_is_skipped_saying_so():
    res = _eu_spot()
    priced = {p.gpu for p in prices() if p.pricing == "spot" and p.geo in ("eu", "any")}
    assert {c["scenario"]["hardware"]["gpu"] for c in res["candidates"]} <= priced
    assert any("no price" in reason for reason in res["rejected"])


def test_spot_time_includes_the_preemption_allowance_and_on_demand_has_none():
    kw = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=64, tokens="100B", zero=1, provider="gcp")
    on_demand = gpuplan.plan(**kw, pricing="on-demand").to_json()["best"]
    spot = gpuplan.plan(**kw, pricing="spot").to_json()["best"]
    assert on_demand["time"]["preemption_overhead"] is None and on_demand["cost"]["market"]["pricing"] == "on_demand"
    assert spot["scenario"]["layout"] == on_demand["scenario"]["layout"]
    share = spot["time"]["preemption_overhead"]
    # the same layout: spot's wall time is on-demand's plus the allowance
    assert spot["time"]["train_s"] == pytest.approx(on_demand["time"]["train_s"] * (1 + share), rel=1e-12)
    assert spot["cost"]["usd"] == pytest.approx(spot["time"]["gpu_hours"] * spot["cost"]["usd_per_gpu_hour"])


@pytest.mark.parametrize("nodes", [1, 8, 64, 512])
def test_preemptions_add_to_the_hardware_failures_and_grow_with_the_nodes(nodes):
    gpus = 8 * nodes
    extra = preemption_overhead(gpus, nodes)
    assert extra > 0
    assert preemption_overhead(gpus * 2, nodes * 2) > extra
    # never more than the failure model at the combined rate could lose: below 1 (the run still progresses)
    assert extra + failure_overhead(gpus, 1e6) < 1


def test_pricing_words_and_bad_market_options():
    assert plan_options({"pricing": "on-demand"}).pricing == "on_demand"
    assert plan_options({"pricing": "reserved"}).pricing == "reserved_1y"
    assert plan_options({"provider": "AWS, gcp"}).providers == ("aws", "gcp")
    with pytest.raises(GpuplanError, match="pricing must be on-demand, spot or reserved"):
        plan_options({"pricing": "cheap"})
    with pytest.raises(GpuplanError, match="not both"):
        gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, tokens="1B", price=2.0, region="eu")


def test_the_cli_names_the_market_and_lists_the_catalogue(capsys):
    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tokens", "10B",
                 "--provider", "gcp", "--pricing", "spot"]) == 0
    out = capsys.readouterr().out
    assert "priced: spot on gcp" in out and "preemptible" in out
    assert main(["prices", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(prices()) and all(r["date"] and r["source"] for r in rows)
