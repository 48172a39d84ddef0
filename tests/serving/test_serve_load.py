"""A short run of benchmarks/bench_serve.py on the session's server: 50 clients sending a mix of
evaluate and plan requests for a few seconds, then again with a Llama 3.1 405B plan over every GPU
type in flight. No request fails; evaluate stays fast (bounds generous for a shared CI machine;
the benchmark measures the targets: p95 < 100 ms, < 250 ms with the 405B plan)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from .conftest import ROOT

pytest.importorskip("starlette")
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_serve  # noqa: E402

P95_BOUND_S = 1.0  # the CI machine is shared: far above the target, still far below a blocked event loop
# with the 405B plan in flight on a 2-core machine that the suite's other test worker shares, evaluate's p95 measured
# 0.3-2.2 s across clean-clone runs (the plan's niced worker, the 50 clients and the other worker's tests all on two
# cores); an event loop blocked by the plan would hold every evaluate for the plan's whole run, 8-10 s of CPU here
BUSY_P95_BOUND_S = 3.0


def test_fifty_clients_mixed_then_with_a_405b_plan_in_flight(served):
    mixed = asyncio.run(bench_serve.load(served.host, served.port, clients=50, seconds=4, think_s=0.25,
                                         plan_every=25, plan_think_s=0.5, big=False))
    assert mixed.errors == []
    assert len(mixed.latencies["evaluate"]) > 200 and mixed.latencies["plan"]
    assert bench_serve.pct(mixed.latencies["evaluate"], 0.95) < P95_BOUND_S

    busy = asyncio.run(bench_serve.load(served.host, served.port, clients=50, seconds=4, think_s=0.25,
                                        plan_every=25, plan_think_s=0.5, big=True, seed=1000))
    assert busy.errors == [] and busy.big_sent >= 1
    # the 405B plan (~4 s of CPU alone) is in flight: evaluate is answered meanwhile, not after it
    assert len(busy.latencies["evaluate"]) > 200
    assert bench_serve.pct(busy.latencies["evaluate"], 0.95) < BUSY_P95_BOUND_S
