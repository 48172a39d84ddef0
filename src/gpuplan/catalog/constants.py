"""The modelling constants of ``constants.json``: every number named, with its source and how it
was set. Scalars through ``constant``, tables (per architecture, per term) through ``table``.

``override`` is the one sanctioned way to try other values (the fitting scripts): it swaps the
values for the duration of a ``with`` block and clears every cache derived from them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from gpuplan.catalog import _read

_overrides: dict[str, Any] = {}


def _value(name: str) -> Any:
    if name in _overrides:
        return _overrides[name]
    return _read("constants.json")[name]["value"]


def constant(name: str) -> float:
    """A scalar constant, e.g. ``constant("comm_interference")``."""
    value = _value(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"constant {name!r} is a table: use table()")
    return value


def table(name: str) -> Mapping[str, Any]:
    """A constant that is a table, e.g. ``table("gemm_efficiency")["hopper"]`` (read-only)."""
    value = _value(name)
    if not isinstance(value, dict):
        raise TypeError(f"constant {name!r} is a scalar: use constant()")
    return MappingProxyType(value)


def clear_caches() -> None:
    """Forget every cached value of gpuplan's modules (they may derive from these constants)."""
    import functools
    import sys

    for name, mod in list(sys.modules.items()):
        if name.startswith("gpuplan.") and mod is not None:
            for obj in list(vars(mod).values()):
                if isinstance(obj, functools._lru_cache_wrapper) and obj.__module__ == name:
                    obj.cache_clear()
            for attr in getattr(mod, "CONSTANT_CACHES", ()):  # a module's own dict caches, by name
                getattr(mod, attr).clear()


def entries() -> dict[str, dict[str, Any]]:
    """Every constant's row (value, unit, source, status), for reports and ``validate --constants``."""
    rows = {k: dict(v) for k, v in _read("constants.json").items() if not k.startswith("_") and isinstance(v, dict)}
    for k, v in _overrides.items():
        if k in rows:
            rows[k]["value"] = v
    return rows


@contextmanager
def override(values: Mapping[str, Any]) -> Iterator[None]:
    """Evaluate with other values of some constants (tables replaced whole), then restore."""
    saved = dict(_overrides)
    _overrides.update(values)
    clear_caches()
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
        clear_caches()
