"""``plan``: search GPU type × count × layout, keep what fits, rank by time or cost.

Enumeration (Calculon-style divisor products, filtered by named rules):
  tp   divides the node and the attention heads (KV heads divide tp or tp divides them)
  pp   divides the layers (uneven splits only when the user fixes pp)
  cp   1, or divisors of 16 that divide seq_len when the sequence is ≥ 32k tokens
  dp   divides global_batch / micro_batch; past one node the count is a whole number of nodes
  ep   (MoE) divides the experts and dp×cp
  zero 1, 2, hybrid shard (FSDP inside the node, replicas across nodes), 3 — ZeRO-0 only without
       replicas, since ZeRO-1 moves the same bytes and shards the optimizer step (see _shardings)
  micro-batch 1, 2, 4, 8, 16 dividing the per-replica batch; schedule 1f1b / interleaved ×2 when
  pp > 1 (zero-bubble when the scenario asks for it); recompute none → selective-op → full;
  offload only when nothing fits.
Fields the scenario fixes are kept. For one parallel split (tp, pp, cp, dp, ep, mb, schedule),
recompute levels are tried cheapest first and, within a level, ZeRO stages from least to most
sharded: the first that fits at a level is the fastest at that level (more sharding and more
recompute only add time), so at most three runtimes are computed per split.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog.hardware import get_fabric
from gpuplan.model.memory import memory, peak_stages, stage_peak
from gpuplan.model.runtime import step_time
from gpuplan.spec import GPU, Hardware, Layout
from gpuplan.spec.layout import divisors, ep_choices, tp_splits_heads
from gpuplan.spec.scenario import Scenario

GiB = 2**30
MICRO_BATCHES = (1, 2, 4, 8, 16)
DEFAULT_BATCH_TOKENS = 4 * 2**20  # Llama 2 and 3 pre-trained with ~4M-token batches (Touvron et al. 2023)


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu: str
    gpus: int
    layout: Layout
    step_s: float
    tokens_per_s: float
    train_s: float | None
    usd: float | None
    memory_gib: float
    hw: Hardware


def _hardware_for(sc: Scenario, g: GPU) -> Hardware:
    hw = sc.hardware
    if g.id == hw.gpu.id:
        return hw
    # another GPU type: its own node, fabric and price; a calibration fitted on the scenario's GPU
    # does not carry over
    return replace(hw, gpu=g, gpus_per_node=g.gpus_per_node, scale_up=get_fabric(g.scale_up, "scale_up"),
                   price_per_gpu_hour=g.price_usd_per_gpu_hour if sc.hardware.price_per_gpu_hour is None
                   or hw.price_per_gpu_hour == hw.gpu.price_usd_per_gpu_hour else hw.price_per_gpu_hour,
                   memory_factor=1.0, compute_factor=1.0)


def _splits(sc: Scenario, hw: Hardware, max_gpus: int, global_batch: int) -> Iterator[dict]:
    """Parallel splits (tp, pp, cp, dp, ep) for one GPU type; micro-batch and schedule come later."""
    m, fixed, per_node = sc.model, sc.layout, hw.gpus_per_node
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in divisors(per_node) if tp_splits_heads(m, t)]
    pps = [fixed["pp"]] if "pp" in fixed else [p for p in divisors(m.n_layers) if p <= 64]
    seq = sc.training.seq_len
    cps = [fixed["cp"]] if "cp" in fixed else ([c for c in (1, 2, 4, 8, 16) if seq % c == 0] if seq >= 32768 else [1])
    for tp in tps:
        for pp in pps:
            for cp in cps:
                for dp in ([fixed["dp"]] if "dp" in fixed else divisors(global_batch)):
                    n = dp * tp * pp * cp
                    if n > max_gpus or (n > per_node and n % per_node) or seq % cp:
                        continue
                    eps = [fixed["ep"]] if "ep" in fixed else ep_choices(m, dp * cp)
                    for ep in eps:
                        yield {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep}


def _schedules(sc: Scenario, pp: int) -> list[tuple[str, int]]:
    fixed = sc.layout
    v = fixed.get("virtual_stages", 1)
    if v > 1:  # virtual stages mean the interleaved schedule, and a pipeline to interleave
        return [("interleaved", v)] if pp > 1 and sc.model.n_layers % (pp * v) == 0 else []
    if "pp_schedule" in fixed or pp == 1:
        return [(fixed.get("pp_schedule", "1f1b"), 1)]
    out = [("1f1b", 1)]
    if sc.model.n_layers % (pp * 2) == 0:
        out.append(("interleaved", 2))
    return out


def _shardings(sc: Scenario, split: dict, per_node: int) -> list[dict]:
    fixed = sc.layout
    group = split["dp"] * split["cp"]
    zg = fixed.get("zero_group")
    if zg is not None:  # a hybrid-shard group the scenario fixes: only splits it divides
        if group % zg:
            return []
        return [{"zero": z, "zero_group": zg} for z in ([fixed["zero"]] if "zero" in fixed else (1, 2, 3))]
    if "zero" in fixed:
        return [{"zero": fixed["zero"], "zero_group": None}]
    if group == 1:
        return [{"zero": 0, "zero_group": None}]
    # ZeRO-0 is dominated once there are replicas: ZeRO-1 moves the same bytes (reduce-scatter +
    # all-gather = all-reduce), hides them behind forward and backward, shards the optimizer step,
    # and needs less memory. ZeRO-2 costs the same time as ZeRO-1 with less memory, so the order
    # below is fastest-first and the first that fits at a recompute level is the fastest there.
    out = [{"zero": z, "zero_group": None} for z in (1, 2)]
    node_group = per_node // (split["tp"] * split["cp"]) if per_node >= split["tp"] * split["cp"] else 1
    if 1 < node_group < group and group % node_group == 0:
        out.append({"zero": 3, "zero_group": node_group})  # HSDP: shard in the node, replicate across
    out.append({"zero": 3, "zero_group": None})
    return out


class Search:
    """Evaluates layouts for one scenario; keeps counts, the best per (GPU, count) and the closest miss."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.searched = 0
        self.rejected: Counter[str] = Counter()
        self.best: dict[tuple[str, int], Candidate] = {}
        self.closest: tuple[float, Layout, Hardware, dict] | None = None
        self._stages: dict[tuple[int, int], list[int]] = {}
        self._peaks: dict[tuple, tuple] = {}

    def run_gpu(self, hw0: Hardware, max_gpus: int, global_batch: int, offload: tuple[str, ...]) -> None:
        sc = self.sc
        tr = replace(sc.training, global_batch=global_batch)
        fixed = sc.layout
        recs = [fixed["recompute"]] if "recompute" in fixed else ["none", "selective-op", "full"]
        mbs = [fixed["micro_batch"]] if "micro_batch" in fixed else MICRO_BATCHES
        for split in _splits(sc, hw0, max_gpus, global_batch):
            n = split["dp"] * split["tp"] * split["pp"] * split["cp"]
            hw = replace(hw0, gpus=n)
            sp = fixed.get("sequence_parallel", True) and split["tp"] > 1  # SP needs tp > 1
            for off in offload:
                # the most frugal choice of this split: if it does not fit, nothing of the split does
                if not self._fits_at_all(hw, tr, split, sp, off, recs, mbs):
                    continue
                any_fit = False
                for sched, v in _schedules(sc, split["pp"]):
                    for mb in mbs:
                        if global_batch % (split["dp"] * mb):
                            continue
                        if not self._ladder(hw, tr, {**split, "micro_batch": mb, "pp_schedule": sched,
                                                     "virtual_stages": v}, sp, off, recs):
                            break  # a larger micro-batch needs more memory still
                        any_fit = True
                if any_fit:
                    break  # no offload needed for this split

    def _layout(self, split: dict, shard: dict, rec: str, sp: bool, off: str) -> Layout | None:
        # every part was chosen by the enumeration's rules, so the layout is valid by construction
        return Layout.unchecked(**split, **shard, recompute=rec, offload=off, sequence_parallel=sp,
                                dp_overlap=self.sc.layout.get("dp_overlap", True),
                                zero3_gather=self.sc.layout.get("zero3_gather", "layer"),
                                tp_overlap=self.sc.layout.get("tp_overlap", False) and sp)

    def _peak(self, tr: Any, split: dict, shard: dict, rec: str, sp: bool, off: str) -> tuple:
        """The most loaded stage's peak pieces, straight from the memory model's cached functions."""
        m = self.sc.model
        pp, v = split["pp"], split["virtual_stages"]
        stages = self._stages.get((pp, v))
        if stages is None:
            stages = self._stages[(pp, v)] = peak_stages(m, pp, v)
        key = (split["tp"], split["ep"], pp, v, split["cp"], split["dp"], sp, split["micro_batch"], rec,
               shard["zero"], shard["zero_group"], off, split["pp_schedule"])
        worst = self._peaks.get(key)  # the memory of a layout is the same on every GPU type
        if worst is None:
            for st in stages:
                parts = stage_peak(m, tr, split["tp"], split["ep"], pp, v, st, split["cp"], split["dp"], sp,
                                   split["micro_batch"], rec, shard["zero"], shard["zero_group"], off,
                                   split["pp_schedule"])
                if worst is None or parts[0] > worst[0]:
                    worst = parts
            self._peaks[key] = worst
        return worst

    @staticmethod
    def _reason(parts: tuple) -> str:
        w, g, o = parts[1][:3]
        sizes = {"model states": w + g + o, "activations": parts[3], "logits and buffers": parts[4] + parts[5]}
        return "out of memory: " + max(sizes, key=sizes.get)

    def _fits_at_all(self, hw: Hardware, tr: Any, split: dict, sp: bool, off: str, recs: list[str],
                     mbs: tuple[int, ...] | list[int]) -> bool:
        frugal = {**split, "micro_batch": min(mbs), "pp_schedule": "1f1b", "virtual_stages": 1}
        shards = _shardings(self.sc, split, hw.gpus_per_node)
        if not shards:
            self.rejected["layout.zero_group does not divide dp×cp"] += 1
            return False
        return self._try(hw, tr, frugal, shards[-1], recs[-1], sp, off, keep=False)

    def _try(self, hw: Hardware, tr: Any, split: dict, shard: dict, rec: str, sp: bool, off: str,
             keep: bool = True) -> bool:
        if off == "params" and shard["zero"] != 3:
            return False
        self.searched += 1
        parts = self._peak(tr, split, shard, rec, sp, off)
        total = parts[0] * hw.memory_factor
        cap = hw.gpu.usable_memory_bytes
        host = hw.host_memory_bytes
        if host is not None and parts[1][3] * min(hw.gpus, hw.gpus_per_node) > host:
            self.rejected["out of host memory: offloaded state"] += 1
            return False
        if total > cap:
            self.rejected[self._reason(parts)] += 1
            if self.closest is None or total - cap < self.closest[0]:
                lay = self._layout(split, shard, rec, sp, off)
                if lay is not None:
                    self.closest = (total - cap, lay, hw, memory(self.sc.model, hw, tr, lay))
            return False
        if keep:
            lay = self._layout(split, shard, rec, sp, off)
            if lay is None:
                return False
            self._consider(hw, tr, lay, total)
        return True

    def _ladder(self, hw: Hardware, tr: Any, split: dict, sp: bool, off: str, recs: list[str]) -> bool:
        """Recompute levels cheapest first; within a level the least sharding that fits."""
        shards = _shardings(self.sc, split, hw.gpus_per_node)
        if not self._try(hw, tr, split, shards[-1], recs[-1], sp, off, keep=False):
            return False  # not even with the most sharding and recompute
        found = False
        limit = len(shards)
        for rec in recs:
            # a costlier recompute level can only win with lighter sharding than a cheaper level needed
            allowed = shards[:limit]
            if not allowed:
                break
            if (rec != recs[-1] or limit < len(shards)) and \
                    not self._try(hw, tr, split, allowed[-1], rec, sp, off, keep=False):
                continue  # not even the heaviest allowed sharding fits at this level
            for i, shard in enumerate(allowed):
                if self._try(hw, tr, split, shard, rec, sp, off):
                    found = True
                    limit = i
                    break  # more sharding at this recompute level only adds time
        return found

    def _consider(self, hw: Hardware, tr: Any, lay: Layout, total_bytes: float) -> None:
        st = step_time(self.sc.model, hw, tr, lay)
        tokens_step = tr.global_batch * tr.seq_len
        tps = tokens_step / st["step_s"]
        total = tr.tokens if tr.tokens is not None else (tr.steps * tokens_step if tr.steps else None)
        train_s = total / tps if total else None
        price = hw.price_per_gpu_hour
        usd = hw.gpus * train_s / 3600 * price if train_s is not None and price is not None else None
        cand = Candidate(hw.gpu.id, hw.gpus, lay, st["step_s"], tps, train_s, usd, total_bytes / GiB, hw)
        key = (hw.gpu.id, hw.gpus)
        if key not in self.best or cand.tokens_per_s > self.best[key].tokens_per_s:
            self.best[key] = cand


