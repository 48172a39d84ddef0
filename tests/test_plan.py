"""``plan``: the search against brute force, against ``fit``, under deadline and budget, the
scaling curve and compute equilibrium, advice on the user's own layout, and the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from functools import cache

import pytest
from conftest import make
from test_cli import NO_PEAK

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario as plan
from gpuplan.catalog.hardware import get_gpu
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.model.memory import memory
from gpuplan.model.runtime import step_time
from gpuplan.search.fit import fit
from gpuplan.spec import divisors
from gpuplan.spec.scenario import complete_layout
from gpuplan.units import fmt_duration, fmt_usd

REL = 1e-9
TRAIN_8B = {"global_batch": 256, "seq_len": 4096, "tokens": 1e11}


def _tps(est: dict) -> float:
    return est["time"]["tokens_per_s"]


def _gpus(est: dict) -> int:
    return est["scenario"]["hardware"]["gpus"]


# ---- 2. brute force: the pruning never loses the optimum ----------------------------------------

@cache
def brute_force(model: str, gpu: str, max_gpus: int, global_batch: int, seq: int, tokens: float = 1e10) -> tuple:
    """Every layout of the search space docs/search.md describes, evaluated without any pruning:
    (tokens/s, usd, gpus, layout) of each one that fits."""
    base = make(model, gpu, None, training={"seq_len": seq, "global_batch": global_batch, "tokens": tokens})
    m, per_node = base.model, base.hardware.gpus_per_node
    out = []
    for n in range(1, max_gpus + 1):
        if n > per_node and n % per_node:
            continue
        sc = base.with_gpus(n)
        hw, tr = sc.hardware, sc.training
        for tp in divisors(per_node):
            if n % tp or m.n_heads % tp or (m.n_kv_heads % tp and tp % m.n_kv_heads):
                continue
            for pp in divisors(m.n_layers):
                if (n // tp) % pp:
                    continue
                dp = n // (tp * pp)
                if global_batch % dp:
                    continue
                schedules = [("1f1b", 1)] + ([("interleaved", 2)] if pp > 1 and m.n_layers % (2 * pp) == 0 else [])
                shardings = [(0, None)] + ([(z, None) for z in (1, 2, 3)] if dp > 1 else [])
                node_group = per_node // tp
                if dp > 1 and 1 < node_group < dp and dp % node_group == 0:
                    shardings.append((3, node_group))  # hybrid shard, as the search tries it
                for zero, group in shardings:
                    for rec in ("none", "selective-op", "full"):
                        for mb in (1, 2, 4, 8, 16):
                            if (global_batch // dp) % mb:
                                continue
                            for sched, v in schedules:
                                try:
                                    lay = complete_layout(sc, tp=tp, pp=pp, dp=dp, zero=zero, zero_group=group,
                                                          recompute=rec, micro_batch=mb, pp_schedule=sched,
                                                          virtual_stages=v)
                                except GpuplanError:
                                    continue
                                if not memory(m, hw, tr, lay).fits:
                                    continue
                                tps = global_batch * seq / step_time(m, hw, tr, lay).step_s
                                usd = n * tokens / tps / 3600 * hw.price_per_gpu_hour
                                out.append((tps, usd, n, lay))
    return tuple(out)


BRUTE_CASES = [
    pytest.param("llama-3.2-1b", "h100-sxm", 8, 32, 2048, id="llama-3.2-1b-h100"),
    pytest.param("gpt2", "h100-sxm", 8, 32, 2048, id="gpt2-h100"),
    pytest.param("llama-3.2-1b", "a100-40gb", 8, 32, 4096, id="llama-3.2-1b-a100-40gb"),
    pytest.param("llama-3.2-1b", "l4", 8, 32, 2048, id="llama-3.2-1b-l4"),
]


@pytest.mark.parametrize(("model", "gpu", "max_gpus", "gb", "seq"), BRUTE_CASES)
def test_plan_finds_the_fastest_layout_brute_force_finds(model, gpu, max_gpus, gb, seq):
    every = brute_force(model, gpu, max_gpus, gb, seq)
    assert len(every) > 100
    res = plan(make(model, gpu, None, training={"seq_len": seq, "global_batch": gb, "tokens": 1e10}),
               max_gpus=max_gpus).to_json()
    # the same GPU counts are reachable ...
    assert [r["gpus"] for r in res["scaling"]] == sorted({n for _, _, n, _ in every})
    # ... and at each count the search's best is at least as fast as every fitting layout
    for row in res["scaling"]:
        fastest_here = max(t for t, _, n, _ in every if n == row["gpus"])
        assert _tps(row["best"]) >= fastest_here * (1 - REL), row["gpus"]
    assert _tps(res["best"]) >= max(t for t, _, _, _ in every) * (1 - REL)


@pytest.mark.parametrize(("model", "gpu", "max_gpus", "gb", "seq"), [
    ("llama-3.2-1b", "h100-sxm", 8, 32, 2048), ("gpt2", "h100-sxm", 8, 32, 2048),
    ("llama-3.2-1b", "l4", 8, 32, 2048)])
def test_plan_finds_the_cheapest_layout_brute_force_finds(model, gpu, max_gpus, gb, seq):
    every = brute_force(model, gpu, max_gpus, gb, seq)
    res = plan(make(model, gpu, None, training={"seq_len": seq, "global_batch": gb, "tokens": 1e10}),
               max_gpus=max_gpus, objective="cost").to_json()
    cheapest = min(u for _, u, _, _ in every)
    assert res["best"]["cost"]["usd"] <= cheapest * (1 + REL)
    assert res["best"]["cost"]["usd"] == pytest.approx(cheapest, rel=1e-6)


def test_zero_1_beats_zero_0_so_the_search_skips_zero_0():
    """Why search.py never proposes ZeRO-0 with replicas: ZeRO-1 shards the optimizer step."""
    sc = make("llama-3.2-1b", "h100-sxm", 8, training={"seq_len": 2048, "global_batch": 32})
    z0 = evaluate(sc, dp=8, zero=0, micro_batch=4).to_json()
    z1 = evaluate(sc, dp=8, zero=1, micro_batch=4).to_json()
    assert z0["memory"]["fits"] and z1["memory"]["fits"]
    assert z1["time"]["optimizer_s"] == pytest.approx(z0["time"]["optimizer_s"] / 8, rel=1e-9)
    assert z1["time"]["step_s"] < z0["time"]["step_s"]


# ---- 3. fit and plan agree on the smallest GPU count ---------------------------------------------

# the sure counts (the peak's 80 % interval's upper end fits) under the generic stack's fp32 gradients
@pytest.mark.parametrize(("model", "expected"), [("llama-3.1-70b", 32), ("llama-3.1-8b", 4), ("mixtral-8x7b", 16)])
def test_fit_and_plan_agree_on_the_smallest_count(model, expected):
    sc = make(model, "h100-sxm", None)
    res = plan(sc, max_gpus=64).to_json()
    assert fit(sc, max_gpus=64).min_gpus == expected
    assert res["min_gpus"] == {"h100-sxm": expected}
    assert res["scaling"][0]["gpus"] == expected


# ---- 4. deadline, budget, nothing fits -----------------------------------------------------------

@cache
def _plan_8b(**kw) -> dict:
    return plan(make("llama-3.1-8b", "h100-sxm", None, training=TRAIN_8B), max_gpus=64, top_k=100, **kw).to_json()


def test_deadline_gives_the_cheapest_plan_that_finishes_in_time():
    every = _plan_8b()["candidates"]
    cheapest = min(every, key=lambda c: c["cost"]["usd"])
    # a deadline just short of the cheapest plan's time: only faster (dearer) per-count bests finish
    faster = [c["time"]["train_s"] for c in every if c["time"]["train_s"] < cheapest["time"]["train_s"]]
    assert faster, "the cheapest per-count best is the fastest: no deadline can cost anything"
    deadline = (max(faster) + cheapest["time"]["train_s"]) / 2
    res = _plan_8b(deadline_s=deadline)
    in_time = [c for c in every if c["time"]["train_s"] <= deadline]
    assert len(in_time) == len(faster)
    assert len(res["candidates"]) == len(faster)
    assert all(c["time"]["train_s"] <= deadline for c in res["candidates"])
    assert res["best"]["time"]["train_s"] <= deadline
    assert res["best"]["cost"]["usd"] == min(c["cost"]["usd"] for c in res["candidates"])
    assert res["best"]["cost"]["usd"] == min(c["cost"]["usd"] for c in in_time)
    assert res["best"]["cost"]["usd"] > min(c["cost"]["usd"] for c in every)  # the deadline costs something


def test_budget_gives_the_fastest_plan_within_it():
    every = _plan_8b()["candidates"]
    costs = sorted(c["cost"]["usd"] for c in every)
    budget = (costs[1] + costs[2]) / 2  # two of the per-count bests are within budget
    res = _plan_8b(budget=budget)
    within = [c for c in every if c["cost"]["usd"] <= budget]
    assert len(within) == 2 == len(res["candidates"])
    assert all(c["cost"]["usd"] <= budget for c in res["candidates"])
    assert _tps(res["best"]) == max(_tps(c) for c in within)
    assert _tps(res["best"]) < _tps(every[0])  # the budget costs speed


def test_a_deadline_and_a_budget_give_the_cheapest_run_in_time_within_the_budget():
    every = _plan_8b()["candidates"]
    cheapest = min(every, key=lambda c: c["cost"]["usd"])
    fastest = max(every, key=_tps)
    # a deadline the cheapest misses, a budget the fastest fits: both bind nothing the other does not
    deadline = (cheapest["time"]["train_s"] + fastest["time"]["train_s"]) / 2
    budget = fastest["cost"]["usd"] * 2
    alone, both = _plan_8b(deadline_s=deadline), _plan_8b(deadline_s=deadline, budget=budget)
    assert both["recommendation"]["rule"] == "pareto"
    # a budget the deadline's answer already meets changes nothing: not the fastest within the budget
    assert both["best"]["scenario"] == alone["best"]["scenario"]
    in_time = [c for c in every if c["time"]["train_s"] <= deadline]
    assert both["best"]["cost"]["usd"] == min(c["cost"]["usd"] for c in in_time) < fastest["cost"]["usd"]
    # a budget below the deadline's answer: that answer is the cheapest run in time, so nothing meets both
    assert _plan_8b(deadline_s=deadline, budget=alone["best"]["cost"]["usd"] * 0.999)["best"] is None


def test_impossible_deadline_names_the_fastest_option():
    fastest = _plan_8b()["best"]
    res = _plan_8b(deadline_s=1.0)
    assert res["best"] is None and res["candidates"] == []
    msg = " ".join(res["advice"])
    assert "no configuration finishes within" in msg
    assert f"{_gpus(fastest)}× h100-sxm" in msg
    assert f"takes {fmt_duration(fastest['time']['train_s'])}" in msg


def test_impossible_budget_names_the_cheapest_option():
    cheapest = min(_plan_8b()["candidates"], key=lambda c: c["cost"]["usd"])
    res = _plan_8b(budget=1.0)
    assert res["best"] is None and res["candidates"] == []
    msg = " ".join(res["advice"])
    assert "budget of $1.00" in msg
    assert f"{_gpus(cheapest)}× h100-sxm" in msg
    assert f"costs {fmt_usd(cheapest['cost']['usd'])}" in msg


@pytest.mark.parametrize(("model", "max_gpus"), [("llama-3.1-70b", 1), ("llama-3.1-405b", 4)])
def test_nothing_fits_names_the_closest_miss_and_a_fix(model, max_gpus):
    # (llama-3.1-70b on up to 4 L4s does fit: 2 GPUs with zero 3 + offload=params)
    res = plan(make(model, "l4", None), max_gpus=max_gpus).to_json()
    assert res["best"] is None and res["candidates"] == [] and res["scaling"] == []
    assert res["min_gpus"] == {"l4": None}
    assert res["equilibrium"]["gpus"] is None
    assert sum(res["rejected"].values()) >= 1
    assert res["advice"][0].startswith("nothing fits")
    got = re.search(r"needs ([\d.]+) GiB of ([\d.]+) GiB: .* ([\d.]+) GiB — try (.+)$", res["advice"][0])
    assert got, res["advice"][0]
    need, cap, part = (float(got.group(i)) for i in (1, 2, 3))
    assert cap == pytest.approx(get_gpu("l4").usable_memory_bytes / 2**30, abs=0.05)
    assert need > cap and 0 < part <= need
    assert got.group(4)


def test_a_gpu_type_with_no_compute_peak_is_said_skipped_not_out_of_memory(capsys):
    # a user's GPU with no published tensor peak: the plan searches nothing and its headline says why, where
    # "no layout fits" would send the user away from a GPU that `gpuplan fit` shows holds the model on 16
    assert main(["plan", "--catalog", NO_PEAK, "--model", "llama-3.1-8b", "--gpu", "lab-24gb", "--tokens", "1T"]) == 0
    out = capsys.readouterr().out
    assert "nothing was searched: lab-24gb: no published compute peak" in out and "no layout fits" not in out
    assert "smallest GPU count that fits — lab-24gb: not searched" in out  # not "none": it was never sized


# ---- 5. scaling curve and compute equilibrium ----------------------------------------------------

@cache
def _eq_8b(scale_out: str, threshold: float = 0.8) -> dict:
    sc = make("llama-3.1-8b", "h100-sxm", None, hardware={"scale_out": scale_out}, training=TRAIN_8B)
    return plan(sc, max_gpus=64, threshold=threshold).to_json()


def test_scaling_curve_arithmetic():
    res = _eq_8b("ib-ndr-400g")
    rows = res["scaling"]
    assert [r["gpus"] for r in rows] == [4, 8, 16, 32, 64]
    assert rows[0]["speedup"] == 1.0 and rows[0]["efficiency"] == 1.0
    n0, t0 = rows[0]["gpus"], _tps(rows[0]["best"])
    for r in rows:
        assert _gpus(r["best"]) == r["gpus"]
        assert r["speedup"] == pytest.approx(_tps(r["best"]) / t0, rel=1e-12)
        assert r["efficiency"] == pytest.approx(r["speedup"] * n0 / r["gpus"], rel=1e-12)
    assert res["equilibrium"]["gpus"] in [r["gpus"] for r in rows]


@pytest.mark.parametrize("net", ["ib-ndr-400g", "eth-10g"])
def test_a_stricter_threshold_never_moves_the_equilibrium_up(net):
    eqs = [_eq_8b(net, t)["equilibrium"]["gpus"] for t in (0.5, 0.8, 1.0)]
    assert eqs[0] >= eqs[1] >= eqs[2]


def test_slow_network_equilibrium_is_a_node_or_two_fast_network_goes_further():
    # observed: eth-10g 32 / 16 / 8 at thresholds 0.5 / 0.8 / 1.0; ib-ndr-400g 64 / 64 / 32
    slow, fast = _eq_8b("eth-10g"), _eq_8b("ib-ndr-400g")
    assert slow["equilibrium"]["gpus"] <= 16
    assert fast["equilibrium"]["gpus"] > slow["equilibrium"]["gpus"]
    assert fast["equilibrium"]["gpus"] == 64
    at64 = {r["gpus"]: r["efficiency"] for r in slow["scaling"]}[64]
    assert at64 < 0.8 < {r["gpus"]: r["efficiency"] for r in fast["scaling"]}[64]


def test_a_ten_times_slower_network_slows_multi_node_plans():
    sc = make("llama-3.1-8b", "h100-sxm", None, hardware={"scale_out": "eth-100g"}, training=TRAIN_8B)
    eth100 = plan(sc, max_gpus=32).to_json()
    eth10 = _eq_8b("eth-10g")
    for n in (16, 32):
        a = {r["gpus"]: _tps(r["best"]) for r in eth10["scaling"]}[n]
        b = {r["gpus"]: _tps(r["best"]) for r in eth100["scaling"]}[n]
        assert a < b, n


def test_a_count_slower_than_a_smaller_one_does_not_end_the_scaling_curve():
    res = plan(make("gpt2", "h100-sxm", None, training={"seq_len": 2048, "tokens": 1e10}), max_gpus=64).to_json()
    improving = [_tps(r["best"]) for r in res["scaling"] if r["improves"]]
    assert all(b > a for a, b in zip(improving, improving[1:], strict=False))
    assert any(not r["improves"] for r in res["scaling"])  # e.g. 3 GPUs (pp=3) is slower than 2
    assert res["equilibrium"]["gpus"] >= 8


# ---- 6. advice on the user's own layout ----------------------------------------------------------

@pytest.mark.parametrize("net", ["roce-100g", "eth-100g"])
def test_fixed_tp8_on_two_nodes_is_told_of_a_faster_layout(net):
    sc = make("llama-3.1-8b", "h100-sxm", 16, hardware={"scale_out": net}, training=TRAIN_8B, layout={"tp": 8})
    res = plan(sc, max_gpus=16).to_json()
    assert all(c["scenario"]["layout"]["tp"] == 8 for c in res["candidates"])  # the fixed field is kept
    lines = [a for a in res["advice"] if "faster" in a or "within" in a]
    assert len(lines) == 1, res["advice"]
    got = re.search(r"is ([\d.]+)× faster than your layout on the same 16 GPUs", lines[0])
    assert got, lines[0]
    free = plan(replace(sc, layout={}), max_gpus=16).to_json()
    best16 = {r["gpus"]: _tps(r["best"]) for r in free["scaling"]}[16]
    ratio = best16 / _tps(evaluate(sc).to_json())
    assert ratio >= 1.15
    assert float(got.group(1)) == pytest.approx(ratio, abs=0.051)


def test_user_layout_that_is_the_best_is_within_reach():
    free = plan(make("llama-3.1-8b", "h100-sxm", 16, training=TRAIN_8B), max_gpus=16).to_json()
    lay = {r["gpus"]: r["best"] for r in free["scaling"]}[16]["scenario"]["layout"]
    mine = {k: lay[k] for k in ("tp", "pp", "zero", "micro_batch", "recompute")}
    res = plan(make("llama-3.1-8b", "h100-sxm", 16, training=TRAIN_8B, layout=mine), max_gpus=16).to_json()
    assert any(a.startswith("your layout is within 0%") for a in res["advice"]), res["advice"]
    assert not any("faster" in a for a in res["advice"])


# ---- 7. the command line ---------------------------------------------------------------------

PLAN_ARGS = ["plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--max-gpus", "16", "--tokens", "1e10"]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_plan_json_has_the_contract_keys(capsys):
    rc, out, err = _cli(capsys, *PLAN_ARGS, "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert set(res) >= {"best", "candidates", "searched", "rejected", "min_gpus", "scaling", "equilibrium"}
    assert res["min_gpus"] == {"h100-sxm": 1}
    assert res["searched"] > 0
    assert [r["gpus"] for r in res["scaling"]] == [1, 2, 4, 8, 16]
    for r in res["scaling"]:
        assert set(r) >= {"gpus", "best", "speedup", "efficiency"}
    assert res["equilibrium"]["gpus"] in [r["gpus"] for r in res["scaling"]]
    assert res["best"]["time"]["train_s"] == pytest.approx(1e10 / res["best"]["time"]["tokens_per_s"])
    assert 1 <= len(res["candidates"]) <= 5


def test_cli_plan_human_output_and_explain(capsys):
    rc, out, _ = _cli(capsys, *PLAN_ARGS)
    assert rc == 0
    assert "compute equilibrium" in out
    assert "rejected layouts by reason" not in out
    rc, out, _ = _cli(capsys, *PLAN_ARGS, "--explain")
    assert rc == 0
    assert "rejected layouts by reason" in out
    assert re.search(r"^\s+[\d,]+\s+out of memory$", out, re.M)


def test_cli_plan_two_gpu_types(capsys):
    rc, out, err = _cli(capsys, "plan", "--model", "llama-3.2-1b", "--gpu", "h100-sxm,mi300x", "--max-gpus", "16",
                        "--tokens", "1e10", "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert set(res["min_gpus"]) == {"h100-sxm", "mi300x"}
    assert all(isinstance(n, int) and n >= 1 for n in res["min_gpus"].values())
    assert {c["scenario"]["hardware"]["gpu"] for c in res["candidates"]} <= {"h100-sxm", "mi300x"}


def test_cli_plan_bad_deadline_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "gpuplan.cli", *PLAN_ARGS, "--deadline", "3x"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--deadline" in lines[0] and "3x" in lines[0]


def test_a_deadline_and_a_budget_each_met_alone_name_what_each_costs_the_other():
    every = _plan_8b()["candidates"]
    cheapest = min(every, key=lambda c: c["cost"]["usd"])
    fastest = max(every, key=_tps)
    assert fastest["cost"]["usd"] > cheapest["cost"]["usd"]  # speed costs money here
    # a deadline only the fastest meets, a budget only the cheapest meets: each alone is met, never both
    deadline, budget = fastest["time"]["train_s"], cheapest["cost"]["usd"]
    res = _plan_8b(deadline_s=deadline, budget=budget)
    assert res["best"] is None
    msg = " ".join(res["advice"])
    assert "no configuration finishes within" not in msg and "no configuration fits a budget" not in msg
    assert "each target is met alone, not both" in msg
    on_time = min((c for c in every if c["time"]["train_s"] <= deadline), key=lambda c: c["cost"]["usd"])
    assert f"the cheapest, {_gpus(on_time)}× h100-sxm, costs {fmt_usd(on_time['cost']['usd'])}" in msg
    assert f"the fastest, {_gpus(cheapest)}× h100-sxm, takes {fmt_duration(cheapest['time']['train_s'])}" in msg
