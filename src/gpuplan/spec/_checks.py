"""Small checks shared by the spec types: one-line GpuplanError messages naming the key."""

from __future__ import annotations

from gpuplan.errors import GpuplanError


def choice(value: str, allowed: tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise GpuplanError(f"{key}: {value!r} is not one of {', '.join(allowed)}")


def positive(value: float, key: str, *, integer: bool = True) -> None:
    if integer and (isinstance(value, bool) or not isinstance(value, int)):
        raise GpuplanError(f"{key} must be a whole number, got {value!r}")
    if value <= 0:
        raise GpuplanError(f"{key} must be positive, got {value!r}")


def at_most(value: float, limit: float, key: str, fix: str) -> None:
    if value > limit:
        raise GpuplanError(f"{key} = {value:,.0f} is more than the limit {limit:,.0f}: {fix}")
