"""The parallel layout: a frozen value checked on construction by the rules table (spec/rules.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError
from gpuplan.spec._checks import choice as _choice
from gpuplan.spec._checks import positive as _positive
from gpuplan.spec._fast import maker
from gpuplan.spec.hardware import Hardware
from gpuplan.spec.job import (
    OFFLOADS,
    PP_SCHEDULES,
    RECOMPUTE_MODULES,
    RECOMPUTES,
    ZERO3_GATHERS,
    Offload,
    PPSchedule,
    Recompute,
    Training,
    Zero3Gather,
)
from gpuplan.spec.model import ModelSpec
from gpuplan.spec.rules import Context, check

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
    # expert all-to-all of one micro-batch under another's compute (Megatron-Core
    # --overlap-moe-expert-parallel-comm; DeepSeek-V3's DualPipe)
    ep_overlap: bool = False
    # with recompute full: recompute every k-th block only, the others keep their activations
    # (torchtitan's 'selective layer' AC, selective_ac_option = k; Megatron's block method
    # recomputes the first N layers of a stage, the same share for N = layers / k)
    recompute_every: int = 1
    # the experts' tensor parallelism as given (Megatron-Core --expert-tensor-parallel-size, torchtitan's
    # expert_tensor_parallel_degree): 1 (MoE parallel folding) or tp; None: ``expert_tp_of`` reads it from the degrees
    etp: int | None = None
    # with recompute selective: the modules recomputed (Megatron-Core's recompute_modules; () = its default,
    # core_attn): model/recompute_modules.py
    recompute_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        values = self.values()
        check_layout_fields(values)
        check(Context(lay=values))

    @classmethod
    def unchecked(cls, **kw: Any) -> Layout:
        """A layout the planner built from valid parts: skips ``__post_init__`` (its hot path)."""
        return _unchecked(**kw)

    @classmethod
    def for_world(cls, gpus: int, **fields: Any) -> Layout:
        """A layout of ``gpus`` GPUs: dp derived as gpus / (tp·pp·cp) when not given (torchtitan's
        ``ParallelDims`` with dp = -1), sequence parallelism on when tp > 1 unless given, the
        interleaved schedule when virtual stages are given; checked on construction."""
        tp, pp, cp = fields.get("tp", 1), fields.get("pp", 1), fields.get("cp", 1)
        if fields.get("dp") is None:
            if gpus % (tp * pp * cp):
                raise GpuplanError(f"tp×pp×cp = {tp}×{pp}×{cp} = {tp * pp * cp} does not divide hardware.gpus = "
                                   f"{gpus}: choose degrees whose product divides the GPU count")
            fields["dp"] = gpus // (tp * pp * cp)
        fields.setdefault("sequence_parallel", tp > 1)
        if fields.get("virtual_stages", 1) > 1:
            fields.setdefault("pp_schedule", "interleaved")
        if fields.get("pp_schedule") == "interleaved" and pp > 1:
            # the documented default: two model chunks per stage (what the search tries, Megatron's
            # --num-layers-per-virtual-pipeline-stage = layers / (2·pp)), for memory and time alike
            fields.setdefault("virtual_stages", INTERLEAVED_DEFAULT_CHUNKS)
        return cls(**fields)

    def values(self) -> dict[str, Any]:
        """Every field by name (what the rules table reads)."""
        return {name: getattr(self, name) for name, _ in _LAYOUT_DEFAULTS}

    @property
    def recompute_share(self) -> float:
        """The share of blocks whose forward runs again under ``recompute: full`` (1 = all)."""
        return 1.0 / self.recompute_every if self.recompute == "full" else 0.0

    @property
    def recompute_mode(self) -> str:
        """``recompute`` as the memory and time models read it: selective with its modules named where they are
        not Megatron-Core's default (core_attn alone), e.g. ``selective:layernorm+moe_act``."""
        if not self.recompute_modules:  # the planner's hot path
            return self.recompute
        return recompute_mode_of(self.recompute, self.recompute_modules)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def expert_tp(self) -> int:
        """Tensor parallelism inside an expert: tp (Megatron's default, experts over the data-parallel ranks), or 1
        where ep spans the tensor-parallel ranks too (Megatron-Core MoE parallel folding, Liu et al. 2025,
        arXiv:2504.14960: expert-tensor-parallel 1, experts over tp × cp × dp): the only reading of an ep that does
        not divide dp × cp — or as given (``etp``)."""
        return self.etp if self.etp is not None else expert_tp_of(self.dp, self.cp, self.tp, self.ep)

    @property
    def folded_etp(self) -> int | None:
        """``expert_tp`` where it is not tp (folded), else None: what the per-rank model caches key on."""
        return None if self.expert_tp == self.tp else self.expert_tp

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same experts (the expert-data-parallel group): dp × cp / ep, folded tp × dp × cp / ep."""
        return self.dp * self.cp * (self.tp // self.expert_tp) // self.ep

    @property
    def shard_group(self) -> int:
        """Ranks that share one copy of the ZeRO-sharded state (dp × cp, or the hybrid group)."""
        return self.zero_group if self.zero_group is not None else self.dp * self.cp


BY_MODULE_PREFIX = "selective:"  # a recompute mode that names its modules (``recompute_mode_of``)


def recompute_mode_of(recompute: str, modules: tuple[str, ...]) -> str:
    """``Layout.recompute_mode`` from the two fields."""
    if recompute != "selective" or not modules or tuple(modules) == ("core_attn",):
        return recompute
    return BY_MODULE_PREFIX + "+".join(sorted(set(modules)))


def recompute_fields(mode: str) -> dict[str, object]:
    """The layout fields of a recompute mode (``recompute_mode_of`` read back): selective by module as recompute and
    recompute_modules."""
    if mode.startswith(BY_MODULE_PREFIX):
        return {"recompute": "selective", "recompute_modules": tuple(mode[len(BY_MODULE_PREFIX):].split("+"))}
    return {"recompute": mode}


def expert_tp_of(dp: int, cp: int, tp: int, ep: int) -> int:
    """``Layout.expert_tp`` from the degrees alone: tp where ep divides dp × cp, else 1 (MoE parallel folding)."""
    return tp if (dp * cp) % ep == 0 else 1


def expert_tp_in(lay: dict[str, Any]) -> int:
    """``Layout.expert_tp`` of a layout's JSON (the exports read it): its ``etp`` as given, else the degrees'."""
    etp = lay.get("etp")
    return int(etp) if etp is not None else expert_tp_of(lay["dp"], lay["cp"], lay["tp"], lay["ep"])


_LAYOUT_DEFAULTS = tuple((f.name, f.default) for f in fields(Layout))
LAYOUT_FIELDS = frozenset(name for name, _ in _LAYOUT_DEFAULTS)


_unchecked = maker(Layout)
INTERLEAVED_DEFAULT_CHUNKS = 2


def check_layout_fields(values: dict[str, Any]) -> None:
    """The rules each layout field obeys on its own, for the fields present in ``values`` — so a
    partial layout (what the user fixed; ``plan`` searches the rest) is checked when it is read."""
    for key in ("dp", "tp", "pp", "cp", "ep", "micro_batch", "virtual_stages", "recompute_every"):
        if key in values:
            _positive(values[key], f"layout.{key}")
    if values.get("etp") is not None:
        _positive(values["etp"], "layout.etp")
    if "zero" in values and (values["zero"] not in (0, 1, 2, 3) or isinstance(values["zero"], bool)):
        raise GpuplanError(f"layout.zero must be 0, 1, 2 or 3, got {values['zero']!r}")
    for key, allowed in (("recompute", RECOMPUTES), ("pp_schedule", PP_SCHEDULES), ("offload", OFFLOADS),
                         ("zero3_gather", ZERO3_GATHERS)):
        if key in values:
            _choice(values[key], allowed, f"layout.{key}")
    if values.get("zero_group") is not None:
        _positive(values["zero_group"], "layout.zero_group")
    for module in values.get("recompute_modules") or ():
        _choice(module, RECOMPUTE_MODULES, "layout.recompute_modules")


def check_layout(model: ModelSpec, hw: Hardware, training: Training, layout: Layout) -> None:
    """Rules that need model, hardware, training and layout together (spec/rules.py). Raises GpuplanError."""
    check(Context(lay=layout.values(), model=model, seq_len=training.seq_len, gpus=hw.gpus,
                  global_batch=training.global_batch, in_backward=training.optimizer_in_backward,
                  act_offload=training.activation_offloading, int8_base=training.method == "lora-int8",
                  pairs=training.preference is not None))


def check_fixed_layout(sc: Scenario) -> None:
    """The rules for the fields a scenario fixes while the search picks the rest (``plan``, ``fit``):
    a fixed field no layout can satisfy is named, not dropped."""
    check(Context(lay=sc.layout, model=sc.model, seq_len=sc.training.seq_len,
                  in_backward=sc.training.optimizer_in_backward, act_offload=sc.training.activation_offloading,
                  int8_base=sc.training.method == "lora-int8", pairs=sc.training.preference is not None))