def choose(cands: list[Candidate], objective: str, deadline_s: float | None, budget: float | None) -> list[Candidate]:
    """Rank: time (fastest), cost (cheapest); with a deadline the cheapest that finishes in time,
    with a budget the fastest that stays within it."""
    pool = cands
    if deadline_s is not None:
        pool = [c for c in pool if c.train_s is not None and c.train_s <= deadline_s]
        objective = "cost"
    if budget is not None:
        pool = [c for c in pool if c.usd is not None and c.usd <= budget]
        objective = "time" if deadline_s is None else objective

    def cost_key(c: Candidate) -> float:
        if c.usd is not None:
            return c.usd
        price = c.hw.price_per_gpu_hour
        return c.gpus * price / c.tokens_per_s if price else math.inf

    return sorted(pool, key=cost_key if objective == "cost" else (lambda c: -c.tokens_per_s))


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both time (tokens/s) and cost ($ per token)."""
    priced = [c for c in cands if c.hw.price_per_gpu_hour]
    priced.sort(key=lambda c: (-c.tokens_per_s, c.gpus * c.hw.price_per_gpu_hour / c.tokens_per_s))
    front, best_cost = [], math.inf
    for c in priced:
        cost = c.gpus * c.hw.price_per_gpu_hour / c.tokens_per_s
        if cost < best_cost:
            front.append(c)
            best_cost = cost
    return front


def scaling_curve(best: dict[tuple[str, int], Candidate], gpu: str, threshold: float) -> tuple[list[dict], dict]:
    """Best throughput per count for one GPU type, speedup and parallel efficiency against the
    smallest count that fits, and the compute equilibrium: the largest count up to which every
    step keeps at least ``threshold`` of proportional speed-up. A count slower than some smaller
    count stays on the curve (``improves: false``) but is skipped by the equilibrium: nobody
    would rent it, and it must not hide that larger counts scale again (a 3-GPU pipeline between
    2 and 4 GPUs, say)."""
    rows = sorted((c for (g, _), c in best.items() if g == gpu), key=lambda c: c.gpus)
    curve: list[dict] = []
    if not rows:
        return curve, {"gpus": None, "why": f"nothing fits on {gpu}"}
    base = rows[0]
    eq = base
    broken = False
    fastest = 0.0
    for c in rows:
        speedup = c.tokens_per_s / base.tokens_per_s
        eff = speedup * base.gpus / c.gpus
        improves = c.tokens_per_s > fastest
        fastest = max(fastest, c.tokens_per_s)
        curve.append({"gpus": c.gpus, "candidate": c, "speedup": speedup, "efficiency": eff, "improves": improves})
        if not improves or c is base:
            continue
        if not broken and eff >= threshold:
            eq = c
        else:
            broken = True
    last = curve[-1]
    why = (f"up to {eq.gpus} {gpu} GPUs each added GPU still buys ≥{threshold:.0%} of proportional speed-up "
           f"(parallel efficiency {eq.tokens_per_s / base.tokens_per_s * base.gpus / eq.gpus:.0%} vs {base.gpus} GPU"
           f"{'s' if base.gpus > 1 else ''}); at {last['gpus']} it is {last['efficiency']:.0%}")
    return curve, {"gpus": eq.gpus, "why": why, "threshold": threshold}
