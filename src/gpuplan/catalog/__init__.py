"""Cited data files (GPUs, fabrics, models, modelling constants) and their typed loaders.

No formula module reads a file: they ask ``catalog.hardware`` (GPUs, fabrics), ``catalog.models``
(architectures) and ``catalog.constants`` (named, cited numbers). Files are read lazily, once.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def _read(name: str) -> Any:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def load_json(name: str) -> Any:
    """A data file of this package, e.g. ``gpus.json`` or ``models/index.json`` — a fresh copy, so
    no caller can change what the next one reads."""
    return copy.deepcopy(_read(name))
