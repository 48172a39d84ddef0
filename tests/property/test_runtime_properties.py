"""Invariants of the runtime and cost model (hypothesis)."""

import pytest
from conftest import make
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError

MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "gpt2", "gemma-2-9b", "falcon-7b", "llama-3.2-1b"]
NETWORKS = ["ib-ndr-400g", "roce-400g", "eth-100g", "eth-10g"]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
TIME_PARTS = ("step_s", "compute_s", "comm_exposed_s", "bubble_s", "optimizer_s", "recompute_s")


def _time(model, gpus, gpu="h100-sxm", hardware=None, training=None, **layout):
    try:
        sc = make(model, gpu=gpu, gpus=gpus, hardware=hardware or {}, training=training or {}, layout=layout)
        return evaluate(sc).to_json()
    except GpuplanError:
        reject()  # tp does not divide the heads, batch not a multiple of dp × micro-batch, ...


@SETTINGS
@given(model=st.sampled_from(MODELS), gpus=st.sampled_from([1, 8, 16, 64]), zero=st.sampled_from([0, 1, 3]),
       billions=st.integers(1, 20_000), seq=st.sampled_from([1024, 4096]))
def test_time_to_train_is_linear_in_tokens(model, gpus, zero, billions, seq):
    tr = {"seq_len": seq, "global_batch": 256, "tokens": billions * 1e9}
    one = _time(model, gpus, training=tr, zero=zero)["time"]
    two = _time(model, gpus, training={**tr, "tokens": 2 * billions * 1e9}, zero=zero)["time"]
    assert one["train_s"] > 0
    assert two["train_s"] == 2 * one["train_s"]
    assert two["gpu_hours"] == pytest.approx(2 * one["gpu_hours"], rel=1e-12)
    assert two["step_s"] == one["step_s"]
    assert two["steps"] == pytest.approx(2 * one["steps"], rel=1e-12)


@SETTINGS
@given(model=st.sampled_from(MODELS), gpus=st.sampled_from([1, 8, 32]),
       cents=st.integers(1, 5000), network=st.sampled_from(NETWORKS))
def test_cost_is_gpu_hours_times_price(model, gpus, cents, network):
    price = cents / 100
    res = _time(model, gpus, hardware={"price_per_gpu_hour": price, "scale_out": network},
                training={"tokens": 1e11, "global_batch": 64}, zero=1)
    t, c = res["time"], res["cost"]
    assert c["usd_per_gpu_hour"] == pytest.approx(price, rel=1e-12)
    assert t["gpu_hours"] == pytest.approx(gpus * t["train_s"] / 3600, rel=1e-12)
    assert c["usd"] == pytest.approx(t["gpu_hours"] * price, rel=1e-12)
    assert c["usd_with_failures"] >= c["usd"]


@SETTINGS
@given(model=st.sampled_from(MODELS), mb=st.sampled_from([1, 2]), k=st.integers(1, 4),
       seq=st.sampled_from([1024, 4096]), network=st.sampled_from(NETWORKS))
def test_compute_per_step_never_grows_with_more_data_parallel_gpus(model, mb, k, seq, network):
    # fixed global batch, ZeRO-3, same micro-batch: each of 2× the ranks runs half the micro-batches
    tr = {"seq_len": seq, "global_batch": 64 * mb * k}
    compute = [_time(model, g, hardware={"scale_out": network}, training=tr, zero=3, micro_batch=mb)
               ["time"]["compute_s"] for g in (8, 16, 32, 64)]
    assert all(c > 0 for c in compute)
    assert compute == sorted(compute, reverse=True)
    assert compute[-1] < compute[0]


LAYOUTS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]), "zero": st.sampled_from([0, 1, 2, 3]),
    "recompute": st.sampled_from(["none", "selective", "selective-op", "full"]),
    "micro_batch": st.sampled_from([1, 2, 4]),
})


@SETTINGS
@given(model=st.sampled_from(MODELS), gpus=st.sampled_from([1, 8, 16, 32]), lay=LAYOUTS,
       gpu=st.sampled_from(["h100-sxm", "a100-80gb-sxm", "b200", "mi300x", "h100-nvl"]),
       precision=st.sampled_from(["bf16", "fp8", "bf16-pure"]), accumulation=st.integers(1, 8),
       network=st.sampled_from(NETWORKS), seq=st.sampled_from([512, 2048, 8192]))
def test_step_time_parts_and_utilisation(model, gpus, lay, gpu, precision, accumulation, network, seq):
    if gpus % (lay["tp"] * lay["pp"]):
        reject()
    dp = gpus // (lay["tp"] * lay["pp"])
    tr = {"seq_len": seq, "precision": precision, "global_batch": dp * lay["micro_batch"] * accumulation,
          "tokens": 1e12}
    t = _time(model, gpus, gpu=gpu, hardware={"scale_out": network}, training=tr, **lay)["time"]
    for part in TIME_PARTS:
        assert t[part] >= 0, part
    assert all(v >= 0 for v in t["comm_detail"].values())
    assert t["step_s"] >= t["compute_s"] > 0
    assert t["step_s"] == pytest.approx(t["compute_s"] + t["comm_exposed_s"] + t["bubble_s"] + t["optimizer_s"],
                                        rel=1e-12)
    assert 0 < t["mfu"] < 1
    assert t["hfu"] >= t["mfu"]
    if lay["recompute"] == "none":
        assert t["hfu"] == t["mfu"]
    assert t["hfu"] < 1
    if lay["pp"] == 1:
        assert t["bubble_s"] == 0
    else:
        assert t["bubble_s"] > 0


