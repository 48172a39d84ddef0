"""Layout fields as run descriptions write them — ``recompute`` ("full AC", "per-op SAC", Megatron's "uniform"),
``pp_schedule`` ("Interleaved 1F1B", torchtitan's "ZBVZeroBubble"), ``zero`` ("ZeRO-3", "stage 2", "FULL_SHARD",
"ZeRO-Offload", "FSDP") and ``offload`` (DeepSpeed's device word "cpu", a switch, "optimizer+params") — rewritten to
gpuplan's words, each reading stated (io/user_keys.py reads them with the rest of a user's keys)."""

from __future__ import annotations

import re
from typing import Any

from gpuplan.catalog import without_remarks
from gpuplan.errors import GpuplanError
from gpuplan.io.words import Reading

RECOMPUTE_MODES = ("none", "selective", "selective-op", "full")
PP_SCHEDULES = ("1f1b", "interleaved", "zero-bubble", "gpipe", "dualpipe")
OFFLOADS = ("none", "optimizer", "params")
# an offload as DeepSpeed's configs and papers name it: the device (offload_optimizer.device: cpu — ZeRO-Offload, the
# optimizer states and step on the CPU, Ren et al. 2021) or a switch; both states named (offload_param beside
# offload_optimizer under ZeRO-3: ZeRO-Infinity's CPU case, Rajbhandari et al. 2021) as gpuplan's params — parameters,
# gradients and optimizer states on the host
_OPTIMIZER_WORDS = {"cpu", "true", "yes", "on", "host", "optim", "optimiser", "optimizer-states", "zero-offload"}
_PARAM_WORDS = {"all", "both", "param", "parameters", "optimizer+params", "params+optimizer", "optimizer+param",
                "param+optimizer", "optimizer-and-params", "params-and-optimizer"}


def layout_words(layout: dict) -> list[Reading]:
    """``layout.recompute``, ``pp_schedule``, ``zero`` and ``offload`` as run descriptions write them, in place."""
    reads: list[Reading] = []
    if isinstance(layout.get("zero"), str) and re.sub(r"[^a-z]+", "", layout["zero"].lower()) in ("hybrid", "hsdp"):
        layout["zero"] = "HYBRID_SHARD"  # FSDP's hybrid shard (HSDP), read with the node's GPUs (io/user_keys.py)
    for key, modes, reader in (("recompute", RECOMPUTE_MODES, _recompute_word),
                               ("pp_schedule", PP_SCHEDULES, _schedule_word), ("zero", (), _zero_word)):
        word = layout.get(key)
        if isinstance(word, str) and word.strip().lower() not in modes and not re.fullmatch(r"\s*\d+\s*", word):
            value, why = reader(word)
            if value is not None:
                layout[key] = value
                reads.append((f"layout.{key}", word, value, why))
                if key == "zero":
                    reads += _zero_offload(layout, word)
    return reads + _offload(layout)


def _zero_offload(layout: dict, word: str) -> list[Reading]:
    """The offload a ZeRO word names beside its stage ("ZeRO-Offload": the optimizer; "ZeRO-Infinity": parameters
    too), where ``layout.offload`` is open."""
    from gpuplan.catalog.stacks import sharding_words

    off = sharding_words(word).offload
    if off is None or layout.get("offload") is not None:
        return []
    layout["offload"] = off
    return [("layout.offload", word, off, f"{word} offloads the {off} to the CPU")]


