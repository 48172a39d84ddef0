"""The user's words for the training software, its precision, optimizer and attention kernel, read as the values
they mean (catalog/stacks.py, stacks.json: hf-trainer → pytorch-fsdp, torchtune's bf16 → bf16-pure,
paged_adamw_8bit → adamw-8bit, FlashAttention-2 → flash), and the precision a GPU without bf16 tensor cores
trains in when the input leaves it open or names no 16-bit format."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.spec import PRECISIONS, Hardware

Reading = tuple[str, str, Any, str]  # field, the word given, the value it stands for, the cited rule


def read_words(kw: dict[str, Any]) -> tuple[Reading, ...]:
    """Read ``kw``'s words in place (their readings returned); an open precision takes the framework's documented
    default (frameworks.json defaults.precision) when it is one of gpuplan's."""
    from gpuplan.catalog.frameworks import get_framework
    from gpuplan.catalog.stacks import read_attention, read_framework, read_optimizer, read_precision

    read = []
    if isinstance(kw.get("attention"), str):
        kw["attention"], r = read_attention(kw["attention"])
        read.append(r)
    if isinstance(kw.get("optimizer"), str):
        kw["optimizer"], impl, r = read_optimizer(kw["optimizer"])
        if impl is not None and "optimizer_impl" not in kw:
            kw["optimizer_impl"] = impl
        read.append(r)
    if "framework" in kw:
        kw["framework"], r = read_framework(kw["framework"])
        read.append(r)
    framework = kw.get("framework", "generic")
    if "precision" in kw:
        kw["precision"], r = read_precision(kw["precision"], framework)
        read.append(r)
    else:
        default = get_framework(framework).defaults.get("precision")
        if default is not None and default.value in PRECISIONS:
            kw["precision"] = default.value
    return tuple((r.field, r.given, r.value, r.rule) for r in read if r is not None)


def precision_for(tr_raw: dict, hardware: Hardware) -> tuple[dict, tuple[Reading, ...]]:
    """On a GPU without bf16 tensor cores (V100, T4) 16-bit mixed precision is fp16: an open precision — what
    training there runs; bf16, the default elsewhere and the documented default of torchtitan, FSDP, nanotron and
    torchtune, has no tensor cores there — and a word for 16-bit mixed precision that names no format ("mixed",
    "mixed precision"), said so."""
    from gpuplan.catalog.frameworks import get_framework
    from gpuplan.catalog.stacks import read_framework, sixteen_bit

    if not hardware.gpu.lacks_bf16:
        return tr_raw, ()
    word = tr_raw.get("precision")
    if isinstance(word, str) and sixteen_bit(word):
        rule = (f"precision {word} read as fp16: 16-bit mixed precision on {hardware.gpu.id}, which has no bf16 "
                "tensor cores, is fp16 with loss scaling over fp32 master weights")
        return {**tr_raw, "precision": "fp16"}, (("training.precision", word, "fp16", rule),)
    if word is not None:
        return tr_raw, ()
    try:
        default = get_framework(read_framework(str(tr_raw.get("framework", "generic")).strip().lower())[0]
                                ).defaults.get("precision")
    except GpuplanError:
        return tr_raw, ()  # an unknown framework: the training section says so
    if default is not None and default.value not in ("bf16", "bf16-pure"):
        return tr_raw, ()  # a documented default that is not bf16 runs as documented
    return {**tr_raw, "precision": "fp16"}, ()

