"""GPU and fabric catalogue lookups (aliases, closest-name suggestions) and ``Hardware`` building."""

from __future__ import annotations

import difflib
import math
import re
from functools import cache
from typing import Any

from gpuplan.catalog import load_json, without_remarks
from gpuplan.catalog.accelerators import other_accelerator
from gpuplan.catalog.networks import network_words, per_gpu_rate
from gpuplan.catalog.nodes import node_for
from gpuplan.catalog.user import catalog_path, load_user
from gpuplan.errors import GpuplanError
from gpuplan.spec import GPU, BusCurve, Fabric, Hardware
from gpuplan.units import GiB, MiB

# words a GPU's name may carry that do not tell parts apart: the vendor's and product line's, the memory's kind, AMD's
# module form factor (every catalogued MI250/MI300/MI325/MI355 part is an OAM module; MI210 is the PCIe card)
_NOISE_WORDS = frozenset({"nvidia", "amd", "instinct", "tesla", "geforce", "radeon", "hbm", "gddr", "oam"})


def _key(name: str) -> str:
    """A name's lookup key: its words and numbers, in any order, any separator, any case — 'H100 80GB HBM3',
    'NVIDIA H100-80GB' and 'h100_80gb' are one key; vendor and memory-kind words are left out."""
    text = re.sub(r"\b(hbm|gddr)\d*[ex]?\b", " ", name.lower())
    return "-".join(sorted(w for w in re.findall(r"[a-z]+|\d+(?:\.\d+)?", text) if w not in _NOISE_WORDS))


def _gpu_from_row(row: dict) -> GPU:
    peaks = {}
    for prec in ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4"):
        tflops = row.get(f"{prec}_dense_tflops")
        if tflops:
            peaks[prec] = tflops * 1e12
    memory = int(row["memory_gib"] * GiB)
    usable = row.get("usable_memory_mib")
    return GPU(
        id=row["id"], name=row["name"], vendor=row["vendor"],
        memory_bytes=memory,
        usable_memory_bytes=int(usable * MiB) if usable else memory,
        usable_memory_measured=bool(usable),
        memory_bw_bytes_per_s=row["memory_bw_tb_per_s"] * 1e12,
        peak_flops=peaks,
        scale_up=row["scale_up"], scale_up_bytes_per_s=row["scale_up_gb_per_s"] * 1e9,
        gpus_per_node=row["gpus_per_node"], scale_up_domain=row["scale_up_domain"],
        tdp_w=row.get("tdp_w"), price_usd_per_gpu_hour=row.get("price_usd_per_gpu_hour"),
        price_date=row.get("price_date"), source=row["source"], aliases=tuple(row.get("aliases", ())),
        architecture=row.get("architecture", ""), sm_count=row.get("sm_count") or 108,
        scale_out=row.get("scale_out") or "", scale_out_source=row.get("scale_out_source") or "",
        host_memory_bytes=row["host_memory_gb_per_node"] * 1e9 if row.get("host_memory_gb_per_node") else None,
    )


def _giga(row: dict, key: str) -> float | None:
    v = row.get(key)
    return v * 1e9 if v else None


def _fabric_from_row(row: dict, rows: dict[str, dict]) -> Fabric:
    lat = row.get("latency_us")
    gbps = row.get("link_gbit_per_s")
    own = row.get("collective_curve")
    lender = own if isinstance(own, str) else row.get("collective_ramp")
    return Fabric(
        id=row["id"], name=row["name"], kind=row["kind"],
        bytes_per_s_per_gpu=_giga(row, "gb_per_s_per_gpu"),
        domain_gpus=row.get("domain_gpus"),
        link_bytes_per_s=gbps * 1e9 / 8 if gbps else None,
        links_per_node=row.get("links_per_node"),
        latency_s=lat * 1e-6 if lat is not None else None,
        efficiency=row.get("efficiency"), source=row.get("source", ""),
        mesh_link_bytes_per_s=_giga(row, "mesh_link_gb_per_s"), nvls_efficiency=row.get("nvls_efficiency"),
        curve=_bus_curve(rows[lender] if lender else row),
        curve_scope="ramp" if (lender and not isinstance(own, str)) or row["kind"] == "scale_out" else "all",
    )