def _offload(layout: dict) -> list[Reading]:
    word: Any = layout.get("offload")
    if isinstance(word, bool):
        layout["offload"] = "optimizer" if word else "none"
        return [("layout.offload", f"offload: {str(word).lower()}", layout["offload"],
                 "an offload switched on is ZeRO-Offload's: the optimizer states and step on the CPU" if word else
                 "offload off: none")]
    if not isinstance(word, str) or word.strip().lower() in OFFLOADS:
        return []
    key = re.sub(r"[\s_]+", "-", without_remarks(word).strip().lower()).replace("-+-", "+")
    if key in ("false", "no", "off", "gpu", "disabled"):
        value, why = "none", f"offload {word}: nothing offloaded"
    elif key in _OPTIMIZER_WORDS:
        value, why = "optimizer", (f"offload {word}: the optimizer states and step on the CPU (DeepSpeed's "
                                   "offload_optimizer.device: cpu, ZeRO-Offload)")
    elif key in _PARAM_WORDS:
        value, why = "params", f"offload {word}: parameters, gradients and optimizer states on the CPU"
    elif key == "nvme":
        raise GpuplanError(f"layout.offload {word!r}: ZeRO-Infinity's NVMe offload is not modelled (its bandwidth is "
                           "the drives'); give offload: params for the same GPU memory with host-memory offload")
    else:
        raise GpuplanError(f"layout.offload {word!r} is none of none, optimizer (DeepSpeed's offload_optimizer, "
                           "'cpu'), params (parameters, gradients and optimizer states)")
    layout["offload"] = value
    return [("layout.offload", word, value, why)]


def _recompute_word(word: str) -> tuple[str | None, str]:
    toks = set(re.split(r"[^a-z0-9]+", without_remarks(word.lower())))
    if "selective" in toks and "layer" in toks:
        raise GpuplanError(f"layout.recompute {word!r}: layer-wise selective checkpointing recomputes every k-th block "
                           "whole: give recompute: full with recompute_every: k (torchtitan's selective_ac_option)")
    if "full" in toks or "uniform" in toks or toks & {"true", "yes", "on"} or \
            (toks & {"checkpointing", "recomputation", "ac"} and not toks & {"selective", "sac", "no", "off"}):
        how = "Megatron's recompute_method uniform: " if "uniform" in toks else ""
        return "full", f"recompute {word}: {how}every block's activations recomputed in backward (full)"
    if toks & {"sac", "op"} or ("selective" in toks and "ac" in toks):
        return "selective-op", (f"recompute {word}: selective activation checkpointing per op (torchtitan's SAC: every "
                                "other matmul's output kept), selective-op")
    if toks & {"no", "off", "false"}:
        return "none", f"recompute {word}: no recomputation"
    return None, ""


def _schedule_word(word: str) -> tuple[str | None, str]:
    t = re.sub(r"[^a-z0-9]+", "", word.lower())
    for pattern, schedule in (("zerobubble|zbv|^zb", "zero-bubble"), ("interleav", "interleaved"),
                              ("dualpipe", "dualpipe"), ("gpipe|filldrain", "gpipe"), ("1f1b|onefoneb", "1f1b")):
        if re.search(pattern, t):
            return schedule, f"pipeline schedule {word} read as {schedule}"
    return None, ""


def _zero_word(word: str) -> tuple[int | None, str]:
    """A ZeRO stage as frameworks and papers name it ("ZeRO-3", "stage 2", "FULL_SHARD", "SHARD_GRAD_OP", "FSDP":
    PyTorch FSDP's default strategy is FULL_SHARD; "DDP": no sharding)."""
    from gpuplan.catalog.stacks import sharding_words

    said = sharding_words(word)
    stage = None if said.hybrid else said.stage  # HYBRID_SHARD: read with the node (_sharding_keys)
    if stage is None and (m := re.fullmatch(r"\s*(?:zero\s*)?stage\s*([0-3])\s*", word.lower())):
        stage = int(m[1])
    plain = re.sub(r"[^a-z0-9]+", "", word.lower())
    if stage is None and plain in ("fsdp", "fsdp1", "fsdp2", "pytorchfsdp", "torchfsdp"):
        return 3, f"layout.zero {word}: PyTorch FSDP's default sharding strategy, FULL_SHARD: ZeRO-3"
    if stage is None and plain in ("ddp", "dp", "none", "noshard"):
        return 0, f"layout.zero {word}: no sharding, ZeRO-0"
    return stage, f"layout.zero {word} read as ZeRO-{stage}"
