"""Cited data files (GPUs, fabrics, models, modelling constants) and their typed loaders.

No formula module reads a file: they ask ``catalog.hardware`` (GPUs, fabrics), ``catalog.models``
(architectures) and ``catalog.constants`` (named, cited numbers). Files are read lazily, once.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from gpuplan.errors import GpuplanError


@cache
def _read(name: str) -> Any:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


_REMARKS = re.compile(r"\([^)]*\)|,.*$")


def without_remarks(text: str) -> str:
    """A name or word as papers' tables write it without its remarks, in parentheses or after a comma
    ('A100-SXM4-80GB (Selene)', 'GPT-3 175B (174.6B)', 'fp16 (loss scaling)', 'PCIe4, no NVLink'): the text itself
    when it has none, '' when nothing else is left."""
    return " ".join(_REMARKS.sub(" ", text).split())


def load_json(name: str) -> Any:
    """A data file of this package, e.g. ``gpus.json`` or ``models/index.json`` — a fresh copy, so
    no caller can change what the next one reads."""
    return copy.deepcopy(_read(name))


def bad_key(where: str, key: str, why: str) -> GpuplanError:
    """One catalogue row's problem: ``{where}: {key} {why}``."""
    return GpuplanError(f"{where}: {key} {why}")


def reject_unknown(row: Mapping[str, Any], where: str, allowed: Iterable[str], why: str) -> None:
    """A catalogue row (built-in or the user's) holds only ``allowed`` keys; the first other one is named."""
    unknown = sorted(set(row) - set(allowed))
    if unknown:
        raise bad_key(where, unknown[0], why)


def require(row: Mapping[str, Any], where: str, required: Iterable[str], note: str = "") -> None:
    """A catalogue row gives every ``required`` key; ``note`` says how where one is missing."""
    missing = [k for k in required if row.get(k) is None]
    if missing:
        raise GpuplanError(f"{where}: missing {', '.join(missing)}{note}")
