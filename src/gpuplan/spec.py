"""The inputs of every prediction: hardware, training job and parallel layout.

Three small immutable values (Calculon's split of system / application / execution), each
validated when it is built; ``check_layout`` holds the rules that need all of them together.
The model itself is ``gpuplan.modelspec.ModelSpec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from gpuplan.errors import GpuplanError
from gpuplan.modelspec import ModelSpec

Precision = Literal["bf16", "fp16", "bf16-pure", "fp8", "fp32"]
Optimizer = Literal["adamw", "adam", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"]
Method = Literal["full", "lora", "qlora"]
Recompute = Literal["none", "selective", "selective-op", "full"]
PPSchedule = Literal["1f1b", "interleaved", "zero-bubble", "gpipe"]
Offload = Literal["none", "optimizer", "params"]
Attention = Literal["flash", "eager"]
OptimizerImpl = Literal["fused", "foreach"]
Zero3Gather = Literal["layer", "module", "tensor-sync"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
METHODS: tuple[str, ...] = get_args(Method)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
PP_SCHEDULES: tuple[str, ...] = get_args(PPSchedule)
OFFLOADS: tuple[str, ...] = get_args(Offload)
ATTENTIONS: tuple[str, ...] = get_args(Attention)
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
ZERO3_GATHERS: tuple[str, ...] = get_args(Zero3Gather)
LORA_TARGETS_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _choice(value: str, allowed: tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise GpuplanError(f"{key}: {value!r} is not one of {', '.join(allowed)}")


def _positive(value: float, key: str, *, integer: bool = True) -> None:
    if integer and (isinstance(value, bool) or not isinstance(value, int)):
        raise GpuplanError(f"{key} must be a whole number, got {value!r}")
    if value <= 0:
        raise GpuplanError(f"{key} must be positive, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """An interconnect from the catalogue (``catalog/fabrics.json``), in SI units."""

    id: str
    name: str
    kind: Literal["scale_up", "scale_out"]
    bytes_per_s_per_gpu: float | None = None  # scale-up: per GPU, per direction
    domain_gpus: int | None = None            # scale-up: GPUs in one domain
    link_bytes_per_s: float | None = None     # scale-out: one link, per direction
    links_per_node: int | None = None         # scale-out: NICs per node
    latency_s: float | None = None
    efficiency: float | None = None           # achievable share of line rate (cited)
    source: str = ""

    def node_bytes_per_s(self) -> float:
        """Scale-out bandwidth of one node, per direction."""
        return (self.link_bytes_per_s or 0.0) * (self.links_per_node or 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class GPU:
    """A GPU type from the catalogue (``catalog/gpus.json``), in SI units."""

    id: str
    name: str
    vendor: str
    memory_bytes: int            # datasheet capacity (GiB on the datasheet → bytes)
    usable_memory_bytes: int     # what the driver reports to the framework
    memory_bw_bytes_per_s: float
    peak_flops: dict[str, float]  # dense FLOP/s by precision: fp32, tf32, bf16, fp16, fp8, fp4
    scale_up: str
    scale_up_bytes_per_s: float
    gpus_per_node: int
    scale_up_domain: int
    tdp_w: float
    price_usd_per_gpu_hour: float | None
    price_date: str | None
    source: str
    usable_memory_measured: bool = True
    architecture: str = ""
    sm_count: int = 108
    aliases: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    gpu: GPU
    gpus: int
    gpus_per_node: int
    scale_up: Fabric
    scale_out: Fabric | None
    price_per_gpu_hour: float | None
    power_limit_w: float | None = None  # a board power cap below TDP lowers the sustained clock
    memory_factor: float = 1.0   # measured/predicted peak memory from `gpuplan calibrate` (1 = none)
    compute_factor: float = 1.0  # measured/predicted throughput from `gpuplan calibrate` (1 = none)
    host_memory_bytes: float | None = None  # CPU memory per node, for offload (unchecked when unknown)

    def __post_init__(self) -> None:
        _positive(self.gpus, "hardware.gpus")
        if self.power_limit_w is not None and self.power_limit_w <= 0:
            raise GpuplanError(f"hardware.power_limit_w must be positive, got {self.power_limit_w}")
        _positive(self.gpus_per_node, "hardware.gpus_per_node")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise GpuplanError(
                f"hardware.gpus={self.gpus} is more than one node but not a multiple of "
                f"gpus_per_node={self.gpus_per_node}: use {self.gpus // self.gpus_per_node * self.gpus_per_node} "
                f"or {(self.gpus // self.gpus_per_node + 1) * self.gpus_per_node}")
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise GpuplanError(f"hardware.price_per_gpu_hour must be >= 0, got {self.price_per_gpu_hour}")

    @property
    def nodes(self) -> int:
        return max(1, -(-self.gpus // self.gpus_per_node))


# Upper bounds of the training job: far above any published run, low enough that a typo
# (1e15 for 1e5) or a missing unit is an error instead of a nonsense answer.
MAX_SEQ_LEN = 2**24        # 16.7M tokens per sequence (the longest-context models: ~10M)
MAX_GLOBAL_BATCH = 2**20   # 1M sequences per step (Llama 3 405B: 2,048; plan enumerates its divisors)
MAX_TOKENS = 1e17          # 100 quadrillion tokens (frontier pretraining: ~4e13)
MAX_STEPS = 10**9          # optimizer steps (long pretraining runs: ~1e6)
MAX_LORA_RANK = 2**16      # and never above the smallest targeted matrix dimension (scenario.py)


def _at_most(value: float, limit: float, key: str, fix: str) -> None:
    if value > limit:
        raise GpuplanError(f"{key} = {value:,.0f} is more than the limit {limit:,.0f}: {fix}")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Training:
    """The training job. Hashed by identity (``eq=False``): the planner's caches key on it."""

    seq_len: int = 4096
    global_batch: int | None = None   # sequences per optimizer step; None: dp × micro_batch
    tokens: float | None = None       # total tokens to train
    steps: int | None = None
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "fused"  # fused (torchtitan, Megatron, HF adamw_torch_fused) | foreach
    method: Method = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = LORA_TARGETS_ALL
    attention: Attention = "flash"
    dropout: float = 0.0
    activation_factor: float = 1.0  # traced/predicted activations from `gpuplan trace --calibrate` (1 = none)

    def __post_init__(self) -> None:
        _positive(self.seq_len, "training.seq_len")
        _at_most(self.seq_len, MAX_SEQ_LEN, "training.seq_len", "give the sequence length in tokens, e.g. 8192")
        _positive(self.activation_factor, "training.activation_factor", integer=False)
        if self.global_batch is not None:
            _positive(self.global_batch, "training.global_batch")
            _at_most(self.global_batch, MAX_GLOBAL_BATCH, "training.global_batch",
                     "give sequences per optimizer step, e.g. 512 (or global_batch_tokens: 4,194,304)")
        if self.tokens is not None:
            if not self.tokens > 0:
                raise GpuplanError(f"training.tokens must be positive, got {self.tokens}")
            if self.tokens > MAX_TOKENS:
                raise GpuplanError(f"training.tokens = {self.tokens:.3g} is more than the limit {MAX_TOKENS:.0e}: "
                                   "give the tokens to train, e.g. 15T")
        if self.steps is not None:
            _positive(self.steps, "training.steps")
            _at_most(self.steps, MAX_STEPS, "training.steps", "give optimizer steps, e.g. 100000")
        _choice(self.precision, PRECISIONS, "training.precision")
        _choice(self.optimizer, OPTIMIZERS, "training.optimizer")
        _choice(self.optimizer_impl, OPTIMIZER_IMPLS, "training.optimizer_impl")
        _choice(self.method, METHODS, "training.method")
        _choice(self.attention, ATTENTIONS, "training.attention")
        _positive(self.lora_rank, "training.lora_rank")
        _at_most(self.lora_rank, MAX_LORA_RANK, "training.lora_rank", "LoRA ranks are small, e.g. 16 or 64")
        if not self.lora_targets:
            raise GpuplanError("training.lora_targets is empty: name at least one of "
                               f"{', '.join(LORA_TARGETS_ALL)}, or 'all'")
        for t in self.lora_targets:
            _choice(t, LORA_TARGETS_ALL, "training.lora_targets")
        if len(set(self.lora_targets)) != len(self.lora_targets):
            dup = sorted({t for t in self.lora_targets if self.lora_targets.count(t) > 1})
            raise GpuplanError(f"training.lora_targets names {', '.join(dup)} more than once: list each target once")
        if not 0.0 <= self.dropout < 1.0:
            raise GpuplanError(f"training.dropout must be in [0, 1), got {self.dropout}")


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
