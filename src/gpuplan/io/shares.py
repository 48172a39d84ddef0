"""Two small value rules of the scenario file: shares (0.05 or 5%) and the echoed node count."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
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


def check_nodes(hw_raw: dict, nodes: int) -> None:
    """An echoed ``hardware.nodes`` must agree with the count it was derived from."""
    if "nodes" in hw_raw and parse_count(hw_raw["nodes"], "hardware.nodes") != nodes:
        raise GpuplanError(f"hardware.nodes = {hw_raw['nodes']!r} does not match gpus / gpus_per_node "
                           f"(= {nodes} nodes): drop nodes, it is derived")
