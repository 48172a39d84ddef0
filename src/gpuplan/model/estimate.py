"""``evaluate()``: one scenario and a complete layout → an ``Estimate`` (README "Commands": the JSON an answer prints).

A pure function of its inputs (no I/O beyond the cached catalogues). report/render.py turns an ``Estimate`` into the
contract's JSON object, keys in their documented order; ``assess`` times and prices a layout, for evaluate and plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog.constants import table
from gpuplan.catalog.intervals import Spread, throughput_spread
from gpuplan.catalog.refusals import why_not
from gpuplan.errors import GpuplanError
from gpuplan.model.batch_split import open_batch_split
from gpuplan.model.completion import as_framework, completed_layout, replicas_of
from gpuplan.model.compute import unsupported_precision
from gpuplan.model.ep_comm import unsupported_dispatcher
from gpuplan.model.flops import FlopsPerToken, flops_per_token
from gpuplan.model.memory import MemoryBreakdown, memory
from gpuplan.model.micro_batch_open import open_micro_batch
from gpuplan.model.notes import Note, estimate_notes
from gpuplan.model.params import trainable_params
from gpuplan.model.recompute_modules import unsupported_modules
from gpuplan.model.recompute_open import open_recompute
from gpuplan.model.runtime import StepTime, bf16_run, step_time
from gpuplan.model.tp_open import open_tp
from gpuplan.model.zero_open import open_zero, runnable_stage
from gpuplan.spec import GPU, Hardware, Layout, ModelSpec, Training
from gpuplan.spec.corrections import Corrections
from gpuplan.spec.defaults import default_global_batch
from gpuplan.spec.job import FP4_RECIPES, LIGER_FRAMEWORKS
from gpuplan.spec.scenario import Scenario
from gpuplan.spec.tokens_batch import batch_for_layout


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeEstimate:
    """Step time and what follows from it: throughput, MFU/HFU, time to train, GPU-hours, energy."""

    step: StepTime
    flops: FlopsPerToken
    tokens_per_step: int
    total_tokens: float | None
    tokens_per_s: float
    gpus: int
    peak_flops: float              # the 16-bit dense peak MFU and HFU are measured against
    failure_overhead: float | None
    energy_kwh: float | None
    spread: Spread | None = None   # the 80 % interval of throughput (catalog/intervals.py), None without one
    # spot capacity: the share of wall time lost to preemptions (checkpoints, lost work, restarts), part of
    # train_s and so of GPU-hours and cost; None on capacity that is not preemptible
    preemption_overhead: float | None = None

    @property
    def step_s(self) -> float:
        return self.step.step_s

    @property
    def mfu(self) -> float:
        return self.flops.model * self.tokens_per_s / (self.gpus * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.flops.hardware * self.tokens_per_s / (self.gpus * self.peak_flops)

    @property
    def train_s(self) -> float | None:
        """Wall time to train: the tokens at the step's rate, plus the preemption allowance on spot capacity."""
        if not self.total_tokens:
            return None
        return self.total_tokens / self.tokens_per_s * (1 + (self.preemption_overhead or 0.0))

    @property
    def gpu_hours(self) -> float | None:
        return self.gpus * self.train_s / 3600 if self.train_s is not None else None

    def to_json(self) -> dict:
        st, fl, total, train_s = self.step, self.flops, self.total_tokens, self.train_s
        fail = self.failure_overhead
        return {
            "step_s": st.step_s, "compute_s": st.compute_s, "comm_exposed_s": st.comm_exposed_s,
            "bubble_s": st.bubble_s, "optimizer_s": st.optimizer_s, "recompute_s": st.recompute_s,
            "comm_detail": dict(st.comm_detail), "microbatches": st.microbatches,
            "tokens_per_step": self.tokens_per_step, "steps": total / self.tokens_per_step if total else None,
            "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s / self.gpus,
            "model_flops_per_token": fl.model, "hardware_flops_per_token": fl.hardware,
            "six_n_flops_per_token": fl.six_n, "total_flops": fl.model * total if total else None,
            "mfu": self.mfu, "hfu": self.hfu, "train_s": train_s, "gpu_hours": self.gpu_hours,
            "train_s_with_failures": train_s * (1 + fail) if fail is not None and train_s is not None else None,
            "failure_overhead": fail, "preemption_overhead": self.preemption_overhead,
            "energy_kwh": self.energy_kwh, "interval": self.intervals(),
            "interval_basis": {"regime": self.spread.regime, "runs": self.spread.n} if self.spread else None,
        }

    def factors(self) -> tuple[float, float] | None:
        """(low, high): the 80 % interval of throughput as factors on the prediction (published / predicted)."""
        s = self.spread
        return None if s is None else (1.0 + s.p10, 1.0 + s.p90)

    def intervals(self) -> dict[str, dict[str, float]] | None:
        """Each quantity's 10th and 90th percentile: throughput scales with the factors, times inversely."""
        f = self.factors()
        if f is None:
            return None
        lo, hi = f
        out = {"tokens_per_s": (self.tokens_per_s * lo, self.tokens_per_s * hi),
               "tokens_per_s_per_gpu": (self.tokens_per_s / self.gpus * lo, self.tokens_per_s / self.gpus * hi),
               "mfu": (self.mfu * lo, self.mfu * hi), "step_s": (self.step_s / hi, self.step_s / lo)}
        if self.train_s is not None and self.gpu_hours is not None:
            out |= {"train_s": (self.train_s / hi, self.train_s / lo),
                    "gpu_hours": (self.gpu_hours / hi, self.gpu_hours / lo)}
        return {k: {"p10": a, "p90": b} for k, (a, b) in out.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost:
    usd: float | None
    usd_per_gpu_hour: float | None
    usd_with_failures: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """Memory, time and cost of one scenario on one complete layout (report/render.py gives its JSON)."""

    scenario: Scenario
    layout: Layout
    memory: MemoryBreakdown
    time: TimeEstimate | None   # None when the GPU has no published compute peak (no runtime, no cost)
    cost: Cost
    notes: tuple[Note, ...] = ()
    params_trainable: int = 0   # parameters the run updates (LoRA/QLoRA: the adapters)
    # framework not named: each named framework that can run this layout, and the throughput it would give
    alternatives: tuple[tuple[str, float], ...] = ()
    searched: bool = False  # the layout was chosen by plan/fit's search, not completed with defaults
    layout_rules: tuple[tuple[str, str], ...] = ()  # layout fields a framework's documented default set, and why


def evaluate(sc: Scenario, layout: Layout | None = None, **overrides: Any) -> Estimate:
    """Estimate for ``sc`` with ``layout`` (a search's choice) or the scenario's layout completed
    with ``overrides`` and the defaults; an open global batch follows spec/defaults.py."""
    problem = unsupported_precision(sc.hardware.gpu, sc.training.precision, sc.training.fp8_recipe) \
        or unsupported_dispatcher(sc.model, sc.hardware, sc.training) \
        or unsupported_modules(sc.training.framework, sc.layout)
    if problem:
        raise GpuplanError(problem)
    sc, lay, rules, mem = _settled(sc, layout, overrides)
    searched = layout is not None
    hw, tr = sc.hardware, sc.training
    trainable = trainable_params(sc.model, tr.method, tr.lora_targets, tr.lora_rank)
    if not has_compute_peak(hw.gpu):
        return Estimate(scenario=sc, layout=lay, memory=mem, time=None, notes=estimate_notes(sc, mem, lay),
                        cost=Cost(usd=None, usd_per_gpu_hour=hw.price_per_gpu_hour, usd_with_failures=None),
                        params_trainable=trainable, searched=searched, layout_rules=rules)
    a = assess(sc.model, hw, tr, lay, sc.corrections, mem.fits)
    extra: tuple[Note, ...] = ()
    if a.bf16_memory is not None:
        mem, extra = a.bf16_memory, (Note.FP8_DOES_NOT_PAY,)
    return Estimate(scenario=sc, layout=lay, memory=mem, time=a.time, cost=a.cost,
                    notes=estimate_notes(sc, mem, lay) + extra, params_trainable=trainable, searched=searched,
                    alternatives=named_alternatives(sc, lay), layout_rules=rules)


def _settled(sc: Scenario, layout: Layout | None, overrides: dict[str, Any]
            ) -> tuple[Scenario, Layout, tuple[tuple[str, str], ...], MemoryBreakdown]:
    """The scenario (its global batch settled), layout, layout rules and memory ``evaluate`` reads: ``layout`` as
    given (a search's choice), else the scenario's completed (model/completion.py), at the least ZeRO stage its
    framework runs it with, its open ZeRO stage and recomputation read as the run it describes (an open tp under
    sequence parallelism first: model/tp_open.py)."""
    tp_read = open_tp(sc, overrides, lambda s, o: _settled(s, None, o), _step_s) if layout is None else None
    if tp_read is not None:
        (sc, lay, rules, mem), rule = tp_read
        return sc, lay, (("tp", rule), *rules), mem
    split_read = open_batch_split(sc, overrides, lambda s, o: _settled(s, None, o), _step_s) if layout is None \
        else None
    if split_read is not None:
        (sc, lay, rules, mem), rule = split_read
        return sc, lay, (("dp", rule), *rules), mem
    if layout is None and sc.training.global_batch is not None:  # read against the layout's replicas
        sc = batch_for_layout(sc, replicas_of(sc, overrides))
    overrides, stepped = _in_backward_micro_batch(sc, overrides) if layout is None else (overrides, ())
    lay, rules = (layout, ()) if layout is not None else completed_layout(sc, **overrides)
    if sc.training.global_batch is None:  # with the optimizer in backward: one micro-batch per step
        gb = lay.dp * lay.micro_batch if sc.training.optimizer_in_backward else \
            default_global_batch(sc.training, lay.dp * lay.micro_batch)
        sc = replace(sc, training=replace(sc.training, global_batch=gb))
    refused = why_not(sc.training.framework, lay.values(), sc.training, sc.model)
    runnable = runnable_stage(sc, lay, overrides, refused) if refused and layout is None else None
    if runnable is not None:  # refused at its stage: the least stage the framework runs it with
        (lay, rules), refused = runnable, None
    if refused:
        raise GpuplanError(refused)
    mem = memory(sc.model, sc.hardware, sc.training, lay, sc.corrections)
    if layout is None:  # an open ZeRO stage, then an open recomputation, read as the run the layout describes
        lay, mem, sharded = open_zero(sc, lay, mem, overrides)
        rules = sharded if sharded is not None else rules
        lay, mem, rule = open_recompute(sc, lay, mem, overrides)
        rules += ((("recompute", rule),) + ((("recompute_modules", rule),) if lay.recompute_modules else ())) \
            if rule else ()
        lay, mem, rule = open_micro_batch(sc, lay, mem, overrides)  # with the global batch given
        rules += (("micro_batch", rule),) if rule else stepped
    return sc, lay, rules, mem


def _in_backward_micro_batch(sc: Scenario, overrides: dict[str, Any]
                             ) -> tuple[dict[str, Any], tuple[tuple[str, str], ...]]:
    """With the optimizer in backward (one micro-batch per step) and the global batch given, an open micro-batch is
    the per-replica batch: the overrides that say so and the rule (none where it is given or does not divide)."""
    gb = sc.training.global_batch
    if not sc.training.optimizer_in_backward or gb is None or "micro_batch" in sc.layout or "micro_batch" in overrides:
        return overrides, ()
    per, rest = divmod(gb, replicas_of(sc, overrides))
    if per <= 1 or rest:
        return overrides, ()
    return {**overrides, "micro_batch": per}, (("micro_batch", "not given: the optimizer steps in backward, so a step "
                                                "is one micro-batch: the per-replica batch of the global batch"),)


def _step_s(sc: Scenario, lay: Layout) -> float:
    return step_time(sc.model, sc.hardware, sc.training, lay, sc.corrections).step_s


def read_layout(sc: Scenario, **overrides: Any) -> Layout:
    """The layout ``evaluate(sc, **overrides)`` reads the scenario as (``_settled``): what `gpuplan trace` traces and
    the plan's row for the user's own layout evaluates — one reading of an open field for every command."""
    return _settled(sc, None, overrides)[1]


NAMED = ("megatron-lm", "megatron-core", "torchtitan", "deepspeed", "pytorch-fsdp", "hf-trainer", "torchtune")


def named_alternatives(sc: Scenario, lay: Layout) -> tuple[tuple[str, float], ...]:
    """With no framework named (generic, the typical stack), the throughput each named framework that can run
    this layout would give: what naming one would change (none when a framework is named)."""
    tr = sc.training
    if tr.framework != "generic":
        return ()
    out = []
    for name in NAMED:
        if tr.kernels == "liger" and name not in LIGER_FRAMEWORKS:  # Liger patches a Hugging Face model only
            continue
        alt = as_framework(sc, name)
        if why_not(name, lay.values(), alt, sc.model) is not None:
            continue
        st = step_time(sc.model, sc.hardware, alt, lay, sc.corrections)
        out.append((name, time_estimate(sc.model, sc.hardware, alt, lay, st).tokens_per_s))
    return tuple(out)


def has_compute_peak(gpu: GPU) -> bool:
    """Whether the catalogue gives the GPU a 16- or 32-bit dense peak: without one, runtime and cost
    are not predicted (``evaluate``) and the planner does not search it."""
    return any(k in gpu.peak_flops for k in ("bf16", "fp16", "fp32"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Assessment:
    """A layout timed and priced: what ``evaluate`` reports and what the planner ranks by."""

    step: StepTime
    time: TimeEstimate
    cost: Cost
    bf16_memory: MemoryBreakdown | None  # a generic fp8 run that falls back to bf16 linears holds this


def assess(model: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
           fits: bool) -> Assessment:
    """Step time (with ``settle_fp8``'s choice of linears), throughput, time to train and cost — the one
    function ``evaluate`` and the planner both call for a layout (``fits``: its memory fits)."""
    st, mem16 = settle_fp8(model, hw, tr, lay, corrections, fits)
    time = time_estimate(model, hw, tr, lay, st)
    return Assessment(step=st, time=time, cost=cost_of(time, hw.price_per_gpu_hour), bf16_memory=mem16)


def settle_fp8(model: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
               fp8_fits: bool) -> tuple[StepTime, MemoryBreakdown | None]:
    """The step, and the memory that replaces the fp8 one (None: keep it). A generic fp8 run whose
    step falls back to bf16 linears (runtime.step_time) holds bf16's memory — unless that would not
    fit where fp8's does: then it runs fp8 after all, slower or not."""
    st = step_time(model, hw, tr, lay, corrections)
    if tr.precision != "fp8" or st.fp8_layers:
        return st, None
    mem16 = memory(model, hw, bf16_run(tr), lay, corrections)
    if mem16.fits or not fp8_fits:
        return st, mem16
    return step_time(model, hw, tr, lay, corrections, allow_bf16=False), None


# HFU (hardware FLOPs executed per second over the peak) above 1 is a bug, not an answer (issue 25): checked on
# every estimate, with room for the floating point of the sums. (MFU may pass 1 at very long sequences: it counts
# the masked half of causal attention, as PaLM's definition and the published MFUs do.)
PEAK_SLACK = 1 + 1e-9


def time_estimate(model: ModelSpec, hw: Hardware, tr: Training, lay: Layout, st: StepTime) -> TimeEstimate:
    """Throughput, MFU/HFU, time to train, energy at TDP and the goodput loss to failures of step ``st``."""
    seqs = tr.global_batch if tr.global_batch is not None else lay.dp * lay.micro_batch
    tokens_per_step = seqs * tr.seq_len
    tps = tokens_per_step / st.step_s
    peak16 = hw.gpu.peak_flops.get("bf16") or hw.gpu.peak_flops.get("fp16") or hw.gpu.peak_flops["fp32"]
    total_tokens = tr.tokens if tr.tokens is not None else (tr.steps * tokens_per_step if tr.steps else None)
    train_s = total_tokens / tps if total_tokens else None
    adapters = 0.0 if tr.method == "full" else float(trainable_params(model, tr.method, tr.lora_targets, tr.lora_rank))
    executed = flops_per_token(model, tr.seq_len, lay.recompute_mode, tr.method != "full", adapters,
                               full_share=1.0 / lay.recompute_every)
    # the bound: the peak of the fastest number format the step's GEMMs run in (MFU and HFU stay on the 16-bit peak)
    fastest = "fp4" if tr.fp8_recipe in FP4_RECIPES else "fp8" if tr.precision == "fp8" else None
    bound = hw.gpu.peak_flops.get(fastest, peak16) if fastest else peak16
    if executed.hardware * tps > hw.gpus * bound * PEAK_SLACK:  # more work per second than the GPUs can do
        raise RuntimeError(f"HFU {executed.hardware * tps / (hw.gpus * bound):.1%} above 100% for {model.name} on "
                           f"{hw.gpus}× {hw.gpu.id}: the step model undercounted time")
    return TimeEstimate(
        step=st, tokens_per_step=tokens_per_step,
        flops=executed,
        total_tokens=total_tokens, tokens_per_s=tps, gpus=hw.gpus, peak_flops=peak16,
        failure_overhead=failure_overhead(hw.gpus, train_s) if train_s is not None else None,
        preemption_overhead=preemption_overhead(hw.gpus, hw.nodes) if hw.market and hw.market.preemptible else None,
        energy_kwh=hw.gpus * hw.gpu.tdp_w * train_s / 3.6e6 if train_s and hw.gpu.tdp_w else None,
        spread=throughput_spread(tr.framework, hw.gpu.architecture, hw.gpus, hw.gpus_per_node, tr.seq_len,
                                 st.scan_s / st.step_s, st.comm_detail.get("ep", 0.0) / st.step_s))


def cost_of(time: TimeEstimate, price: float | None) -> Cost:
    gpu_hours, fail = time.gpu_hours, time.failure_overhead
    return Cost(usd=gpu_hours * price if gpu_hours is not None and price is not None else None,
                usd_per_gpu_hour=price,
                usd_with_failures=gpu_hours * price * (1 + fail)
                if gpu_hours is not None and price is not None and fail is not None else None)


def preemption_overhead(gpus: int, nodes: int) -> float:
    """Share of extra wall time a run on spot capacity loses to preemptions: each node is reclaimed at
    ``spot.interruptions_per_node_hour`` (constants.json), the job stops when any node is; with the failure
    model's checkpoints every τ = sqrt(2·C·MTBF) (Young 1974) — what the hardware failures and the preemptions
    together cost, less what the failures alone cost (``failure_overhead``). The restart of a preempted job
    waits for capacity: ``spot.restart_s``."""
    f, spot = table("failure"), table("spot")
    hw_rate = f["interruptions_per_gpu_day"] * gpus / 86400
    rate = hw_rate + spot["interruptions_per_node_hour"] * nodes / 3600
    c = f["checkpoint_write_s"]
    restart = (hw_rate * f["restart_s"] + (rate - hw_rate) * spot["restart_s"]) / rate
    tau = (2 * c / rate) ** 0.5
    both = c / tau + tau * rate / 2 + restart * rate
    return both - _young(hw_rate, c, f["restart_s"])


def _young(rate: float, c: float, restart: float) -> float:
    """Overhead share at interruption ``rate`` (per second) with Young's checkpoint interval."""
    tau = (2 * c / rate) ** 0.5
    return c / tau + tau * rate / 2 + restart * rate


def failure_overhead(gpus: int, train_s: float) -> float:
    """Share of extra wall time lost to interruptions, for long runs on many GPUs.

    Rate from Llama 3 (Dubey et al. 2024, Sec. 3.3.4): 466 interruptions in 54 days on 16,384
    H100s → λ per GPU-day. With checkpoints every τ = sqrt(2·C·MTBF) (Young 1974) the expected
    loss per unit time is C/τ (writing checkpoints) + τ/(2·MTBF) (lost work) + R/MTBF (restarts).
    """
    f = table("failure")
    mtbf = 86400 / (f["interruptions_per_gpu_day"] * gpus)
    c, r = f["checkpoint_write_s"], f["restart_s"]
    tau = (2 * c * mtbf) ** 0.5
    return c / tau + tau / (2 * mtbf) + r / mtbf
