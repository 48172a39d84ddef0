"""The price catalogue (``prices.json``): public list prices per GPU-hour, by provider × region × GPU type ×
pricing model, each row dated and sourced, and the user's own rows (the user catalogue's ``prices`` section,
``--catalog FILE``), checked by the same rules (``check_price_row``).

    prices:                    # the keys of prices.json
      - {provider: my-neocloud, region: fr-par-2, geo: eu, gpu: h100-sxm, pricing: reserved_1y,
         usd_per_gpu_hour: 1.95, date: '2026-11-30', source: "our 2027 contract, annex B"}   # a quoted date

A user row with the same provider, region, GPU and pricing as a built-in row replaces it (a negotiated price);
any other is added. A price is as old as its ``date``: ``Price.stale`` says when it is older than
STALE_AFTER_DAYS, for the answer to flag.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from gpuplan.catalog import bad_key, load_json, reject_unknown, require

PRICINGS = ("on_demand", "spot", "reserved_1y")
GEOS = ("eu", "us", "asia", "other", "any")
ANY_REGION = "*"  # one list price in every region of the provider (geo any)
PRICE_KEYS = ("provider", "region", "geo", "gpu", "pricing", "usd_per_gpu_hour", "instance", "date", "source",
              "via", "notes")
PRICE_REQUIRED = ("provider", "region", "geo", "gpu", "pricing", "usd_per_gpu_hour", "date", "source")
MAX_USD_PER_GPU_HOUR = 1000  # as hardware.price_per_gpu_hour: list prices are ~$0.2–15
STALE_AFTER_DAYS = 180       # list prices move within months: AWS cut P5 (H100) on-demand by up to 45 % in June 2025
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")

Pricing = Literal["on_demand", "spot", "reserved_1y"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    provider: str
    region: str             # the provider's code, or "*" (every region, one price)
    geo: str                # eu | us | asia | other | any
    gpu: str                # catalogue GPU id
    pricing: Pricing
    usd_per_gpu_hour: float
    date: dt.date           # when the price was read or took effect
    source: str
    instance: str | None = None
    via: str | None = None  # the dated public transcription it was read from
    notes: str | None = None
    user: bool = False      # from the user catalogue

    def age_days(self, today: dt.date) -> int:
        return (today - self.date).days

    def stale(self, today: dt.date, after_days: int = STALE_AFTER_DAYS) -> bool:
        return self.age_days(today) > after_days

    def to_json(self) -> dict[str, Any]:
        return {"provider": self.provider, "region": self.region, "geo": self.geo, "gpu": self.gpu,
                "pricing": self.pricing, "usd_per_gpu_hour": self.usd_per_gpu_hour, "date": self.date.isoformat(),
                "source": self.source, "instance": self.instance, "via": self.via, "notes": self.notes,
                "user": self.user}


def parse_date(value: Any, where: str) -> dt.date:
    """A row's date: YYYY-MM-DD, or YYYY-MM (the first of the month); YAML may give a date already."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    if not isinstance(value, str) or not DATE.match(value):
        raise bad_key(where, "date", f"must be YYYY-MM-DD (when the price was read), got {str(value)[:40]!r}")
    try:
        return dt.date.fromisoformat(value if len(value) == 10 else f"{value}-01")
    except ValueError:
        raise bad_key(where, "date", f"is not a calendar date: {value!r}") from None


def check_price_row(row: Mapping[str, Any], where: str, gpu_ids: Iterable[str], today: dt.date) -> None:
    """The rules of a prices.json row (``gpu_ids``: the catalogue's GPU ids, built-in and the user's)."""
    reject_unknown(row, where, PRICE_KEYS,
                   f"is not a price key: use the keys of prices.json ({', '.join(PRICE_REQUIRED)})")
    require(row, where, PRICE_REQUIRED)
    for key in ("provider", "region"):
        v = row[key]
        if not isinstance(v, str) or not (NAME.match(v) or (key == "region" and v == ANY_REGION)):
            raise bad_key(where, key, f"must be a lower-case name (letters, digits, . _ -), got {str(v)[:40]!r}")
    if row["geo"] not in GEOS:
        raise bad_key(where, "geo", f"must be one of {', '.join(GEOS)}, got {str(row['geo'])[:20]!r}")
    if (row["region"] == ANY_REGION) != (row["geo"] == "any"):
        raise bad_key(where, "geo", "is 'any' exactly when region is '*' (one price in every region)")
    if row["gpu"] not in set(gpu_ids):
        raise bad_key(where, "gpu", f"{str(row['gpu'])[:40]!r} is not a catalogue GPU id (`gpuplan gpus` lists them)")
    if row["pricing"] not in PRICINGS:
        raise bad_key(where, "pricing", f"must be one of {', '.join(PRICINGS)}, got {str(row['pricing'])[:20]!r}")
    usd = row["usd_per_gpu_hour"]
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not math.isfinite(usd) \
            or not 0 < usd <= MAX_USD_PER_GPU_HOUR:
        raise bad_key(where, "usd_per_gpu_hour", f"must be a price in USD above 0 and at most {MAX_USD_PER_GPU_HOUR}, "
                      f"got {str(usd)[:40]!r}")
    if parse_date(row["date"], where) > today:
        raise bad_key(where, "date", f"{row['date']} is in the future: date a price when it was read")
    for key in ("source", "instance", "via", "notes"):
        v = row.get(key)
        if (v is not None or key == "source") and (not isinstance(v, str) or not v.strip() or len(v) > 2000):
            raise bad_key(where, key, "must be a non-empty text" + (" (the page or contract the price is from)"
                                                                     if key == "source" else ""))


def _price(row: Mapping[str, Any], user: bool) -> Price:
    return Price(provider=row["provider"], region=row["region"], geo=row["geo"], gpu=row["gpu"],
                 pricing=row["pricing"], usd_per_gpu_hour=float(row["usd_per_gpu_hour"]),
                 date=parse_date(row["date"], row["provider"]), source=row["source"], instance=row.get("instance"),
                 via=row.get("via"), notes=row.get("notes"), user=user)


def builtin_rows() -> list[dict]:
    return load_json("prices.json")["prices"]


def prices() -> tuple[Price, ...]:
    """Every price: the built-in rows, with the user catalogue's rows replacing the same key or added."""
    from gpuplan.catalog.user import catalog_path

    return _table(catalog_path())


@cache
def _table(path: str | None) -> tuple[Price, ...]:
    from gpuplan.catalog.user import load_user

    def key(p: Price) -> str:  # one price per provider × region × GPU × pricing
        return f"{p.provider} {p.region} {p.gpu} {p.pricing}"

    table = {key(p): p for p in (_price(r, user=False) for r in builtin_rows())}
    if path:
        for row in load_user(path).prices:
            p = _price(row, user=True)
            table[key(p)] = p
    return tuple(table.values())


def find_prices(*, gpu: str | None = None, provider: str | None = None, geo: str | None = None,
                region: str | None = None, pricing: str | None = None) -> tuple[Price, ...]:
    """The prices matching every filter given (None: any), cheapest first."""
    rows = [p for p in prices()
            if (gpu is None or p.gpu == gpu) and (provider is None or p.provider == provider)
            and (geo is None or p.geo == geo) and (region is None or p.region == region)
            and (pricing is None or p.pricing == pricing)]
    return tuple(sorted(rows, key=lambda p: (p.usd_per_gpu_hour, p.provider, p.region)))
