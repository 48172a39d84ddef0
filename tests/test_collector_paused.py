"""A search runs with the cyclic garbage collector paused (search/quiet.py) and leaves it as it found it."""

from __future__ import annotations

import gc
import threading

from conftest import make

from gpuplan.search.plan import plan
from gpuplan.search.quiet import collector_paused
from gpuplan.spec.options import PlanOptions


def _scenario():
    return make("llama-3.2-1b", "h100-sxm", None, training={"seq_len": 2048, "global_batch": 32, "tokens": 1e9})


def test_the_search_runs_paused_and_restores_the_collector():
    seen: list[bool] = []
    assert gc.isenabled()
    plan(_scenario(), PlanOptions(max_gpus=16), progress=lambda f, label: seen.append(gc.isenabled()))
    assert seen and not any(seen)  # paused while the layouts were searched
    assert gc.isenabled()  # and enabled again after


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    try:
        plan(_scenario(), PlanOptions(max_gpus=8))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nested_and_concurrent_pauses_restore_once():
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    with collector_paused():
        pass
    assert not gc.isenabled()  # the other thread's search still runs
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_an_error_inside_restores_the_collector():
    try:
        with collector_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