def _bus_curve(row: dict) -> BusCurve | None:
    """A fabric row's measured collective sweep (fabrics.json ``collective_curve``), with the rates of
    the fabric it was measured on (model/comm.py reads efficiency, ramp and latency from them)."""
    c = row.get("collective_curve")
    if not isinstance(c, dict):
        return None
    return BusCurve(collective=c["collective"], gpus=c["gpus"], algorithm=c["algorithm"],
                    sizes=tuple(float(b) for b in c["bytes"]),
                    bus_bytes_per_s=tuple(v * 1e9 for v in c["busbw_gb_per_s"]),
                    fabric=row["id"], link_bytes_per_s=_giga(row, "gb_per_s_per_gpu") or 0.0,
                    mesh_link_bytes_per_s=_giga(row, "mesh_link_gb_per_s") or 0.0,
                    nvls_efficiency=row.get("nvls_efficiency") or 0.0, nics=row.get("links_per_node") or 0,
                    source=c.get("source", ""))


def _gpu_index() -> tuple[dict[str, GPU], dict[str, str]]:
    """The GPU catalogue: the built-in rows and the user catalogue's (catalog/user.py), by id and name."""
    return _gpu_table(catalog_path())


def _fabric_index() -> tuple[dict[str, Fabric], dict[str, str]]:
    return _fabric_table(catalog_path())


def _user_rows(path: str | None, section: str) -> list[dict]:
    return list(getattr(load_user(path), section)) if path else []


@cache
def _gpu_table(path: str | None) -> tuple[dict[str, GPU], dict[str, str]]:
    gpus = {row["id"]: _gpu_from_row(row) for row in load_json("gpus.json")["gpus"] + _user_rows(path, "gpus")}
    names = {}
    for g in gpus.values():
        for n in (g.id, *g.aliases):
            names[_key(n)] = g.id
    return gpus, names


def gpu_row(gid: str) -> dict:
    """The catalogue row (gpus.json keys) of a GPU id, built-in or the user's."""
    rows = load_json("gpus.json")["gpus"] + _user_rows(catalog_path(), "gpus")
    return dict(next(r for r in rows if r["id"] == gid))


def fabric_row(fid: str) -> dict:
    """The catalogue row (fabrics.json keys) of a fabric id, built-in or the user's."""
    rows = load_json("fabrics.json")["fabrics"] + _user_rows(catalog_path(), "fabrics")
    return dict(next(r for r in rows if r["id"] == fid))


@cache
def _fabric_table(path: str | None) -> tuple[dict[str, Fabric], dict[str, str]]:
    rows = load_json("fabrics.json")["fabrics"] + _user_rows(path, "fabrics")
    by_id = {row["id"]: row for row in rows}
    fabrics = {row["id"]: _fabric_from_row(row, by_id) for row in rows}
    names = {}
    for row in rows:
        for n in (row["id"], *row.get("aliases", ())):
            names[_key(n)] = row["id"]
    return fabrics, names


def _suggest(name: str, names: dict[str, str]) -> str:
    close = difflib.get_close_matches(_key(name), list(names), n=3, cutoff=0.5)
    ids = list(dict.fromkeys(names[c] for c in close))
    return f"did you mean {', '.join(ids)}?" if ids else ""


def gpus() -> list[GPU]:
    return list(_gpu_index()[0].values())


def fabrics() -> list[Fabric]:
    return list(_fabric_index()[0].values())


def _name(name: object, what: str) -> str:
    """A catalogue name as given: a non-empty string (a YAML null, list or number is not a name)."""
    if name is None:
        raise GpuplanError(f"{what} is missing: give a name, e.g. h100-sxm; `gpuplan gpus` lists them"
                           if what == "hardware.gpu" else f"{what} is missing: give a fabric name")
    if isinstance(name, bool) or not isinstance(name, str | int | float):
        kind = {list: "a list", dict: "a mapping", bool: "true/false"}.get(type(name), type(name).__name__)
        raise GpuplanError(f"{what} must be a name, got {kind}: write one name, e.g. "
                           + {"hardware.gpu": "gpu: h100-sxm", "hardware.gpu.base": "base: h100-sxm"}.get(
                               what, f"{what.split('.')[-1]}: ib-ndr-400g"))
    text = str(name).strip()
    if not text:
        raise GpuplanError("hardware.gpu is empty: give a GPU name, e.g. h100-sxm; `gpuplan gpus` lists them"
                           if what == "hardware.gpu" else f"{what} is empty: give a name, or leave the key out "
                           "for the default")
    return text


