"""The pruned search against an exhaustive one (hypothesis, generated scenarios): every layout of the space
(search/space.py) classified and timed by the model's own public functions, one by one, without any bound,
dominance or ordering — and the answers compared: the best layout of every GPU type and count, the counts
of searched and rejected layouts by reason, the closest miss, the compute equilibrium, the Pareto set, and
``evaluate`` of every returned candidate."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from conftest import make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.api import plan_scenario
from gpuplan.catalog.framework_comm import dp_overlap_of, zero3_gather_of
from gpuplan.catalog.frameworks import first_refusal, get_framework
from gpuplan.io.options import targets
from gpuplan.model.allocator import fragile
from gpuplan.model.estimate import assess
from gpuplan.model.graphs import cuda_graph_allowance
from gpuplan.model.memory import verdict, worst_stage
from gpuplan.search import space
from gpuplan.search.codes import OUT_OF_HOST_MEMORY, OUT_OF_MEMORY, ZERO_GROUP, Reason, Rejection
from gpuplan.search.enumerate import Candidate, Search, default_global_batch, search_types
from gpuplan.search.plan import candidate_estimate
from gpuplan.search.rank import pareto, scaling_curve
from gpuplan.spec import Layout
from gpuplan.spec.defaults import gpu_limit
from gpuplan.spec.layout import recompute_fields
from gpuplan.spec.options import PlanOptions


def _layout(sc, split, sched, v, rec, shard, mb, off):
    fixed = sc.layout
    sp = fixed.get("sequence_parallel", True) and split.tp > 1
    fields = dict(dp=split.dp, tp=split.tp, pp=split.pp, cp=split.cp, ep=split.ep, zero=shard[0],
                  zero_group=shard[1], micro_batch=mb, sequence_parallel=sp, pp_schedule=sched, **recompute_fields(rec),
                  virtual_stages=v, offload=off, tp_overlap=bool(fixed.get("tp_overlap")) and sp, ep_overlap=False,
                  dp_overlap=fixed.get("dp_overlap", dp_overlap_of(sc.training.framework, shard[0], split.pp)[1]),
                  zero3_gather=fixed.get("zero3_gather", zero3_gather_of(sc.training.framework)),
                  recompute_every=fixed.get("recompute_every", 1))
    if split.ep > 1:
        if "ep_overlap" in fixed:
            fields["ep_overlap"] = fixed["ep_overlap"]
        else:
            prof = get_framework(sc.training.framework)
            offered = prof.name == "generic" or prof.moe["a2a_overlap"].value in (True, "opt-in")
            fields["ep_overlap"] = offered and first_refusal(prof.name, {**fields, "ep_overlap": True},
                                                             sc.training) is None
    return Layout.unchecked(**fields)


def _tp_variants(sc, lay):
    """The layout, and with tensor-parallel communication overlap where the scenario leaves it open and the framework
    offers it (frameworks.json tp_comm_overlap.supported) without refusing it here: the planner keeps the faster."""
    prof = get_framework(sc.training.framework)
    if "tp_overlap" in sc.layout or prof.tp_comm_overlap["supported"].value is not True or lay.tp < 2 \
            or not lay.sequence_parallel:
        return (lay,)
    fields = {**lay.values(), "tp_overlap": True}
    return (lay,) if first_refusal(prof.name, fields, sc.training) is not None else (lay, Layout.unchecked(**fields))


class Exhaustive:
    """Every layout, one by one, in canonical order."""

    def __init__(self, sc, gb):
        self.sc, self.tr = sc, replace(sc.training, global_batch=gb)
        self.searched, self.rejected, self.best, self.misses = 0, Counter(), {}, []
        self.gb = gb

    def classify(self, hw, lay):
        """'fits', or the rejection; a miss is kept with its over-capacity bytes."""
        rule = first_refusal(self.tr.framework, lay.values(), self.tr)
        if rule is not None:
            return Rejection(Reason.FRAMEWORK, framework=self.tr.framework, rule=rule.rule, detail=rule.why)
        peak = worst_stage(self.sc.model, self.tr, lay, self.sc.corrections)
        v = verdict(peak.total, peak.states.cpu_offload, hw, self.tr, self.sc.corrections, lay.tp > 1 or lay.pp > 1,
                    cuda_graph_allowance(self.sc.model, self.tr, lay.pp),
                    irregular=fragile(self.tr, lay.recompute, lay.offload))
        if not v.host_ok:
            return OUT_OF_HOST_MEMORY
        if not v.fits:
            self.misses.append((v.upper - v.usable, lay, hw))
            return OUT_OF_MEMORY
        return "fits"

    def run(self, hw0, max_gpus, offload):
        sc = self.sc
        for split in space.splits(sc, hw0, lambda n: True, max_gpus, self.gb):
            shards = space.shardings(sc, split, hw0.gpus_per_node)
            if not shards:
                self.rejected[ZERO_GROUP] += 1
                continue
            hw = replace(hw0, gpus=split.world)
            for off in offload:
                if self.split(hw, split, shards, off):
                    break

    def split(self, hw, split, shards, off):
        found = False
        for sched, v in space.schedules(self.sc, split.pp):
            for rec in space.recomputes(self.sc):
                for shard in shards:
                    if off == "params" and shard[0] != 3:
                        continue
                    for mb in space.micro_batches(self.sc, split, sched, self.gb):
                        self.searched += 1
                        lay = _layout(self.sc, split, sched, v, rec, shard, mb, off)
                        why = self.classify(hw, lay)
                        if why != "fits":
                            self.rejected[why] += 1
                            continue
                        found = True
                        key = (hw.gpu.id, hw.gpus)
                        for var in _tp_variants(self.sc, lay):  # the faster variant, a tie to the first
                            a = assess(self.sc.model, hw, self.tr, var, self.sc.corrections, fits=True)
                            if key not in self.best or a.time.tokens_per_s > self.best[key][0]:
                                self.best[key] = (a.time.tokens_per_s, var,
                                                  Candidate(hw.gpu.id, hw.gpus, var, a.time, a.cost, hw))
        return found


def _exhaustive(sc, hws, max_gpus):
    ex = Exhaustive(sc, default_global_batch(sc))
    for hw in hws:
        for i, offload in enumerate(space.offload_passes(sc)):
            if i and any(g == hw.gpu.id for g, _ in ex.best):
                break
            ex.run(hw, max_gpus, offload)
    return ex


MODELS = ["qwen2.5-0.5b", "llama-3.2-1b", "gpt2", "qwen1.5-moe-a2.7b", "llama-3.1-8b"]
GPUS = ["h100-sxm", "a100-40gb", "rtx-4090", "l4"]
FRAMEWORKS = ["generic", "megatron-lm", "megatron-core", "torchtitan", "deepspeed", "pytorch-fsdp", "torchtune",
              "nanotron"]
LAYOUTS = [{}, {"tp": 2}, {"zero": 3}, {"recompute": "full"}, {"micro_batch": 2}, {"pp": 2},
           {"offload": "optimizer", "zero": 2}, {"zero_group": 2}, {"pp_schedule": "interleaved"}]

scenario = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS), "gpus": st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True),
    "max_gpus": st.sampled_from([1, 4, 8, 16, 32]), "framework": st.sampled_from(FRAMEWORKS),
    "seq": st.sampled_from([256, 2048, 8192]), "batch": st.sampled_from([1, 6, 16, 64]),
    "method": st.sampled_from(["full", "full", "lora"]), "precision": st.sampled_from(["bf16", "bf16", "fp8"]),
    "layout": st.sampled_from(LAYOUTS), "host": st.sampled_from([None, None, 64e9]),
    "headroom": st.sampled_from([0.0, 0.05, 0.3]), "graphs": st.sampled_from(["none", "none", "layer", "full"])})


def _scenario(c):
    training = {"seq_len": c["seq"], "global_batch": c["batch"], "tokens": 1e9, "framework": c["framework"],
                "method": c["method"], "headroom": c["headroom"], "cuda_graphs": c["graphs"],
                "precision": c["precision"] if c["gpus"][0] == "h100-sxm" else "bf16"}
    hardware = {"host_memory": c["host"]} if c["host"] else {}
    return make(c["model"], c["gpus"][0], None, training=training, hardware=hardware, layout=c["layout"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=scenario)
def test_the_pruned_search_answers_as_the_exhaustive_one(c):
    try:
        sc = _scenario(c)
    except Exception:  # a combination the scenario rules refuse (e.g. a fixed tp the model cannot split)
        return
    opts = PlanOptions(max_gpus=c["max_gpus"], gpu_types=tuple(c["gpus"]) if len(c["gpus"]) > 1 else ())
    hws = [hw for hw in targets(sc, opts) if "bf16" in hw.gpu.peak_flops]
    if sc.training.precision == "fp8":
        hws = [hw for hw in hws if "fp8" in hw.gpu.peak_flops]
    if not hws:
        return
    limit, _ = gpu_limit(sc, c["max_gpus"])
    ex = _exhaustive(sc, hws, limit)
    pruned = Search(sc)
    groups: dict = {}
    for hw in hws:
        groups.setdefault((hw.gpus_per_node, space.tp_domain(hw)), []).append(hw)
    for group in groups.values():
        search_types(pruned, tuple(group), limit)
    # the answer: the best layout per GPU type and count, and its throughput
    assert {k: c.layout for k, c in pruned.best.items()} == {k: lay for k, (_, lay, _) in ex.best.items()}
    assert {k: c.tokens_per_s for k, c in pruned.best.items()} == {k: t for k, (t, _, _) in ex.best.items()}
    # the counts
    assert pruned.searched == ex.searched
    assert dict(pruned.rejected) == dict(ex.rejected)
    # the closest miss, when nothing fits
    miss = pruned.closest()
    if ex.best or not ex.misses:
        assert miss is None
    else:
        over, lay, hw = min(ex.misses, key=lambda m: m[0])  # the first of equals: min keeps the first
        assert (miss.over_bytes, miss.layout, miss.hw.gpu.id) == (over, lay, hw.gpu.id)
    # the compute equilibrium and the Pareto set, from the exhaustive candidates
    exhaustive = {k: cand for k, (_, _, cand) in ex.best.items()}
    for hw in hws:
        assert scaling_curve(pruned.best, hw.gpu.id, 0.8)[1] == scaling_curve(exhaustive, hw.gpu.id, 0.8)[1]
    assert [(c.gpu, c.gpus, c.layout) for c in pareto(list(pruned.best.values()))] == \
        [(c.gpu, c.gpus, c.layout) for c in pareto(list(exhaustive.values()))]
    # evaluate of every candidate equals it (the same functions, by construction)
    for cand in pruned.best.values():
        est = candidate_estimate(sc, cand, pruned.gb)
        assert est.time.step_s == cand.step_s and est.cost.usd == cand.usd and est.memory.fits


def test_a_plan_reports_the_exhaustive_counts():
    # a whole plan: searched and rejected as the exhaustive classification counts them
    sc = make("llama-3.2-1b", "h100-sxm", None, training={"seq_len": 2048, "global_batch": 32, "tokens": 1e9,
                                                          "framework": "deepspeed"})
    res = plan_scenario(sc, max_gpus=16).result
    ex = _exhaustive(sc, [sc.hardware], 16)
    assert res.searched == ex.searched and res.rejected == dict(ex.rejected)
    assert {(c.gpu, c.gpus): c.layout for c in res.candidates} == {k: lay for k, (_, lay, _) in ex.best.items()}


def test_offload_under_a_host_memory_limit_counts_as_the_exhaustive_search():
    # nothing fits an RTX 4090 without offloading; the offloaded state then meets the node's host memory
    sc = make("llama-3.1-8b", "rtx-4090", None, hardware={"host_memory": 64e9},
              training={"seq_len": 1024, "global_batch": 8, "tokens": 1e8})
    pruned = Search(sc)
    search_types(pruned, (sc.hardware,), 2)
    ex = _exhaustive(sc, [sc.hardware], 2)
    assert any(r.reason is Reason.OUT_OF_HOST_MEMORY for r in ex.rejected)
    assert (pruned.searched, dict(pruned.rejected)) == (ex.searched, dict(ex.rejected))
    assert {k: c.layout for k, c in pruned.best.items()} == {k: lay for k, (_, lay, _) in ex.best.items()}
