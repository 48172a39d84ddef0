"""The one enumerator of layouts, used by ``fit`` and ``plan`` alike.

Enumeration (Calculon-style divisor products, filtered by the named rules of spec/layout.py):
  tp   divides the node and the attention heads (KV heads divide tp or tp divides them)
  pp   divides the layers, at most 64 (uneven splits only when the user fixes pp)
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog.frameworks import get_framework, why_not
from gpuplan.catalog.hardware import get_fabric
from gpuplan.model.estimate import settle_fp8
from gpuplan.model.memory import MemoryBreakdown, StagePeak, memory, worst_stage
from gpuplan.spec import GPU, Hardware, Layout, Training, divisors, ep_choices, tp_splits_heads
from gpuplan.spec.defaults import default_global_batch as _default_batch
from gpuplan.spec.layout import INTERLEAVED_DEFAULT_CHUNKS
from gpuplan.spec.scenario import Scenario

MICRO_BATCHES = (1, 2, 4, 8, 16)
MAX_PP = 64  # pipeline stages the search proposes (published runs: ≤ 16; Llama 3 405B used 16)
LONG_SEQUENCE = 32768  # from this sequence length on, context parallelism is searched
CP_DEGREES = (1, 2, 4, 8, 16)
# layouts one fit or plan evaluates at most (~10 s): Llama-3.1-405B over every catalogue GPU up to 2^20 GPUs
# takes 278k, so no real search reaches it; a 1T model of 5,040 layers over it takes 520k (cut here, and said so)
MAX_TRIES = 300_000
WORK_LIMIT = (f"not searched: the work limit of {MAX_TRIES:,} layouts was reached; narrow the search (fewer --gpu "
              "types, a lower --max-gpus, or fix layout.tp / layout.pp)")


def default_global_batch(sc: Scenario) -> int:
    """The global batch (sequences) the search uses: as given, else spec/defaults.py's rule."""
    return _default_batch(sc.training)


@dataclass(frozen=True, slots=True)
class Candidate:
    """The fastest layout found for one GPU type and count."""

    gpu: str
    gpus: int
    layout: Layout
    step_s: float
    tokens_per_s: float
    train_s: float | None
    usd: float | None
    memory_bytes: float
    hw: Hardware


@dataclass(frozen=True, slots=True)
class Miss:
    """The rejected layout that came nearest to fitting."""

    over_bytes: float
    layout: Layout
    hw: Hardware
    memory: MemoryBreakdown


def hardware_for(sc: Scenario, g: GPU) -> Hardware:
    """The scenario's hardware on GPU type ``g``: its own node, fabric and price for another type."""
    hw = sc.hardware
    if g.id == hw.gpu.id:
        return hw
    return replace(hw, gpu=g, gpus_per_node=g.gpus_per_node, scale_up=get_fabric(g.scale_up, "scale_up"),
                   price_per_gpu_hour=g.price_usd_per_gpu_hour if sc.hardware.price_per_gpu_hour is None
                   or hw.price_per_gpu_hour == hw.gpu.price_usd_per_gpu_hour else hw.price_per_gpu_hour)


def tp_domain(hw: Hardware) -> int:
    """GPUs a tensor-parallel group may span: the scale-up (NVLink) domain — 72 on a GB200/GB300 NVL72
    rack of 4-GPU trays — or the node where the domain is smaller (NVLink bridge pairs talk over PCIe)."""
    return max(hw.gpus_per_node, hw.scale_up.domain_gpus or 0)


def degrees(sc: Scenario, domain: int) -> tuple[list[int], list[int], list[int]]:
    """The tp, pp and cp degrees the search tries (the scenario's own where it fixes them); tp within
    ``domain`` GPUs (``tp_domain``)."""
    m, fixed, seq = sc.model, sc.layout, sc.training.seq_len
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in divisors(domain) if tp_splits_heads(m, t)]
    pps = [fixed["pp"]] if "pp" in fixed else [p for p in divisors(m.n_layers) if p <= MAX_PP]
    cps = [fixed["cp"]] if "cp" in fixed else \
        ([c for c in CP_DEGREES if seq % c == 0] if seq >= LONG_SEQUENCE else [1])
    return tps, pps, cps


