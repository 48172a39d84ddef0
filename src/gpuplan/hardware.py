"""GPU and fabric catalogue lookups (aliases, closest-name suggestions) and ``Hardware`` building."""

from __future__ import annotations

import difflib
from functools import cache

from gpuplan.catalog import load_json
from gpuplan.errors import GpuplanError
from gpuplan.spec import GPU, Fabric, Hardware

GiB = 2**30
MiB = 2**20


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


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
        tdp_w=row["tdp_w"], price_usd_per_gpu_hour=row.get("price_usd_per_gpu_hour"),
        price_date=row.get("price_date"), source=row["source"], aliases=tuple(row.get("aliases", ())),
        architecture=row.get("architecture", ""), sm_count=row.get("sm_count") or 108,
    )


def _fabric_from_row(row: dict) -> Fabric:
    lat = row.get("latency_us")
    gbps = row.get("link_gbit_per_s")
    per_gpu = row.get("gb_per_s_per_gpu")
    return Fabric(
        id=row["id"], name=row["name"], kind=row["kind"],
        bytes_per_s_per_gpu=per_gpu * 1e9 if per_gpu else None,
        domain_gpus=row.get("domain_gpus"),
        link_bytes_per_s=gbps * 1e9 / 8 if gbps else None,
        links_per_node=row.get("links_per_node"),
        latency_s=lat * 1e-6 if lat is not None else None,
        efficiency=row.get("efficiency"), source=row.get("source", ""),
    )


@cache
def _gpu_index() -> tuple[dict[str, GPU], dict[str, str]]:
    gpus = {row["id"]: _gpu_from_row(row) for row in load_json("gpus.json")["gpus"]}
    names = {}
    for g in gpus.values():
        for n in (g.id, *g.aliases):
            names[_key(n)] = g.id
    return gpus, names


@cache
def _fabric_index() -> tuple[dict[str, Fabric], dict[str, str]]:
    rows = load_json("fabrics.json")["fabrics"]
    fabrics = {row["id"]: _fabric_from_row(row) for row in rows}
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


def get_gpu(name: str) -> GPU:
    table, names = _gpu_index()
    gid = names.get(_key(str(name)))
    if gid is None:
        hint = _suggest(str(name), names)
        raise GpuplanError(f"unknown GPU {name!r}: {hint + ' ' if hint else ''}(`gpuplan gpus` lists them all)")
    return table[gid]


def get_fabric(name: str, kind: str | None = None) -> Fabric:
    table, names = _fabric_index()
    fid = names.get(_key(str(name)))
    if fid is None:
        hint = _suggest(str(name), names)
        raise GpuplanError(f"unknown fabric {name!r}: {hint + ' ' if hint else ''}"
                           f"(known: {', '.join(sorted(table))})")
    fab = table[fid]
    if kind is not None and fab.kind != kind:
        want = "hardware.scale_up takes an intra-node fabric" if kind == "scale_up" else \
            "hardware.scale_out takes a network between nodes"
        raise GpuplanError(f"fabric {name!r} is a {fab.kind} fabric: {want} "
                           f"({', '.join(sorted(f.id for f in table.values() if f.kind == kind))})")
    return fab


DEFAULT_SCALE_OUT = "ib-ndr-400g"


def make_hardware(gpu: str, gpus: int = 1, gpus_per_node: int | None = None, scale_up: str | None = None,
                  scale_out: str | None = None, price_per_gpu_hour: float | None = None,
                  power_limit_w: float | None = None) -> Hardware:
    """Resolve catalogue names into a ``Hardware``; defaults come from the GPU's row.

    The default network between nodes is InfiniBand NDR 400G with one NIC per GPU — the
    usual AI-cluster design for the GPUs in this catalogue; it is printed in the normalized
    scenario so a user on other wires sees it and sets ``scale_out``.
    """
    g = get_gpu(gpu)
    per_node = gpus_per_node if gpus_per_node is not None else g.gpus_per_node
    up = get_fabric(scale_up or g.scale_up, "scale_up")
    out = get_fabric(scale_out or DEFAULT_SCALE_OUT, "scale_out")
    price = price_per_gpu_hour if price_per_gpu_hour is not None else g.price_usd_per_gpu_hour
    return Hardware(gpu=g, gpus=gpus, gpus_per_node=per_node, scale_up=up, scale_out=out,
                    price_per_gpu_hour=price, power_limit_w=power_limit_w)
