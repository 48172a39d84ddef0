"""The user's own catalogue: a YAML or JSON file (``$GPUPLAN_CATALOG`` or ``--catalog FILE``) that adds
GPUs, fabrics and models to the built-in ones, checked by the same rules (``check_gpu_row``,
``check_fabric_row``; models are built like any config.json). Every error names the file and the entry.

    gpus:                      # the keys and units of gpus.json; or base: + the figures that differ
      - {id: a10, base: a10g, name: NVIDIA A10, bf16_dense_tflops: 125, source: "NVIDIA A10 datasheet"}
      - {id: my-gpu, name: ..., vendor: nvidia, memory_gib: 48, memory_bw_tb_per_s: 0.96,
         bf16_dense_tflops: 181, scale_up: pcie4, scale_up_gb_per_s: 31.5, gpus_per_node: 8,
         scale_up_domain: 8, tdp_w: 300, source: "..."}
    fabrics:                   # the keys and units of fabrics.json
      - {id: roce-200g-x4, name: ..., kind: scale_out, link_gbit_per_s: 200, links_per_node: 4, source: "..."}
    models:                    # id → Hugging Face config keys (with model_type), or {params: N}
      my-7b: {model_type: llama, hidden_size: 4096, ...}
    prices:                    # the keys of prices.json (catalog/prices.py): a row for the same provider, region,
      - {provider: acme, region: fr-par-2, geo: eu, gpu: h100-sxm, pricing: reserved_1y,   # GPU and pricing replaces
         usd_per_gpu_hour: 1.95, date: '2026-11-30', source: "our contract"}               # the built-in one
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpuplan.bounds import load_json as bounded_json
from gpuplan.bounds import load_yaml, read_regular
from gpuplan.catalog import bad_key, load_json, reject_unknown, require
from gpuplan.errors import GpuplanError, plain, shown

ENV = "GPUPLAN_CATALOG"
_chosen: list[str | None] = [None]  # --catalog FILE, for this process (the CLI sets and clears it)

GPU_KEYS = ("id", "name", "aliases", "vendor", "architecture", "memory_gib", "usable_memory_mib",
            "memory_bw_tb_per_s", "fp32_dense_tflops", "tf32_dense_tflops", "bf16_dense_tflops",
            "fp16_dense_tflops", "fp8_dense_tflops", "fp4_dense_tflops", "scale_up", "scale_up_gb_per_s",
            "gpus_per_node", "scale_up_domain", "tdp_w", "price_usd_per_gpu_hour", "price_date",
            "price_provider", "price_source", "source", "notes", "sm_count", "scale_out", "scale_out_source",
            "host_memory_gb_per_node", "host_memory_source")
GPU_REQUIRED = ("id", "name", "vendor", "memory_gib", "memory_bw_tb_per_s", "scale_up", "scale_up_gb_per_s",
                "gpus_per_node", "scale_up_domain", "source")
GPU_NUMBERS = ("memory_gib", "usable_memory_mib", "memory_bw_tb_per_s", "fp32_dense_tflops", "tf32_dense_tflops",
               "bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops", "fp4_dense_tflops",
               "scale_up_gb_per_s", "gpus_per_node", "scale_up_domain", "tdp_w", "price_usd_per_gpu_hour", "sm_count",
               "host_memory_gb_per_node")
GPU_WHOLE = ("gpus_per_node", "scale_up_domain", "sm_count")
VENDORS = ("nvidia", "amd", "intel", "other")
FABRIC_KEYS = {"scale_up": ("gb_per_s_per_gpu", "domain_gpus", "mesh_link_gb_per_s", "nvls_efficiency",
                            "collective_curve", "collective_ramp"),
               "scale_out": ("link_gbit_per_s", "links_per_node", "efficiency", "transport", "collective_curve",
                             "collective_ramp")}
TRANSPORTS = ("infiniband", "roce", "tcp")  # a scale-out fabric's path for NCCL (fabrics.json _comment)
FABRIC_COMMON = ("id", "name", "aliases", "kind", "latency_us", "source", "notes")
MAX_CATALOG_VALUES = 100_000  # a catalogue of a few GPUs, fabrics and models holds hundreds: read in < 1 s
MAX_FIGURE = 1e7  # no figure in the catalogue's units (GiB, TB/s, TFLOPS, W, USD, Gb/s) comes near


def use_catalog(path: str | None) -> None:
    """Use ``path`` as the user catalogue for this process (None: back to ``$GPUPLAN_CATALOG``)."""
    if path is not None and not str(path).strip():
        raise GpuplanError("--catalog is empty: give the path of a YAML or JSON catalogue file")
    _chosen[0] = path


def catalog_path() -> str | None:
    """The user catalogue in use: ``--catalog FILE``, else ``$GPUPLAN_CATALOG``, else none."""
    return _chosen[0] or os.environ.get(ENV) or None


# ---- the rules every row obeys, built-in or the user's ----------------------------------------------
def _number(row: Mapping[str, Any], key: str, where: str, whole: bool = False) -> None:
    v = row.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v <= MAX_FIGURE:
        raise bad_key(where, key, f"must be a positive number in the catalogue's unit, got {str(v)[:40]!r}")
    if whole and v != int(v):
        raise bad_key(where, key, f"must be a whole number, got {v!r}")


def _text(row: Mapping[str, Any], key: str, where: str) -> None:
    v = row.get(key)
    if not isinstance(v, str) or not v.strip() or len(v) > 2000:
        raise bad_key(where, key, "must be a non-empty text" + (" (cite the datasheet)" if key == "source" else ""))


def check_gpu_row(row: Mapping[str, Any], where: str, scale_up_fabrics: Mapping[str, str]) -> None:
    """The rules of a gpus.json row (``scale_up_fabrics``: fabric id → kind)."""
    reject_unknown(row, where, GPU_KEYS,
                   f"is not a GPU key: use the keys of gpus.json ({', '.join(GPU_REQUIRED)}, ...)")
    require(row, where, GPU_REQUIRED, " (or give base: a catalogue GPU to start from)")
    for key in ("id", "name", "source"):
        _text(row, key, where)
    if row["vendor"] not in VENDORS:
        raise bad_key(where, "vendor", f"must be one of {', '.join(VENDORS)}, got {row['vendor']!r}")
    for key in GPU_NUMBERS:
        _number(row, key, where, key in GPU_WHOLE)
    bf16, fp16, fp8 = row.get("bf16_dense_tflops"), row.get("fp16_dense_tflops"), row.get("fp8_dense_tflops")
    if bf16 and fp8 and not bf16 < fp8:
        raise GpuplanError(f"{where}: fp8_dense_tflops {fp8} must be above bf16_dense_tflops {bf16}")
    if bf16 and fp16 and fp16 < bf16:
        raise GpuplanError(f"{where}: fp16_dense_tflops {fp16} must be at least bf16_dense_tflops {bf16}")
    if scale_up_fabrics.get(row["scale_up"]) != "scale_up":
        known = ", ".join(sorted(k for k, v in scale_up_fabrics.items() if v == "scale_up"))
        raise bad_key(where, "scale_up", f"{row['scale_up']!r} is not a scale-up fabric: one of {known}")
    if row.get("price_usd_per_gpu_hour") is not None and not row.get("price_date"):
        raise bad_key(where, "price_date", "must date the price (e.g. 2026-05): prices change")
    aliases = row.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise bad_key(where, "aliases", "must be a list of names")


def check_fabric_row(row: Mapping[str, Any], where: str) -> None:
    """The rules of a fabrics.json row."""
    kind = row.get("kind")
    if kind not in FABRIC_KEYS:
        raise bad_key(where, "kind", f"must be scale_up or scale_out, got {kind!r}")
    reject_unknown(row, where, (*FABRIC_COMMON, *FABRIC_KEYS[kind]),
                   f"is not a {kind} fabric key ({', '.join(FABRIC_KEYS[kind])}, latency_us)")
    for key in ("id", "name", "source"):
        _text(row, key, where)
    need = ("gb_per_s_per_gpu", "domain_gpus") if kind == "scale_up" else ("link_gbit_per_s",)
    require(row, where, need, f" for a {kind} fabric")
    for key in (*FABRIC_KEYS[kind], "latency_us"):
        if key not in ("transport", "collective_curve", "collective_ramp"):
            _number(row, key, where, key in ("domain_gpus", "links_per_node"))
    if row.get("transport") is not None and row["transport"] not in TRANSPORTS:
        raise bad_key(where, "transport", f"must be one of {', '.join(TRANSPORTS)}, got {str(row['transport'])[:40]!r}")
    for key in ("efficiency", "nvls_efficiency"):
        if row.get(key) is not None and row[key] > 1:
            raise bad_key(where, key, f"is a share of line rate (≤ 1), got {row[key]}")
    _check_curve(row, where)


# a scale-out sweep runs across two nodes, where NCCL's default is its tree (model/comm.py reads only its ramp)
CURVE_KEYS = {"collective": ("all_reduce", "all_gather", "reduce_scatter"), "algorithm": ("ring", "nvls", "tree")}


def _check_curve(row: Mapping[str, Any], where: str) -> None:
    """``collective_curve``: a measured sweep (collective, gpus, algorithm, bytes ascending, busbw_gb_per_s,
    source) or the id of a fabric whose sweep this one shares; ``collective_ramp``: such an id."""
    c = row.get("collective_curve")
    if isinstance(row.get("collective_ramp"), str) and c is not None:
        raise bad_key(where, "collective_ramp", "borrows a ramp only where the row has no collective_curve")
    for key in ("collective_ramp", *(("collective_curve",) if isinstance(c, str) else ())):
        if row.get(key) is not None and (not isinstance(row[key], str) or not row[key].strip()):
            raise bad_key(where, key, "must name a fabric id with a collective_curve")
    if c is None or isinstance(c, str):
        return
    if not isinstance(c, Mapping):
        raise bad_key(where, "collective_curve", "must be a measured sweep (a mapping) or a fabric id")
    for key, allowed in CURVE_KEYS.items():
        if c.get(key) not in allowed:
            raise bad_key(where, f"collective_curve.{key}",
                          f"must be one of {', '.join(allowed)}, got {str(c.get(key))[:40]!r}")
    sizes, bus = c.get("bytes"), c.get("busbw_gb_per_s")
    if not isinstance(c.get("gpus"), int) or c["gpus"] < 2:
        raise bad_key(where, "collective_curve.gpus", "must be the group size of the sweep (≥ 2)")
    if row.get("kind") == "scale_out" and c["gpus"] % 2:
        raise bad_key(where, "collective_curve.gpus", "of a network sweep is its ranks over two nodes (an even count)")
    if not (isinstance(sizes, list) and isinstance(bus, list) and 2 <= len(sizes) == len(bus) <= 64):
        raise bad_key(where, "collective_curve", "needs bytes and busbw_gb_per_s lists of the same length (2 to 64)")
    for i in range(len(sizes)):
        _number({"bytes": sizes[i], "busbw": bus[i]}, "busbw", f"{where}: collective_curve")
        if isinstance(sizes[i], bool) or not isinstance(sizes[i], int | float) or not 0 < sizes[i] < 2**50 \
                or (i and not sizes[i] > sizes[i - 1]):
            raise bad_key(where, "collective_curve.bytes", "must be ascending positive message sizes in bytes")
    _text(c, "source", f"{where}: collective_curve")


# ---- the file ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class UserCatalog:
    path: str
    gpus: tuple[dict, ...]
    fabrics: tuple[dict, ...]
    models: tuple[tuple[str, dict, Any], ...]  # (id, row: name/aliases, config mapping)
    prices: tuple[dict, ...] = ()


def _read(path: str) -> Any:
    """The catalogue file through the boundary: a regular file of bounded size, JSON or YAML of bounded
    depth, size and numbers (gpuplan/bounds)."""
    try:
        p = Path(path).expanduser()
        found = p.exists()
    except (OSError, RuntimeError, ValueError) as err:  # a name past the system's limit, ~nosuchuser
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise GpuplanError(f"cannot read the catalogue file {shown(str(path))} (from --catalog or ${ENV}; "
                           f"{plain(why)}): check the path") from None
    if not found:
        raise GpuplanError(f"catalogue file not found: {shown(str(p))} (from --catalog or ${ENV}): check the path")
    data = read_regular(p, "catalogue file")
    if p.suffix == ".json":
        return bounded_json(data, f"catalogue file {p}", max_nodes=MAX_CATALOG_VALUES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise GpuplanError(f"cannot read the catalogue file {p}: it is not UTF-8 text") from None
    return load_yaml(text, f"catalogue file {p}", max_nodes=MAX_CATALOG_VALUES)


def _entries(doc: Mapping[str, Any], section: str, path: str) -> list[Any]:
    v = doc.get(section) or []
    if section == "models" and isinstance(v, Mapping):
        return [{"id": k, **(c if isinstance(c, Mapping) else {"config": c})} for k, c in v.items()]
    if not isinstance(v, list):
        raise GpuplanError(f"{path}: {section} must be a list of entries")
    return v


@cache
def load_user(path: str) -> UserCatalog:
    """Read and check the user catalogue at ``path`` (once per path)."""
    doc = _read(path)
    if not isinstance(doc, Mapping):
        raise GpuplanError(f"{path}: a catalogue is a mapping with gpus, fabrics and/or models")
    unknown = sorted(set(doc) - {"gpus", "fabrics", "models", "prices", "_comment"})
    if unknown:
        raise GpuplanError(f"{path}: {unknown[0]!r} is not a catalogue section (gpus, fabrics, models, prices)")
    fabrics = _user_fabrics(_entries(doc, "fabrics", path), path)
    kinds = {r["id"]: r["kind"] for r in load_json("fabrics.json")["fabrics"]} | {r["id"]: r["kind"] for r in fabrics}
    gpus = _user_gpus(_entries(doc, "gpus", path), path, kinds)
    models = tuple(_user_model(e, i, path) for i, e in enumerate(_entries(doc, "models", path)))
    gpu_ids = {r["id"] for r in load_json("gpus.json")["gpus"]} | {r["id"] for r in gpus}
    prices = _user_prices(_entries(doc, "prices", path), path, gpu_ids)
    return UserCatalog(path=path, gpus=tuple(gpus), fabrics=tuple(fabrics), models=models, prices=prices)


def _where(path: str, section: str, i: int, entry: Any) -> str:
    name = entry.get("id") if isinstance(entry, Mapping) else None
    return f"{path}: {section}[{i}]" + (f" ({name})" if name else "")


def _taken(names: set[str], row: Mapping[str, Any], where: str, what: str) -> None:
    for n in (row["id"], *row.get("aliases", [])):
        key = str(n).strip().lower().replace("_", "-").replace(" ", "-")
        if key in names:
            raise GpuplanError(f"{where}: the {what} name {n!r} is already taken (built-in or earlier entry): "
                               "choose another id")
        names.add(key)


def _names(rows: list[dict]) -> set[str]:
    return {str(n).strip().lower().replace("_", "-").replace(" ", "-")
            for r in rows for n in (r["id"], *r.get("aliases", []))}


def _user_fabrics(entries: list[Any], path: str) -> list[dict]:
    out: list[dict] = []
    names = _names(load_json("fabrics.json")["fabrics"])
    for i, e in enumerate(entries):
        where = _where(path, "fabrics", i, e)
        if not isinstance(e, Mapping):
            raise GpuplanError(f"{where}: an entry is a mapping of fabrics.json keys")
        row = {"aliases": [], **e}
        check_fabric_row(row, where)
        _taken(names, row, where, "fabric")
        _check_lender(row, load_json("fabrics.json")["fabrics"] + out, where)
        out.append(row)
    return out


def _check_lender(row: Mapping[str, Any], rows: list[dict], where: str) -> None:
    """A borrowed sweep names a fabric of the same kind (built-in or earlier in the file) that has one of its own: a
    network's two-node sweep is no NVLink sweep, nor the other way round."""
    for key in ("collective_curve", "collective_ramp"):
        ref = row.get(key)
        if isinstance(ref, str) and not any(r["id"] == ref and isinstance(r.get("collective_curve"), Mapping)
                                            and r.get("kind") == row.get("kind") for r in rows):
            raise bad_key(where, key, f"names {ref[:40]!r}, which is not a {row.get('kind')} fabric with a measured "
                                      "collective_curve")


