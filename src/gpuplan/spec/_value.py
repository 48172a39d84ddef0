"""Equality and hashing by content, with the hash computed once.

The model's caches key on a ``ModelSpec`` and a ``Training`` millions of times a plan; a frozen
dataclass's generated ``__hash__`` would hash every field on every lookup, and hashing by identity
(what these types did) makes an equal value parsed again — the next web request, the same scenario
read twice — miss every cache while the caches only grow. ``ValueHashed`` types compare by their
fields and keep the hash they computed when built (``seal``)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def content(obj: Any) -> tuple:
    """The fields that make the value (the cached key and ``compare=False`` fields left out)."""
    return tuple(getattr(obj, f.name) for f in fields(obj) if f.compare and f.name != "_hash")


def seal(obj: Any) -> None:
    """Compute and store ``obj``'s content and hash (call at the end of ``__post_init__``)."""
    key = content(obj)
    object.__setattr__(obj, "_hash", (hash(key), key))


class ValueHashed:
    """Mixin for frozen slots dataclasses declared with ``eq=False`` and a ``_hash`` field (the hash and
    the content it was computed from: equality compares the hashes, then the content tuples)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        return self._hash == other._hash  # type: ignore[attr-defined,no-any-return]

    def __hash__(self) -> int:
        return self._hash[0]  # type: ignore[attr-defined,no-any-return]
