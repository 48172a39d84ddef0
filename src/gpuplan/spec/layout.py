"""The parallel layout and ONE table of layout rules (construction, fit and the search use it)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError
from gpuplan.spec._checks import choice as _choice
from gpuplan.spec._checks import positive as _positive
from gpuplan.spec.hardware import Hardware
from gpuplan.spec.job import (
    OFFLOADS,
    PP_SCHEDULES,
    RECOMPUTES,
    ZERO3_GATHERS,
    Offload,
    PPSchedule,
    Recompute,
    Training,
    Zero3Gather,
)
from gpuplan.spec.model import ModelSpec

if TYPE_CHECKING:
    from gpuplan.spec.scenario import Scenario


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0                 # 0 DDP | 1 | 2 | 3 (= FSDP full shard)
    zero_group: int | None = None  # hybrid shard: shard within groups of this many dp ranks
    micro_batch: int = 1
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    pp_schedule: PPSchedule = "1f1b"
    virtual_stages: int = 1
    offload: Offload = "none"
    dp_overlap: bool = True  # gradient reduction overlapped with backward (DDP/FSDP/Megatron-Core default)
    # ZeRO-3 parameter gathers: one per transformer block, prefetched (FSDP, the default) | one per
    # submodule, prefetched (DeepSpeed ZeRO-3) | one per tensor, blocking (DeepSpeed ZeRO-3 of 2021)
    zero3_gather: Zero3Gather = "layer"
    tp_overlap: bool = False  # async TP (torchtitan) / Megatron --tp-comm-overlap: TP collectives under matmuls

    def __post_init__(self) -> None:
        check_layout_fields({name: getattr(self, name) for name, _ in _LAYOUT_DEFAULTS})
        if self.sequence_parallel and self.tp == 1:
            raise GpuplanError("layout.sequence_parallel needs tp > 1: set tp or drop sequence_parallel")
        if self.tp_overlap and not self.sequence_parallel:
            raise GpuplanError("layout.tp_overlap (async tensor parallelism) needs tp > 1 with sequence_parallel: "
                               "set both or drop tp_overlap")
        if self.virtual_stages > 1 and self.pp_schedule != "interleaved":
            raise GpuplanError("layout.virtual_stages > 1 needs pp_schedule: interleaved")
        if self.zero_group is not None and self.zero == 0:
            raise GpuplanError("layout.zero_group (hybrid shard) needs zero 1, 2 or 3")
        if self.offload != "none" and self.zero == 0 and self.offload == "params":
            raise GpuplanError("layout.offload: params needs zero 3 (parameters are offloaded shard by shard)")

    @classmethod
    def unchecked(cls, **kw: Any) -> Layout:
        """A layout the planner built from valid parts: skips ``__post_init__`` (its hot path)."""
        obj = object.__new__(cls)
        for name, default in _LAYOUT_DEFAULTS:
            object.__setattr__(obj, name, kw.get(name, default))
        return obj

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def shard_group(self) -> int:
        """Ranks that share one copy of the ZeRO-sharded state (dp × cp, or the hybrid group)."""
        return self.zero_group if self.zero_group is not None else self.dp * self.cp


_LAYOUT_DEFAULTS = tuple((f.name, f.default) for f in fields(Layout))


def check_layout_fields(values: dict[str, Any]) -> None:
    """The rules each layout field obeys on its own, for the fields present in ``values`` — so a
    partial layout (what the user fixed; ``plan`` searches the rest) is checked when it is read."""
    for key in ("dp", "tp", "pp", "cp", "ep", "micro_batch", "virtual_stages"):
        if key in values:
            _positive(values[key], f"layout.{key}")
    if "zero" in values and (values["zero"] not in (0, 1, 2, 3) or isinstance(values["zero"], bool)):
        raise GpuplanError(f"layout.zero must be 0, 1, 2 or 3, got {values['zero']!r}")
    for key, allowed in (("recompute", RECOMPUTES), ("pp_schedule", PP_SCHEDULES), ("offload", OFFLOADS),
                         ("zero3_gather", ZERO3_GATHERS)):
        if key in values:
            _choice(values[key], allowed, f"layout.{key}")
    if values.get("zero_group") is not None:
        _positive(values["zero_group"], "layout.zero_group")


def check_layout(model: ModelSpec, hw: Hardware, training: Training, layout: Layout) -> None:
    """Rules that need model, hardware, training and layout together. Raises GpuplanError."""
    if layout.world != hw.gpus:
        raise GpuplanError(
            f"layout dp×tp×pp×cp = {layout.dp}×{layout.tp}×{layout.pp}×{layout.cp} = {layout.world} "
            f"but hardware.gpus = {hw.gpus}: make the product equal the GPU count (or omit dp to derive it)")
    if model.n_heads % layout.tp:
        raise GpuplanError(f"layout.tp={layout.tp} does not divide the {model.n_heads} attention heads of "
                           f"{model.name}: use a tp that divides {model.n_heads}")
    kv = model.n_kv_heads
    if kv % layout.tp and layout.tp % kv:
        raise GpuplanError(f"layout.tp={layout.tp} and the {kv} key/value heads of {model.name} do not divide "
                           f"either way: use a tp that divides {kv} or a multiple of it")
    stages = layout.pp * layout.virtual_stages
    if stages > model.n_layers:
        raise GpuplanError(f"layout pp×virtual_stages = {stages} is more than the {model.n_layers} layers of "
                           f"{model.name}: use at most {model.n_layers} pipeline chunks")
    if layout.ep > 1 and not model.moe:
        raise GpuplanError(f"layout.ep={layout.ep} but {model.name} has no experts: set ep: 1")
    if model.moe and model.n_experts % layout.ep:
        raise GpuplanError(f"layout.ep={layout.ep} does not divide the {model.n_experts} experts: use a divisor")
    if (layout.dp * layout.cp) % layout.ep:
        raise GpuplanError(f"layout.ep={layout.ep} must divide dp×cp = {layout.dp * layout.cp} "
                           "(experts are spread over data-parallel ranks)")
    if training.seq_len % layout.cp:
        raise GpuplanError(f"layout.cp={layout.cp} does not divide seq_len={training.seq_len}")
    if layout.sequence_parallel and training.seq_len % layout.tp:
        raise GpuplanError(f"sequence_parallel: tp={layout.tp} does not divide seq_len={training.seq_len}")
    if layout.zero_group is not None:
        group = layout.dp * layout.cp
        if group % layout.zero_group or layout.zero_group > group:
            raise GpuplanError(f"layout.zero_group={layout.zero_group} must divide dp×cp = {group}")
    if training.global_batch is not None and training.global_batch % (layout.dp * layout.micro_batch):
        raise GpuplanError(
            f"training.global_batch={training.global_batch} is not a multiple of dp×micro_batch = "
            f"{layout.dp}×{layout.micro_batch}: change global_batch or micro_batch")


def divisors(n: int) -> list[int]:
    """Ascending divisors of ``n`` in O(√n) (a global batch of 2^20 sequences is a million candidates)."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def tp_splits_heads(model: ModelSpec, t: int) -> bool:
    """tp divides the attention heads, and the KV heads divide tp or tp divides them (check_layout's rule)."""
    return model.n_heads % t == 0 and (model.n_kv_heads % t == 0 or t % model.n_kv_heads == 0)