def _user_gpus(entries: list[Any], path: str, kinds: Mapping[str, str]) -> list[dict]:
    out: list[dict] = []
    builtin = load_json("gpus.json")["gpus"]
    names = _names(builtin)
    for i, e in enumerate(entries):
        where = _where(path, "gpus", i, e)
        if not isinstance(e, Mapping):
            raise GpuplanError(f"{where}: an entry is a mapping of gpus.json keys")
        row = {"aliases": [], **_based(e, builtin + out, where)}
        check_gpu_row(row, where, kinds)
        _taken(names, row, where, "GPU")
        out.append(row)
    return out


def _user_prices(entries: list[Any], path: str, gpu_ids: set[str]) -> tuple[dict, ...]:
    """The user's price rows, checked as prices.json's (catalog/prices.py); the same key twice is refused."""
    import datetime as dt

    from gpuplan.catalog.prices import check_price_row

    out: list[dict] = []
    seen: set[tuple] = set()
    for i, e in enumerate(entries):
        where = f"{path}: prices[{i}]" + (f" ({e.get('provider')} {e.get('region')} {e.get('gpu')})"
                                         if isinstance(e, Mapping) else "")
        if not isinstance(e, Mapping):
            raise GpuplanError(f"{where}: an entry is a mapping of prices.json keys")
        check_price_row(e, where, gpu_ids, dt.date.today())
        key = (e["provider"], e["region"], e["gpu"], e["pricing"])
        if key in seen:
            raise GpuplanError(f"{where}: a second price for {' '.join(key)}: keep one")
        seen.add(key)
        out.append(dict(e))
    return tuple(out)