def _splits(sc: Scenario, hw: Hardware, counts: Callable[[int], bool], max_gpus: int,
            global_batch: int) -> Iterator[dict]:
    """Parallel splits (tp, pp, cp, dp, ep) for one GPU type; micro-batch and schedule come later."""
    m, fixed, per_node = sc.model, sc.layout, hw.gpus_per_node
    seq = sc.training.seq_len
    tps, pps, cps = degrees(sc, tp_domain(hw))
    for tp in tps:
        for pp in pps:
            for cp in cps:
                for dp in ([fixed["dp"]] if "dp" in fixed else divisors(global_batch)):
                    n = dp * tp * pp * cp
                    if n > max_gpus or (n > per_node and n % per_node) or seq % cp or not counts(n):
                        continue
                    eps = [fixed["ep"]] if "ep" in fixed else ep_choices(m, dp * cp)
                    for ep in eps:
                        yield {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": ep}


def _schedules(sc: Scenario, pp: int) -> list[tuple[str, int]]:
    fixed = sc.layout
    v = fixed.get("virtual_stages", 1)
    if v > 1:  # virtual stages mean the interleaved schedule, and a pipeline to interleave
        return [("interleaved", v)] if pp > 1 and pp * v <= sc.model.n_layers else []
    if fixed.get("pp_schedule") == "interleaved" and pp > 1:  # the documented default: 2 chunks per stage
        return [("interleaved", INTERLEAVED_DEFAULT_CHUNKS)] if pp * INTERLEAVED_DEFAULT_CHUNKS <= sc.model.n_layers \
            else []
    if "pp_schedule" in fixed or pp == 1:
        return [(fixed.get("pp_schedule", "1f1b"), 1)]
    out = [("1f1b", 1)]
    if pp * 2 <= sc.model.n_layers:  # uneven chunks allowed (Llama 3: 126 layers on 16 stages)
        out.append(("interleaved", 2))
    if sc.model.moe and pp % 2 == 0:  # DualPipe: built for MoE's all-to-all (DeepSeek-V3, Sec. 3.2.1)
        out.append(("dualpipe", 1))
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
    """Evaluates layouts for one scenario; keeps counts, the best per (GPU, count), the closest
    miss and the least memory any layout needs per count (``fit`` stops on it)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.searched = self.tries = 0
        self.rejected: Counter[str] = Counter()
        self.best: dict[tuple[str, int], Candidate] = {}
        self.closest: Miss | None = None
        self.least_bytes: dict[int, float] = {}
        self._peaks: dict[tuple, StagePeak] = {}
        fixed = sc.layout  # the fields every layout of this scenario keeps
        self._kept = {"dp_overlap": fixed.get("dp_overlap", True), "zero3_gather": fixed.get("zero3_gather", "layer"),
                      "recompute_every": fixed.get("recompute_every", 1)}
        self._tp_overlap = fixed.get("tp_overlap", False)
        # expert all-to-all overlap: as given, else on wherever the framework offers it and its rules allow
        self._ep_overlap: bool | None = fixed.get("ep_overlap")
        profile = get_framework(sc.training.framework)
        self._ep_offered = profile.name == "generic" or profile.moe["a2a_overlap"].value in (True, "opt-in")
        self._framework_rules = bool(profile.cannot_run)
        self._refusals: dict[tuple, str | None] = {}

    def run_gpu(self, hw0: Hardware, max_gpus: int, global_batch: int, offload: tuple[str, ...],
                counts: Callable[[int], bool] = lambda n: True) -> None:
        """Search every split of up to ``max_gpus`` GPUs of ``hw0``'s type whose count ``counts`` admits."""
        sc = self.sc
        tr = replace(sc.training, global_batch=global_batch)
        fixed = sc.layout
        recs = [fixed["recompute"]] if "recompute" in fixed else ["none", "selective-op", "full"]
        mbs = [fixed["micro_batch"]] if "micro_batch" in fixed else MICRO_BATCHES
        for split in _splits(sc, hw0, counts, max_gpus, global_batch):
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
                        if global_batch % (split["dp"] * mb) or \
                                (sched == "dualpipe" and global_batch // (split["dp"] * mb) % 2):
                            continue
                        if not self._ladder(hw, tr, {**split, "micro_batch": mb, "pp_schedule": sched,
                                                     "virtual_stages": v}, sp, off, recs):
                            break  # a larger micro-batch needs more memory still
                        any_fit = True
                if any_fit:
                    break  # no offload needed for this split

    def _layout(self, split: dict, shard: dict, rec: str, sp: bool, off: str) -> Layout:
        # every part was chosen by the enumeration's rules, so the layout is valid by construction
        return Layout.unchecked(**split, **shard, **self._kept, recompute=rec, offload=off, sequence_parallel=sp,
                                tp_overlap=self._tp_overlap and sp,
                                ep_overlap=self._ep_for(split, shard, rec, sp, off))

    def _ep_for(self, split: dict, shard: dict, rec: str, sp: bool, off: str) -> bool:
        """Whether this layout overlaps the expert all-to-all: as the scenario says; else yes where
        the framework offers it (``moe.a2a_overlap``) and none of its rules refuses it here."""
        if split["ep"] == 1:
            return False
        if self._ep_overlap is not None:
            return self._ep_overlap
        if not self._ep_offered:
            return False
        if not self._framework_rules:
            return True
        key = ("ep_overlap", split["tp"], split["pp"], split["cp"], split["dp"] > 1, split["ep"],
               split["pp_schedule"], shard["zero"], rec, sp, off)
        if key not in self._refusals:
            fields = {**split, **shard, "recompute": rec, "sequence_parallel": sp, "offload": off, **self._kept,
                      "tp_overlap": self._tp_overlap and sp, "ep_overlap": True}
            self._refusals[key] = why_not(self.sc.training.framework, fields, self.sc.training)
        return self._refusals[key] is None

    def _peak(self, tr: Training, split: dict, shard: dict, rec: str, sp: bool, off: str) -> StagePeak:
        """The most loaded stage's peak (the memory of a layout is the same on every GPU type)."""
        key = (split["tp"], split["ep"], split["pp"], split["virtual_stages"], split["cp"], split["dp"], sp,
               split["micro_batch"], rec, shard["zero"], shard["zero_group"], off, split["pp_schedule"])
        worst = self._peaks.get(key)
        if worst is None:
            lay = self._layout(split, shard, rec, sp, off)
            worst = self._peaks[key] = worst_stage(self.sc.model, tr, lay, self.sc.corrections)
        return worst

    def _fits_at_all(self, hw: Hardware, tr: Training, split: dict, sp: bool, off: str, recs: list[str],
                     mbs: tuple[int, ...] | list[int]) -> bool:
        frugal = {**split, "micro_batch": min(mbs), "pp_schedule": "1f1b", "virtual_stages": 1}
        shards = _shardings(self.sc, split, hw.gpus_per_node)
        if not shards:
            self.rejected["layout.zero_group does not divide dp×cp"] += 1
            return False
        return self._try(hw, tr, frugal, shards[-1], recs[-1], sp, off, keep=False)

    def _refused(self, tr: Training, split: dict, shard: dict, rec: str, sp: bool, off: str) -> str | None:
        """Why the scenario's framework cannot run this layout (catalog/frameworks.json), or None."""
        if not self._framework_rules:
            return None
        key = (split["tp"], split["pp"], split["cp"], split["dp"] > 1, split["ep"], split["pp_schedule"],
               shard["zero"], rec, sp, off)
        if key not in self._refusals:
            fields = {**split, **shard, "recompute": rec, "sequence_parallel": sp, "offload": off, **self._kept,
                      "tp_overlap": self._tp_overlap and sp, "ep_overlap": self._ep_for(split, shard, rec, sp, off)}
            self._refusals[key] = why_not(tr.framework, fields, tr)
        return self._refusals[key]

    def _try(self, hw: Hardware, tr: Training, split: dict, shard: dict, rec: str, sp: bool, off: str,
             keep: bool = True) -> bool:
        if off == "params" and shard["zero"] != 3:
            return False
        if self.tries >= MAX_TRIES:  # bounded work: the rest is counted as not searched, and said so
            self.rejected[WORK_LIMIT] += 1
            return False
        self.tries += 1
        refused = self._refused(tr, split, shard, rec, sp, off)
        if refused:
            self.rejected[refused] += 1
            return False
        self.searched += 1
        peak = self._peak(tr, split, shard, rec, sp, off)
        total = peak.total * self.sc.corrections.on(hw.gpu.id).memory
        if total < self.least_bytes.get(hw.gpus, math.inf):
            self.least_bytes[hw.gpus] = total
        cap = hw.gpu.usable_memory_bytes * (1 - tr.headroom)
        host = hw.host_memory_bytes
        if host is not None and peak.states.cpu_offload * min(hw.gpus, hw.gpus_per_node) > host:
            self.rejected["out of host memory: offloaded state"] += 1
            return False
        if total > cap:
            self.rejected["out of memory: " + peak.largest_part()] += 1
            if self.closest is None or total - cap < self.closest.over_bytes:
                lay = self._layout(split, shard, rec, sp, off)
                self.closest = Miss(total - cap, lay, hw, memory(self.sc.model, hw, tr, lay, self.sc.corrections))
            return False
        if keep:
            self._consider(hw, tr, self._layout(split, shard, rec, sp, off), total)
        return True

    def _ladder(self, hw: Hardware, tr: Training, split: dict, sp: bool, off: str, recs: list[str]) -> bool:
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

    def _consider(self, hw: Hardware, tr: Training, lay: Layout, total_bytes: float) -> None:
        st, mem16 = settle_fp8(self.sc.model, hw, tr, lay, self.sc.corrections, fp8_fits=True)
        if mem16 is not None:  # bf16 linears where fp8 does not pay, and they fit
            total_bytes = mem16.total
        tokens_step = (tr.global_batch or 0) * tr.seq_len
        tps = tokens_step / st.step_s
        total = tr.tokens if tr.tokens is not None else (tr.steps * tokens_step if tr.steps else None)
        train_s = total / tps if total else None
        price = hw.price_per_gpu_hour
        usd = hw.gpus * train_s / 3600 * price if train_s is not None and price is not None else None
        cand = Candidate(hw.gpu.id, hw.gpus, lay, st.step_s, tps, train_s, usd, total_bytes, hw)
        key = (hw.gpu.id, hw.gpus)
        if key not in self.best or cand.tokens_per_s > self.best[key].tokens_per_s:
            self.best[key] = cand


def search_gpu(search: Search, hw: Hardware, max_gpus: int, global_batch: int,
               counts: Callable[[int], bool] = lambda n: True) -> None:
    """One GPU type: without offload; with offload only when nothing fits (or as the scenario fixes it)."""
    fixed: dict[str, Any] = search.sc.layout
    if "offload" in fixed:  # the scenario's own choice
        search.run_gpu(hw, max_gpus, global_batch, (fixed["offload"],), counts)
        return
    before = len(search.best)
    search.run_gpu(hw, max_gpus, global_batch, ("none",), counts)
    if len(search.best) == before:  # nothing fits: try offloading
        search.run_gpu(hw, max_gpus, global_batch, ("optimizer", "params"), counts)