def get_gpu(name: str, what: str = "hardware.gpu") -> GPU:
    table, names = _gpu_index()
    text = _name(name, what)
    gid = names.get(_key(text)) or _with_memory_size(text, table, names) or _system(text, table, names)
    if gid is None and (bare := _PLURAL.sub("", text)) not in (text, ""):  # "A100 GPUs", "H100s"
        gid = names.get(_key(bare)) or _with_memory_size(bare, table, names) or _system(bare, table, names)
    if gid is None:
        other = other_accelerator(text)
        if other:
            raise GpuplanError(f"{text!r} is {other}, not a GPU gpuplan models: its catalogue holds NVIDIA and AMD "
                               "GPUs, whose kernels, collectives and memory it measures. To estimate it as a GPU of "
                               "its datasheet figures, add it to a user catalogue (--catalog FILE or $GPUPLAN_CATALOG, "
                               "gpus: with the keys of gpus.json)")
        hint = _suggest(text, names)
        raise GpuplanError(f"unknown GPU {text!r}: {hint + ' ' if hint else ''}`gpuplan gpus` lists them")
    return table[gid]


@cache
def _systems() -> dict[str, tuple[str, str, int | None, str | None, int | None]]:
    """Systems and cloud instances by name key (catalog/systems.json): the GPU id each holds, the source, the
    GPUs a node of it holds where that is not the GPU's own (a DGX-2's 16), its network between nodes where its
    provider states one the catalogue holds (a p4d.24xlarge's 400 Gbps EFA: efa-p4d), and the GPUs one system holds
    over several of the GPU's nodes (a GB200 NVL72 rack's 72)."""
    return {_key(n): (row["gpu"], row["source"], row.get("gpus_per_node"), row.get("scale_out"), row.get("gpus"))
            for row in load_json("systems.json")["systems"] for n in row["names"]}


_SYSTEM_WORDS = re.compile(r"\b(dgx|hgx)\b", re.IGNORECASE)
# a GPU's name as a sentence writes it: with the word GPU(s) or card(s) after it, or in the plural ("H100s")
_PLURAL = re.compile(r"(?:(?<=\d)s|\s+(?:gpus?|cards?))\s*$", re.IGNORECASE)


def _system(text: str, table: dict[str, GPU], names: dict[str, str]) -> str | None:
    """A system or instance named for its GPU ('p4d.24xlarge', 'DGX A100 640GB', 'HGX B200'), or a name with remarks."""
    hit = _systems().get(_key(text))
    gid = hit[0] if hit is not None else None
    if gid is None and _SYSTEM_WORDS.search(text):
        rest = _SYSTEM_WORDS.sub(" ", text)
        gid = names.get(_key(rest)) or _with_memory_size(rest, table, names)
    if gid is None and (core := without_remarks(text)) not in (text, ""):  # a name with remarks
        gid = names.get(_key(core)) or _with_memory_size(core, table, names) or _system(core, table, names)
    return gid


_MEMORY_SIZE = re.compile(r"\b(\d+(?:\.\d+)?)\s*gi?b?\b", re.IGNORECASE)


def _family(gid: str) -> str:
    """A catalogue id without its memory size and form factor: a100-80gb-sxm and a100-40gb-pcie are a100."""
    return "-".join(p for p in gid.split("-") if not re.fullmatch(r"\d+gb", p) and p not in ("sxm", "pcie", "nvl"))


def _with_memory_size(text: str, table: dict[str, GPU], names: dict[str, str]) -> str | None:
    """A catalogue name with its card's memory size ('RTX 4090 24GB', 'L40S 48 GB'): the GPU the rest names, when its
    memory is that size within 1 GiB (a datasheet's GB against the catalogue's GiB); else its sibling of that size."""
    for m in _MEMORY_SIZE.finditer(text):
        gid = names.get(_key(text[:m.start()] + " " + text[m.end():]))
        if gid is None:
            continue
        size = float(m.group(1))
        if abs(table[gid].memory_bytes / GiB - size) <= 1.0:
            return gid
        # the name's other memory size ('A100 40G' where 'A100' is the 80 GB part): the sibling of that size,
        # nearest the named one in form factor (the most id parts in common)
        family, parts = _family(gid), set(gid.split("-"))
        sizes = [g for g in table if _family(g) == family and abs(table[g].memory_bytes / GiB - size) <= 1.0]
        if sizes:
            return max(sizes, key=lambda g: len(parts & set(g.split("-"))))
    return None