def _based(e: Mapping[str, Any], rows: list[dict], where: str) -> dict:
    """An entry with ``base:``: the base row (built-in or an earlier entry) with the given figures; a
    changed capacity drops the base's measured usable memory, a new id its aliases, prices and notes."""
    if "base" not in e:
        return dict(e)
    base = e["base"]
    key = str(base).strip().lower()
    row = next((dict(r) for r in rows if key in (r["id"].lower(), *(a.lower() for a in r.get("aliases", [])))),
               None)
    if row is None:
        raise bad_key(where, "base", f"{base!r} is not a catalogue GPU (`gpuplan gpus` lists them)")
    for drop in ("aliases", "notes", "price_usd_per_gpu_hour", "price_date", "price_provider", "price_source"):
        row.pop(drop, None)
    if "memory_gib" in e:
        row.pop("usable_memory_mib", None)
    row["source"] = f"{row['source']} (base of a user entry)"
    return row | {k: v for k, v in e.items() if k != "base"}


def _user_model(e: Any, i: int, path: str) -> tuple[str, dict, Any]:
    where = _where(path, "models", i, e)
    if not isinstance(e, Mapping) or not isinstance(e.get("id"), str) or not e["id"].strip():
        raise GpuplanError(f"{where}: a model entry needs an id and Hugging Face config keys (or params)")
    row = {"name": e.get("name") or e["id"], "aliases": list(e.get("aliases") or [])}
    config = e.get("config", {k: v for k, v in e.items() if k not in ("id", "name", "aliases")})
    if not isinstance(config, Mapping):
        raise GpuplanError(f"{where}: the model's config must be a mapping of Hugging Face keys (or params)")
    return e["id"], row, config


def active() -> UserCatalog | None:
    """The user catalogue in use, read and checked; None without one."""
    path = catalog_path()
    return load_user(path) if path else None
