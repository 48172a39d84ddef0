"""The cyclic garbage collector paused while a search runs.

A search allocates millions of short-lived tuples and small objects (layout keys, peaks, floors), every one freed
by its reference count; none forms a reference cycle. CPython's collector still runs a generation-0 pass every
700 allocations and a full pass over every live object — the peak and floor tables, the model's memo tables —
every few hundred of those: on this 2-core machine that was 30 % of the Llama-3.1-405B all-types plan (4.3 s ->
3.0 s paused) and of the serve load test's plans (7.5 s -> 5.2 s). The collector is paused for the search and its
answer and restored after, as it was; nested and concurrent searches (threads of one process) pause it once."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_state = {"depth": 0, "was": True}


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside (usable as a decorator); the outermost exit restores it as it was."""
    with _lock:
        if _state["depth"] == 0:
            _state["was"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was"]:
                gc.enable()
