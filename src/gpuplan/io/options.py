"""A plan's options as any caller gives them → ONE ``PlanOptions`` value, and the GPU types it names →
the hardware the search runs on (the catalogue, the user's included, read here at the edge: the search
never reads it). The command line, the Python API and the web API all call ``plan_options``, so a unit
that works in one (``14d``, ``$50k``, ``16k``) works in all."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gpuplan.catalog.hardware import DEFAULT_SCALE_OUT, get_fabric, get_gpu, gpus, host_memory
from gpuplan.errors import GpuplanError, shown
from gpuplan.spec import GPU, Hardware, Scenario
from gpuplan.spec.options import MAX_COUNT, MAX_GPU_TYPES, OBJECTIVES, PlanOptions
from gpuplan.units import parse_count, parse_duration, parse_money

# the options' names as each caller spells them (the API's deadline_s and budget take units too)
ALIASES = {"deadline_s": "deadline", "budget_usd": "budget", "top_k": "top", "gpu_types": "gpu",
           "providers": "provider"}
KEYS = ("objective", "deadline", "budget", "max_gpus", "top", "threshold", "gpu", "provider", "region", "pricing")
# the pricing models as users write them → the price catalogue's (catalog/prices.py PRICINGS)
PRICING_WORDS = {"on_demand": "on_demand", "on-demand": "on_demand", "ondemand": "on_demand", "spot": "spot",
                 "preemptible": "spot", "reserved": "reserved_1y", "reserved_1y": "reserved_1y",
                 "reserved-1y": "reserved_1y", "1y": "reserved_1y"}


def plan_options(raw: Mapping[str, Any], named: Callable[[str], str] = lambda key: key) -> PlanOptions:
    """``{"objective": "cost", "deadline": "14d", "budget": "$50k", "max_gpus": "16k", "top": 5,
    "threshold": 0.8, "gpu": "h100-sxm,h200"}`` — any subset, numbers or text with units; a number
    given for the deadline is seconds, for the budget USD. None or "" means not given. ``named`` spells
    an option as the caller's user knows it in messages (the command line: ``--deadline``)."""
    given: dict[str, Any] = {}
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        if name not in KEYS:
            raise GpuplanError(f"unknown plan option {key!r}: the options are {', '.join(KEYS)}")
        if value is not None and value != "":
            given[name] = value
    objective = given.get("objective", "time")
    if objective not in OBJECTIVES:
        raise GpuplanError(f"{named('objective')} must be time or cost, got {shown(objective)}")
    deadline = given.get("deadline")
    return PlanOptions(
        objective=objective,
        deadline_s=_positive(parse_duration(deadline, named("deadline"), bare="s" if _is_number(deadline) else None),
                             named("deadline")) if deadline is not None else None,
        budget_usd=_positive(parse_money(given["budget"], named("budget")), named("budget"))
        if "budget" in given else None,
        max_gpus=count(given["max_gpus"], named("max_gpus")) if "max_gpus" in given else None,
        top=count(given.get("top", 5), named("top")),
        threshold=_threshold(given.get("threshold", 0.8), named("threshold")),
        gpu_types=gpu_names(given.get("gpu")),
        providers=_names(given.get("provider"), named("provider")),
        region=_name(given["region"], named("region")) if "region" in given else None,
        pricing=_pricing(given["pricing"], named("pricing")) if "pricing" in given else None)


def _name(value: Any, what: str) -> str:
    """A provider or region name as the price catalogue spells them (lower case)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        raise GpuplanError(f"{what} must be a name such as aws, gcp or eu, got {shown(value)}")
    return value.strip().lower()


def _names(value: Any, what: str) -> tuple[str, ...]:
    """``"aws,gcp"`` or ``["aws", "gcp"]`` → the providers named."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list | tuple) else [value]
    return tuple(_name(v, what) for v in items if not (isinstance(v, str) and not v.strip()))


