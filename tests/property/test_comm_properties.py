"""Properties of the collective model (model/comm.py) on every catalogue fabric: more bytes never take
less time, a split into more calls never costs less, NVLS only ever speeds an all-reduce up, and no
fabric runs faster than the measured sweep it was read from."""

import math
from dataclasses import replace

import pytest
from conftest import make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.catalog.hardware import fabrics, gpus
from gpuplan.model.comm import all_gather_s, all_reduce_s, all_to_all_s, curve_ramp, send_recv_s, topology

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
GPU_IDS = sorted(g.id for g in gpus())
SIZES = st.floats(1e3, 3e10)


def _topo(gpu: str, nodes: int):
    per_node = next(g.gpus_per_node for g in gpus() if g.id == gpu)
    return topology(make(gpu=gpu, gpus=per_node * nodes, hardware={"scale_out": "ib-ndr-400g"}).hardware)


@SETTINGS
@given(gpu=st.sampled_from(GPU_IDS), nodes=st.sampled_from([1, 2, 16]), a=SIZES, b=SIZES,
       stride=st.sampled_from([1, 2, 8]))
def test_more_bytes_never_take_less_time(gpu, nodes, a, b, stride):
    topo = _topo(gpu, nodes)
    small, large = sorted((a, b))
    n = max(2, min(8 * nodes // stride, 64))
    for f in (all_reduce_s, all_gather_s, all_to_all_s):
        assert f(small, n, stride, topo) <= f(large, n, stride, topo) * (1 + 1e-12)
    assert send_recv_s(small, nodes > 1, topo) <= send_recv_s(large, nodes > 1, topo) * (1 + 1e-12)


NETWORKS = sorted(f.id for f in fabrics() if f.kind == "scale_out")


@SETTINGS
@given(gpu=st.sampled_from(["h100-sxm", "a100-80gb-sxm", "b200", "l40s", "mi300x"]), net=st.sampled_from(NETWORKS),
       nodes=st.sampled_from([2, 4]), a=SIZES, b=SIZES)
def test_more_bytes_never_take_less_time_on_any_network(gpu, net, nodes, a, b):
    # every network's ramp (its own two-node sweep, one it borrows, or NVLink's) keeps the time monotone in size
    per_node = next(g.gpus_per_node for g in gpus() if g.id == gpu)
    topo = topology(make(gpu=gpu, gpus=per_node * nodes, hardware={"scale_out": net}).hardware)
    small, large = sorted((a, b))
    n = per_node * nodes
    for f in (all_reduce_s, all_gather_s, all_to_all_s):
        assert f(small, n, 1, topo) <= f(large, n, 1, topo) * (1 + 1e-12)
    assert send_recv_s(small, True, topo) <= send_recv_s(large, True, topo) * (1 + 1e-12)


def test_every_network_ramp_keeps_its_time_monotone_point_by_point():
    # a sweep's own noise (a larger message timed faster: Nebius 2 x 8 H100, 97.9 us at 512 KiB, 87.1 at 1 MiB) is
    # held out of the ramp: between two sizes it grows by at most their ratio (and is a power law in between)
    for f in fabrics():
        if f.curve is None:
            continue
        xs, ys = curve_ramp(f.curve)
        for i in range(1, len(xs)):
            assert ys[i] <= ys[i - 1] * math.exp(xs[i] - xs[i - 1]) * (1 + 1e-12), (f.id, i)
            assert math.exp(xs[i]) / ys[i] >= math.exp(xs[i - 1]) / ys[i - 1] * (1 - 1e-12), (f.id, i)


@SETTINGS
@given(gpu=st.sampled_from(GPU_IDS), nbytes=SIZES, calls=st.integers(1, 2000))
def test_splitting_a_gather_never_costs_less(gpu, nbytes, calls):
    topo = _topo(gpu, 2)
    assert all_gather_s(nbytes, 16, 1, topo, calls) >= all_gather_s(nbytes, 16, 1, topo) * (1 - 1e-12)


@SETTINGS
@given(gpu=st.sampled_from(GPU_IDS), nodes=st.sampled_from([1, 2, 16]), nbytes=SIZES, calls=st.integers(1, 2000))
def test_an_all_reduce_in_buckets_never_costs_less(gpu, nodes, nbytes, calls):
    # a gradient reduction in the framework's buckets (model/dp_comm.py _bucketed): calls x the time of one bucket
    topo = _topo(gpu, nodes)
    n = max(2, min(8 * nodes, 64))
    assert calls * all_reduce_s(nbytes / calls, n, 1, topo) >= all_reduce_s(nbytes, n, 1, topo) * (1 - 1e-12)


@SETTINGS
@given(gpu=st.sampled_from(GPU_IDS), nbytes=SIZES, n=st.integers(2, 8))
def test_nvls_never_slows_an_all_reduce(gpu, nbytes, n):
    topo = _topo(gpu, 1)
    assert all_reduce_s(nbytes, n, 1, topo) <= all_reduce_s(nbytes, n, 1, replace(topo, nvls=0.0)) * (1 + 1e-12)


@pytest.mark.parametrize("fabric", [f.id for f in fabrics() if f.kind == "scale_up"])
def test_every_ramp_is_a_share_and_never_falls(fabric):
    f = next(x for x in fabrics() if x.id == fabric)
    g = next(x for x in gpus() if x.scale_up == fabric) if any(x.scale_up == fabric for x in gpus()) else None
    if g is None:
        pytest.skip(f"no catalogue GPU on {fabric}")
    topo = _topo(g.id, 1)
    shares = [topo.share(2.0**k) for k in range(8, 36)]
    assert all(0 < s <= 1 for s in shares)
    assert shares == sorted(shares)
    assert (f.curve is None) == (shares[0] == 1.0)