def ep_choices(model: ModelSpec, group: int) -> list[int]:
    """Expert-parallel degrees over ``group`` = dp×cp ranks that divide the experts (1 for a dense model)."""
    return [e for e in divisors(group) if model.n_experts % e == 0] if model.moe else [1]


def check_fixed_layout(sc: Scenario) -> None:
    """The model-dependent rules of ``check_layout`` for the fields a scenario fixes while the search
    picks the rest (``plan``, ``fit``): a fixed field no layout can satisfy is named, not dropped."""
    fixed, m = sc.layout, sc.model
    name = m.name
    tp, ep, cp = fixed.get("tp"), fixed.get("ep"), fixed.get("cp")
    if tp is not None and not tp_splits_heads(m, tp):
        raise GpuplanError(f"layout.tp={tp} does not split the {m.n_heads} attention heads ({m.n_kv_heads} "
                           f"key/value heads) of {name}: use a tp that divides them")
    if ep is not None and ep > 1 and not m.moe:
        raise GpuplanError(f"layout.ep={ep} but {name} has no experts: set ep: 1")
    if ep is not None and m.moe and m.n_experts % ep:
        raise GpuplanError(f"layout.ep={ep} does not divide the {m.n_experts} experts of {name}: use a divisor")
    if cp is not None and sc.training.seq_len % cp:
        raise GpuplanError(f"layout.cp={cp} does not divide seq_len={sc.training.seq_len}")
    pp, v = fixed.get("pp", 1), fixed.get("virtual_stages", 1)
    if pp * v > m.n_layers:
        raise GpuplanError(f"layout pp×virtual_stages = {pp * v} is more than the {m.n_layers} layers of {name}")
    if v > 1 and fixed.get("pp_schedule", "interleaved") != "interleaved":
        raise GpuplanError("layout.virtual_stages > 1 needs pp_schedule: interleaved")
    zero = fixed.get("zero")
    if zero is not None:
        if fixed.get("zero_group") is not None and zero == 0:
            raise GpuplanError("layout.zero_group (hybrid shard) needs zero 1, 2 or 3")
        if fixed.get("offload") == "params" and zero != 3:
            raise GpuplanError("layout.offload: params needs zero 3 (parameters are offloaded shard by shard)")
    if tp == 1 and fixed.get("sequence_parallel"):
        raise GpuplanError("layout.sequence_parallel needs tp > 1: set tp or drop sequence_parallel")
    if fixed.get("tp_overlap") and (tp == 1 or fixed.get("sequence_parallel") is False):
        raise GpuplanError("layout.tp_overlap (async tensor parallelism) needs tp > 1 with sequence_parallel: "
                           "set both or drop tp_overlap")
