"""The layouts of one scenario as the search builds, refuses and sizes them — cached by value — and the
closest miss over the layouts it classified (search/enumerate.py's Search builds on this)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from gpuplan.catalog.framework_comm import dp_overlap_of, tp_overlap_offered, zero3_gather_of
from gpuplan.catalog.frameworks import first_refusal, get_framework, rule_fields
from gpuplan.model.allocator import fragile
from gpuplan.model.estimate import has_compute_peak
from gpuplan.model.graphs import cuda_graph_allowance
from gpuplan.model.memory import memory, plain_limit, stage_bases, verdict, worst_at
from gpuplan.model.runtime import step_floor
from gpuplan.model.states import state_on_host
from gpuplan.search.codes import Reason, Rejection
from gpuplan.search.found import Family, Miss
from gpuplan.search.space import Split, ordered_micro_batches, own_peak
from gpuplan.spec import Hardware, Layout, Training
from gpuplan.spec.job import per_step
from gpuplan.spec.layout import LAYOUT_FIELDS, recompute_fields
from gpuplan.spec.scenario import Scenario

Where = tuple[Split, Family, int, bool, str]  # a layout: split, family, micro-batch, sequence parallel, offload
Plain = tuple[float, float] | None  # ``memory.plain_limit``: the verdict as a comparison (factor, limit), or None

PEAK_TABLES = 8  # scenarios whose sized peaks a process keeps (``peak_table``): a few MB each
# per scenario: its peaks (``_peak_key`` -> (total, offloaded)) and its floors (``floor_table``)
_tables: OrderedDict[tuple, tuple[dict[tuple, tuple[float, float]], dict[tuple, float]]] = OrderedDict()
_tables_lock = threading.Lock()  # plans in threads of one process (the Python API) share the tables


def peak_table(sc: Scenario, tr: Training, kept: tuple) -> dict[tuple, tuple[float, float]]:
    """The peaks this process has already sized for ``sc``'s model, step and trace calibration (``_peak_key`` ->
    (total, offloaded)): a peak reads none of the tokens, steps, headroom, GPU type, count, deadline, budget or
    objective, so a plan asked again after an edit of those (the web page re-plans as the user types) finds
    them sized. ``kept``: the scenario's fixed layout fields every layout of it carries. The last
    ``PEAK_TABLES`` scenarios are kept; ``clear_peak_tables`` empties them."""
    return _scenario_tables(sc, tr, kept)[0]


def floor_table(sc: Scenario, tr: Training, kept: tuple) -> dict[tuple, float]:
    """The same scenario's floors: the step floors of its layouts (``runtime.step_floor``, keyed by what of the GPU
    type, count and fabric the step reads — search/enumerate.py ``_floor``) and the peak floors of its splits
    (``memory.peak_floor``): a plan asked again over another count range, another objective or budget, times
    only what it had not."""
    return _scenario_tables(sc, tr, kept)[1]


def _scenario_tables(sc: Scenario, tr: Training, kept: tuple) -> tuple[dict, dict]:
    key = (sc.model, replace(per_step(tr), headroom=0.0), sc.corrections.activations, kept)
    with _tables_lock:
        tables = _tables.get(key)
        if tables is None:
            tables = _tables[key] = ({}, {})
            while len(_tables) > PEAK_TABLES:
                _tables.popitem(last=False)
        else:
            _tables.move_to_end(key)
        return tables


def clear_peak_tables() -> None:
    with _tables_lock:
        _tables.clear()


class Book:
    """Layout construction, the framework's refusals and the peaks, for one scenario."""

    sc: Scenario
    tr: Training
    gb: int
    best: dict
    _visited: list[tuple[tuple[int, ...], Hardware, Where]] | None

    def _book(self, sc: Scenario, tr: Training) -> None:
        self._refusals: dict[tuple, Rejection | None] = {}
        self._timed: dict[str, bool] = {}  # per GPU type: whether it has a compute peak to time by
        # per family (its peak key without the micro-batch): its first layout; ``memory.stage_bases`` per family
        # without its recompute too (the stage states read neither)
        self._family_layouts: dict[tuple, Layout] = {}
        self._bases: dict[tuple, tuple] = {}
        self._plain: dict[tuple, Plain] = {}  # ``plain_limit`` per GPU type, count, kind
        self._fields_split: Split | None = None  # ``_layout``'s fields per family of this split
        self._fields: dict[tuple, dict[str, Any]] = {}
        self._irregulars: dict[tuple[str, str], bool] = {}  # ``_irregular`` per recompute and offload
        fixed = sc.layout  # the fields every layout of this scenario keeps
        # ZeRO-3's gathers: as given, else the framework's own (model/completion.py does the same for evaluate)
        # an expert tensor parallelism of 1 as given (MoE parallel folding); etp = tp is every split's own reading
        self._kept = {"zero3_gather": fixed.get("zero3_gather", zero3_gather_of(tr.framework)),
                      "recompute_every": fixed.get("recompute_every", 1), "etp": 1 if fixed.get("etp") == 1 else None,
                      "recompute_modules": tuple(fixed.get("recompute_modules") or ())}
        # the data-parallel gradient reduction under the backward: as given, else where the framework can run it so
        # (``framework_comm.dp_overlap_of``: not DeepSpeed's pipeline engine, not Megatron-LM of 2021-22)
        self._dp_overlap: bool | None = fixed.get("dp_overlap")
        self._sp = fixed.get("sequence_parallel", True)
        # tensor-parallel communication overlap: as given, else the planner's choice per layout (``tp_variants``)
        self._tp_overlap: bool | None = fixed.get("tp_overlap")
        # expert all-to-all overlap: as given, else on wherever the framework offers it and its rules allow
        self._ep_overlap: bool | None = fixed.get("ep_overlap")
        profile = get_framework(tr.framework)
        self._ep_offered = profile.name == "generic" or profile.moe["a2a_overlap"].value in (True, "opt-in")
        self._tp_offered = self._tp_overlap is None and tp_overlap_offered(tr.framework)
        kept = (tuple(sorted(self._kept.items())), self._sp, self._tp_overlap, self._ep_overlap, self._dp_overlap)
        self._peaks, self._floor_table = _scenario_tables(sc, tr, kept)
        # the layout fields the framework's cannot-run rules read: a refusal depends on nothing else here
        self._rules = tuple(sorted(rule_fields(tr.framework, tr) & LAYOUT_FIELDS)) if profile.cannot_run else ()

    # ---- one layout ------------------------------------------------------------------------------
    def _layout(self, split: Split, fam: Family, mb: int, sp: bool, off: str) -> Layout:
        # every part was chosen by the space's rules, so the layout is valid by construction; the fields but the
        # micro-batch are kept per family of the split last asked about (``_family_fields``)
        if split != self._fields_split:
            self._fields_split, self._fields = split, {}
        key = (fam.schedule, fam.virtual_stages, fam.recompute, fam.shard, sp, off)
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = self._family_fields(split, fam, sp, off)
        if split.ep > 1:
            fields = {**fields, "micro_batch": mb}
            fields["ep_overlap"] = self._ep_for(fields)
            return Layout.unchecked(**fields)
        return Layout.unchecked(micro_batch=mb, **fields)

    def _family_fields(self, split: Split, fam: Family, sp: bool, off: str) -> dict[str, Any]:
        """A family's layout fields but the micro-batch (and, with experts spread, their all-to-all overlap)."""
        zero, group = fam.shard
        fields = dict(dp=split.dp, tp=split.tp, pp=split.pp, cp=split.cp, ep=split.ep, zero=zero, zero_group=group,
                      recompute=fam.recompute, sequence_parallel=sp, pp_schedule=fam.schedule,
                      virtual_stages=fam.virtual_stages, offload=off, tp_overlap=bool(self._tp_overlap) and sp,
                      ep_overlap=False, dp_overlap=self._dp_overlap if self._dp_overlap is not None else
                      dp_overlap_of(self.tr.framework, zero, split.pp)[1], **self._kept)
        fields.update(recompute_fields(fam.recompute))  # selective by module: recompute and recompute_modules
        return fields

    def tp_variants(self, lay: Layout) -> tuple[Layout, ...]:
        """The layouts the planner times for ``lay``: itself, and — where the scenario leaves ``tp_overlap`` open, the
        framework offers tensor-parallel communication overlap (frameworks.json ``tp_comm_overlap.supported``: Megatron
        -Core's TE userbuffers, torchtitan's async TP, nanotron's) and none of its rules refuses it here — the same
        layout with it; the faster is kept, a tie to the one without. No peak reads the overlap (model/memory.py), so
        the layout fits either way."""
        if not self._may_overlap_tp(lay.tp, lay.sequence_parallel):
            return (lay,)
        fields = {**lay.values(), "tp_overlap": True}
        return (lay,) if self._refused(fields) is not None else (lay, Layout.unchecked(**fields))

    def _may_overlap_tp(self, tp: int, sp: bool) -> bool:
        """Whether a layout of this tp may take the overlap (``tp_variants``, before the framework's rules)."""
        return self._tp_offered and tp > 1 and sp

    def _ep_for(self, fields: dict) -> bool:
        """Whether this layout overlaps the expert all-to-all: as the scenario says; else yes where
        the framework offers it (``moe.a2a_overlap``) and none of its rules refuses it here."""
        if self._ep_overlap is not None:
            return self._ep_overlap
        if not self._ep_offered:
            return False
        return self._refused({**fields, "ep_overlap": True}) is None

    def _refusal(self, lay: Layout) -> Rejection | None:
        """The framework's cited reason it cannot run ``lay`` (catalog/frameworks.json), or None."""
        return self._refused(lay.values()) if self._rules else None

    def _refused(self, fields: dict) -> Rejection | None:
        if not self._rules:
            return None
        key = tuple(fields[f] for f in self._rules)
        if key not in self._refusals:
            rule = first_refusal(self.tr.framework, fields, self.tr)
            self._refusals[key] = None if rule is None else \
                Rejection(Reason.FRAMEWORK, framework=self.tr.framework, rule=rule.rule, detail=rule.why)
        return self._refusals[key]

    def _peak(self, where: Where) -> tuple[float, float]:
        """(total, offloaded bytes) of the most loaded stage (the same on every GPU type), sized only when asked: a
        family's stage states are computed once (``memory.stage_bases``) and each micro-batch asked about on them
        (``memory.worst_at``, what ``peak_bytes`` runs) — a bisection asks about two or three of them."""
        split, fam, mb, sp, off = where
        key = _peak_key(split, fam, mb, sp, off)
        hit = self._peaks.get(key)
        if hit is None:
            family = key[:5] + key[6:]
            lay = self._family_layouts.get(family)
            if lay is None:
                lay = self._family_layouts[family] = self._layout(split, fam, fam.micro_batches[0], sp, off)
            shared = family[:3] + family[4:]  # the stage states read no recompute (``memory.stage_bases``)
            bases = self._bases.get(shared)
            if bases is None:
                bases = self._bases[shared] = stage_bases(self.sc.model, self.tr, lay)
            _, parts = worst_at(self.sc.model, lay, bases, mb, self.sc.corrections)
            hit = self._peaks[key] = (parts[0], parts[1].cpu_offload)
        return hit

    def _peaks_within(self, split: Split, fam: Family, sp: bool, off: str, plain: list[Plain]
                      ) -> list[tuple[float, float]]:
        """Every micro-batch's (total, offloaded) peak — but where every GPU type's verdict is a plain comparison,
        the ordered micro-batches' past the first whose peak is above every type's limit are not sized: their peaks
        never fall as the micro-batch grows (``own_peak``), so they fit nowhere (read as inf)."""
        mbs = fam.micro_batches
        if any(p is None for p in plain):
            return [self._peak((split, fam, mb, sp, off)) for mb in mbs]
        cap = max(limit / factor for factor, limit in plain) * (1 + 1e-9)  # type: ignore[misc]
        normal = set(ordered_micro_batches(split, fam.schedule, fam.virtual_stages, fam.shard, self.gb, mbs))
        out: list[tuple[float, float]] = []
        over = False
        for j, mb in enumerate(mbs):
            if over and j in normal:
                out.append((math.inf, 0.0))
                continue
            out.append(self._peak((split, fam, mb, sp, off)))
            over = over or (j in normal and out[-1][0] > cap)
        return out

    def _fits(self, hw: Hardware, where: Where) -> bool | None:
        """The model's verdict on one layout (``memory.verdict``): True fits, False out of memory, None out of
        host memory (the caller counts)."""
        return self._fits_peak(hw, self._peak(where), where[0], where[4], self._irregular(where[1], where[4]))

    def _fits_peak(self, hw: Hardware, peak: tuple[float, float], split: Split, off: str, irregular: bool
                   ) -> bool | None:
        """``memory.verdict`` on a (total, offloaded) peak, as the plain comparison where it reduces to one
        (``plain_limit``, kept per GPU type, count and kind of layout)."""
        plain = self._plain_of(hw, split, off, irregular)
        total, offloaded = peak
        if plain is not None:  # the verdict is a comparison here
            return total * plain[0] <= plain[1]
        v = verdict(total, offloaded, hw, self.tr, self.sc.corrections, split.tp > 1 or split.pp > 1,
                    self._graphs(split), irregular=irregular)
        return None if not v.host_ok else v.fits

    def _hosts(self, off: str) -> bool:
        """Whether layouts with offload ``off`` put state in host memory (``memory.state_on_host``)."""
        return state_on_host(self.tr, off)

    def _irregular(self, fam: Family, off: str) -> bool:
        """Whether a family's steps fragment the allocator's native segments (model/allocator.py ``fragile``)."""
        key = (fam.recompute, off)
        hit = self._irregulars.get(key)
        if hit is None:
            hit = self._irregulars[key] = fragile(self.tr, fam.recompute, off)
        return hit

    def _graphs(self, split: Split) -> float:
        """CUDA graphs' allowance on a layout of ``split`` (``model.graphs.cuda_graph_allowance``: it reads pp only)."""
        return cuda_graph_allowance(self.sc.model, self.tr, split.pp)

    def _plain_of(self, hw: Hardware, split: Split, off: str, irregular: bool) -> Plain:
        """``memory.plain_limit`` for this GPU type, count and kind of layout (kept)."""
        mp, hosted = split.tp > 1 or split.pp > 1, self._hosts(off)
        key = (hw.gpu.id, hw.gpus, hw.gpus_per_node, hosted, mp, split.pp > 1, irregular)
        if key not in self._plain:
            self._plain[key] = plain_limit(hw, self.tr, self.sc.corrections, hosted, mp, self._graphs(split),
                                           irregular=irregular)
        return self._plain[key]

    def _floors_of(self, hw: Hardware, split: Split) -> dict[tuple, float] | None:
        """The step floors of ``split``'s layouts on ``hw`` (``_floor``; None on a GPU type with no compute peak:
        nothing to time by, every floor 0): the scenario's ``floor_table`` entry for what of the GPU type, count and
        fabric the step reads, so an earlier plan's floors serve the next — looked up once per split and type."""
        timed = self._timed.get(hw.gpu.id)
        if timed is None:
            timed = self._timed[hw.gpu.id] = has_compute_peak(hw.gpu)
        if not timed:
            return None
        c = self.sc.corrections
        known = (hw.gpu, hw.gpus, hw.gpus_per_node, hw.scale_up, hw.scale_out, hw.power_limit_w, c.compute, c.gpu,
                 split)
        table = self._floor_table.get(known)
        if table is None:
            table = self._floor_table[known] = {}
        return table

    def _plain_in(self, plains: dict[tuple, Plain], t: int, hw: Hardware, split: Split, off: str, irregular: bool
                  ) -> Plain:
        """``_plain_of`` of type ``t`` (``hw``) on ``split``, kept in the split's ``plains``."""
        key = (t, irregular)
        if key in plains:
            return plains[key]
        plain = plains[key] = self._plain_of(hw, split, off, irregular)
        return plain

    def _floor(self, floors: dict[tuple, float], layouts: dict[tuple, Layout], key: tuple, where: Where,
               hw: Hardware) -> float:
        """``runtime.step_floor`` of a fitting layout, kept in its split's ``floors`` (``_floors_of``) under ``key``
        — (schedule, virtual stages, recompute, whether the optimizer state is sharded, micro-batch): it reads the
        stage compute, the bubble and the optimizer step, the same for every sharding with as much optimizer state
        (ZeRO-0 or not), so computed once for them."""
        split, fam, mb, _, _ = where
        # the layout is the same on every GPU type: built once per split for them all (``layouts``)
        lay_key = (fam.schedule, fam.virtual_stages, fam.recompute, fam.shard, mb)
        lay = layouts.get(lay_key)
        if lay is None:
            lay = layouts[lay_key] = self._layout(*where)
        # below the step of either variant ``tp_variants`` may keep, whatever the framework's rules say of it
        m, tr, c = self.sc.model, self.tr, self.sc.corrections
        hit = step_floor(m, hw, tr, lay, c)
        if self._may_overlap_tp(lay.tp, lay.sequence_parallel):
            hit = min(hit, step_floor(m, hw, tr, Layout.unchecked(**{**lay.values(), "tp_overlap": True}), c))
        floors[key] = hit
        return hit

    # ---- the closest miss ------------------------------------------------------------------------
    def _remember(self, rank: tuple[int, ...], hw: Hardware, where: Where) -> None:
        if self._visited is not None:
            self._visited.append((rank, hw, where))

    def closest(self) -> Miss | None:
        """When nothing fits: the layout nearest to fitting, over every layout classified. Within a family
        the smallest micro-batch not refused has the least memory (``own_peak`` aside)."""
        if self.best or not self._visited:
            return None
        near: tuple[float, tuple[int, ...], Where, Hardware] | None = None
        for rank, hw, (split, fam, _, sp, off) in self._visited:
            evaluated = False
            for j, mb in enumerate(fam.micro_batches):
                if evaluated and not own_peak(split, fam.schedule, fam.virtual_stages, fam.shard, self.gb, mb):
                    continue
                if self._refusal(self._layout(split, fam, mb, sp, off)) is not None:
                    continue
                evaluated = True
                where = (split, fam, mb, sp, off)
                total, offloaded = self._peak(where)
                v = verdict(total, offloaded, hw, self.tr, self.sc.corrections, split.tp > 1 or split.pp > 1,
                            self._graphs(split), irregular=self._irregular(fam, where[4]))
                if v.host_ok and (near is None or (v.upper - v.usable, (*rank, j)) < (near[0], near[1])):
                    near = (v.upper - v.usable, (*rank, j), where, hw)
        if near is None:
            return None
        over, _, where, hw = near
        lay = self._layout(*where)
        return Miss(over, lay, hw, memory(self.sc.model, hw, self.tr, lay, self.sc.corrections))


def _peak_key(split: Split, fam: Family, mb: int, sp: bool, off: str) -> tuple:
    """What a layout's peak depends on (its family's fields that memory reads, the micro-batch)."""
    return (split, fam.schedule, fam.virtual_stages, fam.recompute, fam.shard, mb, sp, off)