def get_fabric(name: str, kind: str | None = None, what: str | None = None, default: str | None = None) -> Fabric:
    table, names = _fabric_index()
    text = _name(name, what or f"hardware.{kind or 'fabric'}")
    fid = names.get(_key(text)) or network_words(text, default)
    if fid is None and (core := without_remarks(text)) not in (text, ""):  # 'PCIe4, no NVLink'
        fid = names.get(_key(core)) or network_words(core, default)
    if fid is None:
        hint = _suggest(text, names)
        known = sorted(f.id for f in table.values() if kind is None or f.kind == kind)
        raise GpuplanError(f"unknown fabric {text!r}: {hint + ' ' if hint else ''}known: {', '.join(known)}")
    fab = table[fid]
    if kind is not None and fab.kind != kind:
        want = "hardware.scale_up takes an intra-node fabric" if kind == "scale_up" else \
            "hardware.scale_out takes a network between nodes"
        raise GpuplanError(f"fabric {text!r} is a {fab.kind} fabric: {want} "
                           f"({', '.join(sorted(f.id for f in table.values() if f.kind == kind))})")
    return fab


DEFAULT_SCALE_OUT = "ib-ndr-400g"


def _scale_out(name: Any, per_node: int, default: str) -> Fabric:
    """The network between nodes; a rate given per node is read per GPU (``per_gpu_rate``), and where that names no
    catalogued fabric the error quotes the name as given."""
    per_gpu = per_gpu_rate(name, per_node) if isinstance(name, str) else name
    try:
        return get_fabric(per_gpu, "scale_out", default=default)
    except GpuplanError:
        if per_gpu == name:
            raise
        raise GpuplanError(f"unknown fabric {name!r}: shared by the node's {per_node} GPUs it is {per_gpu!r}, a rate "
                           "no catalogued network has: give one of `gpuplan fabrics` (e.g. eth-100g)") from None
# Upper bounds of the hardware: far above any real cluster, low enough that a typo (1e12 for
# 1e3) or a wrong unit is an error instead of a nonsense answer.
MAX_GPUS = 2**20               # a million GPUs (the largest clusters: ~2e5)
MAX_GPUS_PER_NODE = 1024       # NVL72 racks: 72; nodes of 8 are usual
MAX_PRICE_PER_GPU_HOUR = 1000  # USD (on-demand list prices: ~$1-15)
MAX_POWER_W = 2000             # the cap when the GPU has no published TDP (GB300 boards: 1,400 W)


MAX_INLINE_FIGURE = 1e7  # no GPU figure in the catalogue's units (GiB, TB/s, TFLOPS, W, USD, SMs) comes near
# keys a scenario may set on a GPU of its own (the catalogue's names and units, gpus.json)
INLINE_GPU_KEYS = ("name", "memory_gib", "usable_memory_mib", "memory_bw_tb_per_s", "fp32_dense_tflops",
                   "tf32_dense_tflops", "bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops",
                   "fp4_dense_tflops", "tdp_w", "price_usd_per_gpu_hour", "sm_count")


def inline_gpu(spec: dict) -> GPU:
    """A GPU given in the scenario: ``{base: <catalogue id>, <gpus.json keys>}`` — the base's row with
    the given figures replaced (a variant the catalogue does not list, e.g. an H100 with 96 GB of
    HBM2e at 2.4 TB/s)."""
    unknown = sorted(set(spec) - {"base", "id", *INLINE_GPU_KEYS})
    if unknown:
        raise GpuplanError(f"hardware.gpu.{unknown[0]} is not a GPU field: give base and any of "
                           f"{', '.join(INLINE_GPU_KEYS)}")
    if "base" not in spec:
        raise GpuplanError("hardware.gpu as a mapping needs base: the catalogue GPU it varies, e.g. {base: a10g, "
                           "bf16_dense_tflops: 125}")
    base = get_gpu(spec["base"], "hardware.gpu.base")
    row = gpu_row(base.id)
    for key in INLINE_GPU_KEYS:
        if key in spec:
            value = spec[key]
            if key == "name":
                if not isinstance(value, str) or not value.strip() or len(value) > 200:
                    raise GpuplanError("hardware.gpu.name must be a short text, e.g. name: A10")
            elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or not 0 < value <= MAX_INLINE_FIGURE:
                raise GpuplanError(f"hardware.gpu.{key} must be a positive number of at most {MAX_INLINE_FIGURE:.0e} "
                                   f"in the catalogue's unit, got {str(value)[:40]!r}")
            row[key] = value
    if "memory_gib" in spec and "usable_memory_mib" not in spec:
        row.pop("usable_memory_mib", None)  # the base's measured usable memory is for its own capacity
    row["id"] = str(spec.get("id") or f"{base.id}-custom")
    return _gpu_from_row(row)


