"""Small value rules of the scenario file: shares (0.05 or 5%) and node counts (for the GPU count, or echoed)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.hw_readings import system_gpus
from gpuplan.errors import GpuplanError
from gpuplan.spec import Hardware
from gpuplan.units import parse_count


def share(value: Any, key: str) -> float:
    """A share written 0.05 or 5%."""
    text = value.strip() if isinstance(value, str) else None
    if text is not None and text.endswith("%"):
        return float(parse_count(text[:-1], key)) / 100
    share = float(parse_count(value, key))
    if share >= 1:
        raise GpuplanError(f"{key} = {value!r} is a share of GPU memory: write 0.05 or 5%")
    return share


def probability(value: Any, key: str) -> float:
    """A probability written 0.05 or 5% (its range is the field's own check)."""
    text = value.strip() if isinstance(value, str) else None
    if text is not None and text.endswith("%"):
        return float(parse_count(text[:-1], key)) / 100
    return float(parse_count(value, key))


def check_nodes(hw_raw: dict, nodes: int) -> None:
    """An echoed ``hardware.nodes`` must agree with the count it was derived from."""
    if "nodes" in hw_raw and parse_count(hw_raw["nodes"], "hardware.nodes") != nodes:
        raise GpuplanError(f"hardware.nodes = {hw_raw['nodes']!r} does not match gpus / gpus_per_node "
                           f"(= {nodes} nodes): drop nodes, it is derived")


def nodes_as_gpus(hw_raw: dict, hardware: Hardware) -> tuple[dict, Hardware]:
    """"4 nodes of 8 GPUs": ``hardware.nodes`` without ``gpus`` gives the count the nodes hold (``gpus_per_node`` as
    given or the GPU's usual node); with ``gpus`` it must agree with it (``check_nodes``). A system or instance named
    with neither is one of it (``system_gpus``: a g5.12xlarge's 4 GPUs), a count the input did not give."""
    if "nodes" not in hw_raw and "gpus" not in hw_raw and (one := system_gpus(hw_raw.get("gpu"))) is not None:
        return hw_raw, replace(hardware, gpus=one)  # a system named without a count: one of it (not a given count)
    if "nodes" not in hw_raw or "gpus" in hw_raw:
        check_nodes(hw_raw, hardware.nodes)
        return hw_raw, hardware
    nodes = parse_count(hw_raw["nodes"], "hardware.nodes")
    if nodes < 1 or nodes != int(nodes):
        raise GpuplanError(f"hardware.nodes = {hw_raw['nodes']!r} is not a whole number of nodes: give e.g. nodes: 4")
    hardware = replace(hardware, gpus=int(nodes) * hardware.gpus_per_node)
    return {**hw_raw, "gpus": hardware.gpus}, hardware


_COUNTED = re.compile(r"^\s*(\d+)\s*[x×*]\s*(\S.*)$", re.IGNORECASE)
_COUNTED_BARE = re.compile(r"^\s*(\d+)\s+(\S.*)$")  # "512 A100 80GB", "64 H100s": a count, no x


def _counted_bare(gpu: str) -> re.Match[str] | None:
    """"512 A100 80GB": a count and a GPU, as a sentence writes them — where the rest is a GPU and the whole is not
    ("2080 Ti" is a GPU's name)."""
    m = _COUNTED_BARE.match(gpu)
    if m is None or _is_gpu(gpu) or not _is_gpu(m[2]):
        return None
    return m


def _is_gpu(name: str) -> bool:
    try:
        get_gpu(name)
    except GpuplanError:
        return False
    return True


_COUNTED_AFTER = re.compile(r"^\s*(\S.*?)\s+[x×*]\s*(\d+)\s*$", re.IGNORECASE)  # "A100 x8", "H100 × 64"
_COUNTED_JOINED = re.compile(r"^\s*(\S.*?)[x×*](\d+)\s*$", re.IGNORECASE)  # "H100x8", "A100*16"


def _counted_joined(gpu: str) -> re.Match[str] | None:
    """"H100x8": a GPU and its count without a space — where the rest is a GPU and the whole is not."""
    m = _COUNTED_JOINED.match(gpu)
    if m is None or _is_gpu(gpu) or not _is_gpu(m[1]):
        return None
    return m
# "2 nodes of 8x H100", "4 servers × 8 A100-80GB": nodes, GPUs per node, the GPU
_NODES_OF = re.compile(r"^\s*(\d+)\s*(?:nodes?|servers?|hosts?|machines?)\s*(?:of|[x×*])\s*(\d+)\s*[x×*]?\s*(\S.*)$",
                       re.IGNORECASE)


def counted_gpu(hw_raw: dict) -> dict:
    """A GPU named with its count, as papers write it ("8x A100-80GB", "64× H100", "A100 x8", "2 nodes of 8x H100"),
    or a system with its ("8x p4d.24xlarge", "16x DGX A100": that many systems, ``system_gpus`` each):
    the name, and the count as ``hardware.gpus`` (and the node's as ``gpus_per_node``) when that is not given; a
    different count given beside it is refused."""
    gpu = said = hw_raw.get("gpu")
    nodes = _NODES_OF.match(gpu) if isinstance(gpu, str) else None
    if nodes is not None:  # the count per node too: the node it states, unless gpus_per_node says another
        per = int(nodes[2])
        if "gpus_per_node" in hw_raw and parse_count(hw_raw["gpus_per_node"], "hardware.gpus_per_node") != per:
            raise GpuplanError(f"hardware.gpu {gpu!r} names {per} GPUs per node, hardware.gpus_per_node is "
                               f"{hw_raw['gpus_per_node']!r}: give it once")
        hw_raw = {**hw_raw, "gpu": f"{int(nodes[1]) * per}x {nodes[3].strip()}", "gpus_per_node": per}
        gpu = hw_raw["gpu"]
    m = _COUNTED.match(gpu) if isinstance(gpu, str) else None
    m = m if m is not None or not isinstance(gpu, str) else _counted_bare(gpu)
    after = (_COUNTED_AFTER.match(gpu) or _counted_joined(gpu)) if isinstance(gpu, str) and m is None else None
    if m is None and after is None:
        return hw_raw
    n, name = (int(m[1]), m[2].strip()) if m is not None else (int(after[2]), after[1].strip())
    n *= system_gpus(name) or 1  # "8x p4d.24xlarge": eight instances of eight GPUs
    if "gpus" in hw_raw and parse_count(hw_raw["gpus"], "hardware.gpus") != n:
        raise GpuplanError(f"hardware.gpu {said!r} names {n} GPUs, hardware.gpus is {hw_raw['gpus']!r}: give the count "
                           f"once (gpu: {name}, gpus: N)")
    return {**hw_raw, "gpu": name, "gpus": n}
