"""``evaluate()``: one scenario and a complete layout → an ``Estimate`` (DESIGN.md section 4).

A pure function of its inputs (no I/O beyond the cached catalogues). ``Estimate.to_json()``
is the contract's JSON object, keys in their documented order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog.constants import table
from gpuplan.catalog.frameworks import why_not
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import unsupported_precision
from gpuplan.model.flops import FlopsPerToken, flops_per_token
from gpuplan.model.memory import MemoryBreakdown, memory
from gpuplan.model.params import trainable_params
from gpuplan.model.runtime import StepTime, step_time
from gpuplan.spec import Hardware, Layout, ModelSpec, Training
from gpuplan.spec.corrections import Corrections
from gpuplan.spec.defaults import assumed, default_global_batch
from gpuplan.spec.scenario import Scenario, complete_layout, normalized

TIME_KEYS = ("step_s", "compute_s", "comm_exposed_s", "bubble_s", "tokens_per_s", "tokens_per_s_per_gpu",
             "model_flops_per_token", "mfu", "hfu", "train_s", "gpu_hours")


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
        return self.total_tokens / self.tokens_per_s if self.total_tokens else None

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
            "failure_overhead": fail, "energy_kwh": self.energy_kwh,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Cost:
    usd: float | None
    usd_per_gpu_hour: float | None
    usd_with_failures: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """Memory, time and cost of one scenario on one complete layout."""

    scenario: Scenario
    layout: Layout
    memory: MemoryBreakdown
    time: TimeEstimate | None   # None when the GPU has no published compute peak (``time_note`` says so)
    cost: Cost
    notes: tuple[str, ...] = ()
    time_note: str | None = None
    searched: bool = False  # the layout was chosen by plan/fit's search, not completed with defaults

    def to_json(self) -> dict:
        sc, model = self.scenario, self.scenario.model
        tr = sc.training
        out: dict[str, Any] = {
            "scenario": normalized(sc, self.layout),
            "model": {
                "name": model.name, "params": model.params, "params_active": model.params_active,
                "params_trainable": trainable_params(model, tr.method, tr.lora_targets, tr.lora_rank),
                "params_source": model.params_source, "params_by_group": model.params_by_group(),
                "assumed": list(model.assumed),
            },
            "notes": list(self.notes),
            "assumed": assumed(sc, tr, self.layout, self.searched),
            "memory": self.memory.to_json(),
        }
        if self.time is None:
            out["time"] = {k: None for k in TIME_KEYS} | {"note": self.time_note}
            out["cost"] = {"usd": None, "usd_per_gpu_hour": self.cost.usd_per_gpu_hour, "note": self.time_note}
        else:
            out["time"] = self.time.to_json()
            out["cost"] = {"usd": self.cost.usd, "usd_per_gpu_hour": self.cost.usd_per_gpu_hour,
                           "usd_with_failures": self.cost.usd_with_failures}
        return out


def evaluate(sc: Scenario, layout: Layout | None = None, **overrides: Any) -> Estimate:
    """Estimate for ``sc`` with ``layout`` (a search's choice) or the scenario's layout completed
    with ``overrides`` and the defaults; an open global batch follows spec/defaults.py."""
    problem = unsupported_precision(sc.hardware.gpu, sc.training.precision, sc.training.fp8_recipe)
    if problem:
        raise GpuplanError(problem)
    lay = layout if layout is not None else complete_layout(sc, **overrides)
    if sc.training.global_batch is None:
        sc = replace(sc, training=replace(sc.training, global_batch=default_global_batch(
            sc.training, lay.dp * lay.micro_batch)))
    searched = layout is not None
    refused = why_not(sc.training.framework, lay.values(), sc.training)
    if refused:
        raise GpuplanError(refused)
    mem = memory(sc.model, sc.hardware, sc.training, lay, sc.corrections)
    hw = sc.hardware
    if not any(k in hw.gpu.peak_flops for k in ("bf16", "fp16", "fp32")):
        why = f"{hw.gpu.id} has no published compute peak in the catalogue: runtime and cost are not predicted"
        return Estimate(scenario=sc, layout=lay, memory=mem, time=None, notes=_notes(sc, mem), time_note=why,
                        cost=Cost(usd=None, usd_per_gpu_hour=hw.price_per_gpu_hour, usd_with_failures=None),
                        searched=searched)
    st, mem16 = settle_fp8(sc.model, hw, sc.training, lay, sc.corrections, mem.fits)
    extra: tuple[str, ...] = ()
    if mem16 is not None:
        mem, extra = mem16, (FP8_DOES_NOT_PAY,)
    time = time_estimate(sc, lay, st)
    return Estimate(scenario=sc, layout=lay, memory=mem, time=time, cost=cost_of(time, hw.price_per_gpu_hour),
                    notes=_notes(sc, mem) + extra, searched=searched)


FP8_DOES_NOT_PAY = ("fp8 does not pay on this layout: the blocks' linear layers are estimated in bf16 (time and "
                    "memory), as Transformer Engine users leave such layers out of fp8_autocast; torchtitan and "
                    "Megatron-Core (training.framework) run every block linear in fp8 regardless")


def settle_fp8(model: ModelSpec, hw: Hardware, tr: Training, lay: Layout, corrections: Corrections,
               fp8_fits: bool) -> tuple[StepTime, MemoryBreakdown | None]:
    """The step, and the memory that replaces the fp8 one (None: keep it). A generic fp8 run whose
    step falls back to bf16 linears (runtime.step_time) holds bf16's memory — unless that would not
    fit where fp8's does: then it runs fp8 after all, slower or not."""
    st = step_time(model, hw, tr, lay, corrections)
    if tr.precision != "fp8" or st.fp8_layers:
        return st, None
    mem16 = memory(model, hw, replace(tr, precision="bf16", fp8_recipe=None), lay, corrections)
    if mem16.fits or not fp8_fits:
        return st, mem16
    return step_time(model, hw, tr, lay, corrections, allow_bf16=False), None


# Memory savers that published runs use and gpuplan does not represent: a peak within this share
# over the capacity may still run with them (Llama 3 405B as published, tp 8 pp 16 without
# activation checkpointing, is predicted 4-10 % over an 80 GB H100).
NOT_MODELLED_MARGIN = 0.15
NOT_MODELLED_SAVERS = (
    "activations cached in fp8 for the linear layers' backward (DeepSeek-V3, arXiv:2412.19437 Sec. 3.3.2)",
    "recomputing only the norms and MLA up-projections (DeepSeek-V3 Sec. 3.3.3; gpuplan's selective "
    "levels recompute other sets)",
    "per-stage memory tuning of the pipeline: freeing stage inputs/outputs early, fewer contiguous "
    "micro-batches in flight (Llama 3, arXiv:2407.21783 Sec. 3.3.2)",
    "activation offload to host memory",
)


def _notes(sc: Scenario, mem: MemoryBreakdown) -> tuple[str, ...]:
    """What the estimate does not check but the user should know."""
    m, seq = sc.model, sc.training.seq_len
    out = []
    if m.max_positions and seq > m.max_positions:
        out.append(f"seq_len {seq:,} is beyond the {m.max_positions:,} positions {m.name} was trained on: "
                   "long-context training needs RoPE scaling or a longer-context model (memory and time are "
                   "predicted all the same)")
    if not mem.fits and mem.capacity < mem.total <= mem.capacity * (1 + NOT_MODELLED_MARGIN):
        out.append(f"within {NOT_MODELLED_MARGIN:.0%} over the capacity: runs at this edge use memory savers "
                   "gpuplan does not model — " + "; ".join(NOT_MODELLED_SAVERS))
    return tuple(out)


def time_estimate(sc: Scenario, lay: Layout, st: StepTime | None = None) -> TimeEstimate:
    """Step time (runtime.py, or ``st`` already found), throughput, MFU/HFU, time to train, energy at
    TDP, and the goodput loss to failures."""
    hw, tr, model = sc.hardware, sc.training, sc.model
    st = st if st is not None else step_time(model, hw, tr, lay, sc.corrections)
    seqs = tr.global_batch if tr.global_batch is not None else lay.dp * lay.micro_batch
    tokens_per_step = seqs * tr.seq_len
    tps = tokens_per_step / st.step_s
    peak16 = hw.gpu.peak_flops.get("bf16") or hw.gpu.peak_flops.get("fp16") or hw.gpu.peak_flops["fp32"]
    total_tokens = tr.tokens if tr.tokens is not None else (tr.steps * tokens_per_step if tr.steps else None)
    train_s = total_tokens / tps if total_tokens else None
    return TimeEstimate(
        step=st, tokens_per_step=tokens_per_step,
        flops=flops_per_token(model, tr.seq_len, lay.recompute, tr.method != "full",
                              0.0 if tr.method == "full" else
                              float(trainable_params(model, tr.method, tr.lora_targets, tr.lora_rank)),
                              full_share=1.0 / lay.recompute_every),
        total_tokens=total_tokens, tokens_per_s=tps, gpus=hw.gpus, peak_flops=peak16,
        failure_overhead=failure_overhead(hw.gpus, train_s) if train_s is not None else None,
        energy_kwh=hw.gpus * hw.gpu.tdp_w * train_s / 3.6e6 if train_s and hw.gpu.tdp_w else None)


def cost_of(time: TimeEstimate, price: float | None) -> Cost:
    gpu_hours, fail = time.gpu_hours, time.failure_overhead
    return Cost(usd=gpu_hours * price if gpu_hours is not None and price is not None else None,
                usd_per_gpu_hour=price,
                usd_with_failures=gpu_hours * price * (1 + fail)
                if gpu_hours is not None and price is not None and fail is not None else None)


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


def evaluate_safely(sc_or_error: Scenario | GpuplanError, **overrides: Any) -> dict:
    """For batches: a bad item becomes ``{"error": message}`` instead of stopping the batch."""
    if isinstance(sc_or_error, GpuplanError):
        return {"error": str(sc_or_error)}
    try:
        return evaluate(sc_or_error, **overrides).to_json()
    except GpuplanError as err:
        return {"error": str(err)}