@SETTINGS
@given(model=st.sampled_from(MODELS), pp=st.sampled_from([2, 4]), tp=st.sampled_from([1, 2]),
       m=st.sampled_from([4, 8, 16, 32]), schedule=st.sampled_from(["1f1b", "gpipe"]))
def test_pipeline_bubble_is_p_minus_1_over_m(model, pp, tp, m, schedule):
    # source: Narayanan et al. 2021 (arXiv:2104.04473) Sec. 2.2.1 — bubble time fraction (p − 1)/m of
    # the ideal time m·(t_f + t_b); with dp = 1 there is no data-parallel traffic to hide.
    gpus = pp * tp
    # recompute given: GPipe holds every micro-batch, and an open recompute would follow the memory (recompute_open.py)
    lay = {"pp": pp, "tp": tp, "pp_schedule": schedule, "recompute": "none"}
    t = _time(model, gpus, training={"global_batch": m}, **lay)["time"]
    assert t["microbatches"] == m
    # the stage-to-stage send/recv is counted once as exposed communication, not again in the bubble
    busy = t["compute_s"] + t["comm_exposed_s"] - t["comm_detail"]["pp"]
    assert t["bubble_s"] == pytest.approx((pp - 1) / m * busy, rel=1e-12)
    # more micro-batches: the same absolute bubble, a smaller share of the step
    t2 = _time(model, gpus, training={"global_batch": 2 * m}, **lay)["time"]
    assert t2["bubble_s"] == pytest.approx(t["bubble_s"], rel=1e-12)
    assert t2["bubble_s"] / t2["step_s"] < t["bubble_s"] / t["step_s"]


@SETTINGS
@given(model=st.sampled_from(["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "llama-3.2-1b", "gpt2"]),
       pp=st.sampled_from([2, 4]), v=st.sampled_from([2, 3]), dp=st.sampled_from([1, 2]),
       m=st.sampled_from([8, 16]))
def test_interleaved_bubble_is_1f1b_bubble_over_virtual_stages(model, pp, v, dp, m):
    # source: Narayanan et al. 2021 (arXiv:2104.04473) Sec. 2.2.2 — interleaving v model chunks per
    # device divides the bubble by v. Models whose layers split evenly into pp·v chunks (same work per rank).
    layers = make(model).model.n_layers
    if layers % (pp * v):
        reject()
    tr = {"global_batch": dp * m}
    # the same recompute for both: an open one is chosen by memory, and interleaving holds more micro-batches
    base = _time(model, pp * dp, training=tr, pp=pp, recompute="none")["time"]
    inter = _time(model, pp * dp, training=tr, pp=pp, pp_schedule="interleaved", virtual_stages=v,
                  recompute="none")["time"]
    assert base["bubble_s"] > 0
    assert inter["bubble_s"] == pytest.approx(base["bubble_s"] / v, rel=1e-12)
    assert inter["step_s"] < base["step_s"]


@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_pipeline_communication_grows_with_virtual_stages(v):
    # source: Narayanan et al. 2021 (arXiv:2104.04473) Sec. 2.2.2 — the interleaved schedule's smaller
    # bubble "comes at a cost: ... the amount of communication also increases by v".
    tr = {"global_batch": 16}
    base = _time("llama-3.1-8b", 8, training=tr, pp=4)["time"]
    inter = _time("llama-3.1-8b", 8, training=tr, pp=4, pp_schedule="interleaved", virtual_stages=v)["time"]
    assert base["comm_detail"]["pp"] > 0
    assert inter["comm_detail"]["pp"] == pytest.approx(v * base["comm_detail"]["pp"], rel=1e-9)


@SETTINGS
@given(model=st.sampled_from(MODELS), nodes=st.sampled_from([2, 4, 16, 64]), style=st.sampled_from(
       ["layer", "module", "tensor-sync"]), network=st.sampled_from(NETWORKS))
def test_zero3_gathers_cost_more_on_a_larger_group_at_the_same_per_gpu_batch(model, nodes, style, network):
    # ZeRO-3 moves ~the whole model per micro-batch whatever the group size, and each ring call has
    # one step per rank: doubling the nodes at the same work per GPU never makes the gathers cheaper
    def dp_total(n):
        est = _time(model, 8 * n, hardware={"scale_out": network},
                    training={"seq_len": 2048, "global_batch": 8 * n * 2},
                    zero=3, micro_batch=1, zero3_gather=style)
        return est["time"]["comm_detail"]["dp_total"]
    assert dp_total(2 * nodes) >= dp_total(nodes)


@SETTINGS
@given(nodes=st.sampled_from([1, 2, 16, 192]), calls=st.integers(1, 5000), gb=st.floats(1e-3, 1e3))
def test_more_calls_for_the_same_bytes_never_cost_less(nodes, calls, gb):
    from gpuplan.model.comm import all_gather_s, ring_latency_s, topology

    topo = topology(make(gpu="a100-80gb-sxm", gpus=8 * nodes, hardware={"scale_out": "ib-hdr-200g"}).hardware)
    n = 8 * nodes
    one, many = all_gather_s(gb * 1e9, n, 1, topo), all_gather_s(gb * 1e9, n, 1, topo, calls)
    # the ring latency once more per call, and smaller calls reach no larger a share of the bandwidth
    # (comm.py: the measured ramp is non-decreasing in the message size)
    assert many >= (one + (calls - 1) * ring_latency_s(n, 1, topo)) * (1 - 1e-12)
    assert topo.share(gb * 1e9 / calls) <= topo.share(gb * 1e9)