def make_hardware(gpu: str | dict, gpus: int = 1, gpus_per_node: int | None = None, scale_up: str | None = None,
                  scale_out: str | None = None, price_per_gpu_hour: float | None = None,
                  power_limit_w: float | None = None) -> Hardware:
    """Resolve catalogue names into a ``Hardware``; defaults come from the GPU's row.

    The default network between nodes is the GPU's own (gpus.json ``scale_out``: the Ethernet of the
    cloud instances and rental servers that PCIe and consumer cards come in), else InfiniBand NDR 400G
    with one NIC per GPU — the usual AI-cluster design for data-center GPUs; it is printed in the
    normalized scenario so a user on other wires sees it and sets ``scale_out``.

    Bounds: gpus ≤ ``MAX_GPUS``, gpus_per_node ≤ ``MAX_GPUS_PER_NODE``, price ≤
    ``MAX_PRICE_PER_GPU_HOUR``; power_limit_w > 0 and at most the GPU's TDP (a cap above TDP
    changes nothing), or ``MAX_POWER_W`` when the TDP is not published.
    """
    g = inline_gpu(gpu) if isinstance(gpu, dict) else get_gpu(gpu)
    if not isinstance(gpus, bool) and isinstance(gpus, int) and gpus > MAX_GPUS:
        raise GpuplanError(f"hardware.gpus = {gpus:,} is more than the limit {MAX_GPUS:,}: "
                           "give the number of GPUs, e.g. 64")
    if gpus_per_node is not None and not isinstance(gpus_per_node, bool) and isinstance(gpus_per_node, int) \
            and gpus_per_node > MAX_GPUS_PER_NODE:
        raise GpuplanError(f"hardware.gpus_per_node = {gpus_per_node:,} is more than the limit "
                           f"{MAX_GPUS_PER_NODE:,}: give the GPUs in one server, e.g. 8")
    per_node = gpus_per_node if gpus_per_node is not None else node_for(g, gpus)
    up = get_fabric(g.scale_up if scale_up is None else scale_up, "scale_up", default=g.scale_up)
    out = _scale_out(scale_out if scale_out is not None else g.scale_out or DEFAULT_SCALE_OUT, per_node,
                     g.scale_out or DEFAULT_SCALE_OUT)
    if price_per_gpu_hour is not None and price_per_gpu_hour > MAX_PRICE_PER_GPU_HOUR:
        raise GpuplanError(f"hardware.price_per_gpu_hour = {price_per_gpu_hour:,.6g} is more than the limit "
                           f"${MAX_PRICE_PER_GPU_HOUR:,} per GPU-hour: give USD per GPU per hour, e.g. 2.5")
    if power_limit_w is not None:
        if not power_limit_w > 0:
            raise GpuplanError(f"hardware.power_limit_w must be positive, got {power_limit_w:g}: "
                               f"give a board power cap in watts, e.g. {g.tdp_w or 500:g}")
        if g.tdp_w and power_limit_w > g.tdp_w:
            raise GpuplanError(f"hardware.power_limit_w = {power_limit_w:,.6g} W is above the {g.tdp_w:g} W TDP of "
                               f"{g.id}, where a cap has no effect: give at most {g.tdp_w:g}, or leave it out")
        if not g.tdp_w and power_limit_w > MAX_POWER_W:
            raise GpuplanError(f"hardware.power_limit_w = {power_limit_w:,.6g} W is more than {MAX_POWER_W:,} W: "
                               "give the board power cap in watts")
    price = price_per_gpu_hour if price_per_gpu_hour is not None else g.price_usd_per_gpu_hour
    return Hardware(gpu=g, gpus=gpus, gpus_per_node=per_node, scale_up=up, scale_out=out,
                    price_per_gpu_hour=price, power_limit_w=power_limit_w, host_memory_bytes=host_memory(g, per_node))


def host_memory(g: GPU, gpus_per_node: int) -> float | None:
    """CPU memory of a node of ``gpus_per_node`` GPUs of ``g``: its reference system's per GPU (gpus.json
    ``host_memory_gb_per_node``: DGX datasheets), None where the catalogue has none (unchecked)."""
    if g.host_memory_bytes is None:
        return None
    return g.host_memory_bytes / g.gpus_per_node * gpus_per_node
