"""Cited data files: GPUs, fabrics, models and modelling constants. Loaded lazily, cached."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_json(name: str) -> Any:
    """A data file of this package, e.g. ``gpus.json`` or ``models/index.json``."""
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))