def _pricing(value: Any, what: str) -> str:
    word = value.strip().lower() if isinstance(value, str) else value
    if word not in PRICING_WORDS:
        raise GpuplanError(f"{what} must be on-demand, spot or reserved (1-year), got {shown(value)}")
    return PRICING_WORDS[word]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive(value: float, what: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise GpuplanError(f"{what} must be positive, got {value:g}")
    return value


def count(value: Any, what: str) -> int:
    """A whole number from 1 to ``MAX_COUNT`` (``16384``, ``16k`` — a GPU count's k is 1024 —, ``1e4``)."""
    n = parse_count(value, what)
    if not math.isfinite(n) or n != int(n) or not 1 <= n <= MAX_COUNT:
        raise GpuplanError(f"{what} must be a whole number from 1 to {MAX_COUNT:,}, got {shown(value)}")
    return int(n)


def _threshold(value: Any, what: str) -> float:
    share = parse_count(value.strip()[:-1], what) / 100 if isinstance(value, str) and value.strip().endswith("%") \
        else parse_count(value, what)
    if not 0 < share <= 1:
        raise GpuplanError(f"{what} must be in (0, 1], got {shown(value)}")
    return share


def gpu_names(value: Any) -> tuple[str, ...]:
    """``"a,b"``, ``["a", "b"]`` or ``"all"`` → the GPU types named (none: the scenario's own)."""
    if value is None:
        return ()
    if isinstance(value, str):
        names = [g.strip() for g in value.split(",") if g.strip()]
    elif isinstance(value, list | tuple) and all(isinstance(g, str) for g in value):
        names = [g.strip() for g in value if g.strip()]
    else:
        raise GpuplanError(f"gpu must be a GPU type, a list of them, or 'all', got {shown(value)}")
    if len(names) > MAX_GPU_TYPES:
        raise GpuplanError(f"{len(names)} GPU types: at most {MAX_GPU_TYPES}")
    return tuple(names)


def reading_gpu(options: PlanOptions, power_limited: bool = False) -> str | None:
    """The GPU type a scenario is read against: the one named, or — when several are compared — the first
    named, or under a power cap (checked against the GPU's TDP) the one whose TDP allows most; None: the
    scenario's own."""
    names = options.gpu_types
    if not names:
        return None
    if not options.several:
        return names[0]
    if not power_limited:
        return "h100-sxm" if names == ("all",) else names[0]
    listed = gpus() if names == ("all",) else [get_gpu(n) for n in names]
    return max(listed, key=lambda g: g.tdp_w or 0).id


def targets(sc: Scenario, options: PlanOptions) -> tuple[Hardware, ...]:
    """The hardware of each GPU type the plan compares: ``"all"`` is every catalogue type with compute
    peaks; each type on its own node, fabric and price unless the scenario states them for its own type;
    with a provider, region or pricing asked, each type at its cheapest matching price row (``offers``;
    a type with none has no price, and a plan that ranks by cost skips it, saying so)."""
    names = options.gpu_types
    if not options.several:
        hws: tuple[Hardware, ...] = (sc.hardware,)
    else:
        types = [g for g in gpus() if g.peak_flops] if names == ("all",) else [get_gpu(n) for n in names]
        hws = tuple(hardware_for(sc, g) for g in types)
    if not options.market:
        return hws
    if "hardware.price_per_gpu_hour" in sc.given:
        raise GpuplanError("give a price (hardware.price_per_gpu_hour, --price) or the market to price from "
                           "(--provider, --region, --pricing), not both")
    return tuple(_at_market(hw, offers(hw.gpu.id, options)) for hw in hws)


def offers(gpu: str, options: PlanOptions) -> tuple[Any, ...]:
    """The price catalogue's rows for ``gpu`` matching the plan's provider, region (a region code, or a
    geography: eu, us, asia — a provider's one price for every region matches any) and pricing (on-demand
    when not given: the typical purchase), cheapest first."""
    from gpuplan.catalog.prices import GEOS, prices

    pricing = options.pricing or "on_demand"
    region = options.region
    geo = region if region in GEOS else None

    def where(p: Any) -> bool:
        if region is None or p.geo == "any":
            return True
        return p.geo == geo if geo is not None else p.region == region

    rows = [p for p in prices() if p.gpu == gpu and p.pricing == pricing and where(p)
            and (not options.providers or p.provider in options.providers)]
    return tuple(sorted(rows, key=lambda p: (p.usd_per_gpu_hour, p.provider, p.region)))


def _at_market(hw: Hardware, rows: tuple[Any, ...]) -> Hardware:
    """``hw`` priced at the cheapest of ``rows`` (no price when there is none)."""
    import datetime as dt

    from gpuplan.spec import Market

    if not rows:
        return replace(hw, price_per_gpu_hour=None, market=None)
    p, today = rows[0], dt.date.today()
    market = Market(provider=p.provider, region=p.region, geo=p.geo, pricing=p.pricing,
                    usd_per_gpu_hour=p.usd_per_gpu_hour, date=p.date.isoformat(), age_days=p.age_days(today),
                    stale=p.stale(today), source=p.source, instance=p.instance)
    return replace(hw, price_per_gpu_hour=p.usd_per_gpu_hour, market=market)


def hardware_for(sc: Scenario, g: GPU) -> Hardware:
    """The scenario's hardware on GPU type ``g``: its own node, fabric and price for another type."""
    hw = sc.hardware
    if g.id == hw.gpu.id:
        return hw
    own_price = hw.price_per_gpu_hour is not None and hw.price_per_gpu_hour != hw.gpu.price_usd_per_gpu_hour
    scale_out = hw.scale_out if "hardware.scale_out" in sc.given else \
        get_fabric(g.scale_out or DEFAULT_SCALE_OUT, "scale_out")
    host = hw.host_memory_bytes if "hardware.host_memory" in sc.given else host_memory(g, g.gpus_per_node)
    return replace(hw, gpu=g, gpus_per_node=g.gpus_per_node, scale_up=get_fabric(g.scale_up, "scale_up"),
                   scale_out=scale_out, host_memory_bytes=host,
                   price_per_gpu_hour=hw.price_per_gpu_hour if own_price else g.price_usd_per_gpu_hour)
