"""What every export target shares: the Export value, the scenario's parts, batch and step
arithmetic, the hybrid-shard split, and the comment header."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.units import GiB

# the training software's own configs, and the schedulers that start them on the planned nodes (wrapping one of
# the framework targets: ``--via``)
FRAMEWORK_TARGETS = ("torchtitan", "deepspeed", "accelerate", "megatron", "torchrun")
SCHEDULER_TARGETS = ("slurm", "kubernetes", "skypilot")
TARGETS = FRAMEWORK_TARGETS + SCHEDULER_TARGETS
RDZV_PORT = 29500  # torchrun's default master port (torch.distributed.run --master-port)


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    target: str
    config: Any            # dict (JSON/YAML/TOML targets) or list[str] (argument lists)
    text: str              # what to save: the file a user hands to the framework
    filename: str          # a conventional file name for it
    notes: tuple[str, ...] = field(default=())


def _parts(est: dict) -> tuple[dict, dict, dict]:
    sc = est.get("scenario")
    if not sc or "layout" not in sc:
        raise GpuplanError("export needs an Estimate with a normalized scenario (from evaluate or plan)")
    return sc["hardware"], sc["training"], sc["layout"]


def _batches(hw: dict, tr: dict, lay: dict) -> tuple[int, int]:
    """(global batch in sequences, gradient-accumulation steps = micro-batches per replica per step)."""
    gb = tr.get("global_batch") or lay["dp"] * lay["micro_batch"]
    per = lay["dp"] * lay["micro_batch"]
    if gb % per:
        raise GpuplanError(f"global batch {gb} is not a multiple of dp×micro_batch = {per}")
    return gb, gb // per


def _steps(tr: dict, gb: int) -> int | None:
    if tr.get("steps"):
        return int(tr["steps"])
    if tr.get("tokens"):
        return math.ceil(tr["tokens"] / (gb * tr["seq_len"]))
    return None


def _shard_split(lay: dict) -> tuple[int, int] | None:
    """(replicate, shard) degrees over dp for hybrid sharding; None when not hybrid.

    ``zero_group`` counts the ranks of the dp×cp grid that share one copy of the state; the
    frameworks below shard over cp on their own (FSDP's mesh is dp_shard × cp), so the dp part
    of the group is zero_group / cp."""
    g = lay.get("zero_group")
    if not g or lay["zero"] == 0:
        return None
    shard = g // lay["cp"] if lay["cp"] > 1 and g % lay["cp"] == 0 else g
    if lay["dp"] % shard:
        return None
    return lay["dp"] // shard, shard


def _header(est: dict, run: str | None) -> list[str]:
    from gpuplan.report.text import layout_str

    sc = est["scenario"]
    hw = sc["hardware"]
    lines = [f"gpuplan export: {est['model'].get('name', sc.get('model'))} on {hw['gpus']}× {hw['gpu']} "
             f"({hw['nodes']} node{'s' if hw['nodes'] > 1 else ''})",
             f"layout: {layout_str(sc['layout'])}"]
    t = est.get("time") or {}
    if t.get("tokens_per_s_per_gpu"):
        lines.append(f"predicted: {t['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, MFU {t['mfu']:.0%}, "
                     f"{est['memory']['total'] / GiB:.1f} GiB per GPU")
    if run:
        lines.append(f"run: {run}")
    return lines

