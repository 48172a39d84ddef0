"""The training job: sequence, batch, length, precision, optimizer, method (full / LoRA / QLoRA)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal, get_args

from gpuplan.errors import GpuplanError
from gpuplan.spec._checks import at_most as _at_most
from gpuplan.spec._checks import choice as _choice
from gpuplan.spec._checks import positive as _positive
from gpuplan.spec._value import ValueHashed, seal
from gpuplan.spec.model import ALL_LINEAR, NO_EXPERTS

Precision = Literal["bf16", "fp16", "bf16-pure", "fp8", "fp32"]
Optimizer = Literal["adamw", "adam", "adamw-8bit", "adamw-4bit", "sgd", "sgd-momentum", "adafactor", "lion",
                    "lion-8bit", "muon", "ademamix", "ademamix-8bit"]
# lora-int8: LoRA over a base loaded in 8 bits (bitsandbytes' LLM.int8, transformers' load_in_8bit)
Method = Literal["full", "lora", "qlora", "lora-int8"]
ADAPTERS = ("lora", "qlora", "lora-int8")  # the methods that train adapters over a frozen base
# preference optimization on pairs (a chosen and a rejected sequence run as one batch: TRL's
# DataCollatorForPreference, concatenated_forward before 1.0):
# DPO (Rafailov et al. 2023) and IPO against a frozen reference model, ORPO / SimPO / CPO without one
PREFERENCES = ("dpo", "ipo", "orpo", "simpo", "cpo")
WITH_REFERENCE = ("dpo", "ipo")
Recompute = Literal["none", "selective", "selective-op", "full"]
# Megatron-Core's selective recomputation by module (TransformerConfig.recompute_modules, with
# recompute_granularity "selective"; megatron/core/transformer/transformer_config.py): core_attn (its default), the
# MoE experts' activation function, the input and pre-MLP layernorms, MLA's up-projections, the dense MLP, the whole
# MoE layer, the shared experts (model/recompute_modules.py says what each drops and costs)
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
PPSchedule = Literal["1f1b", "interleaved", "zero-bubble", "gpipe", "dualpipe"]
Offload = Literal["none", "optimizer", "params"]
# flash: FlashAttention-2 (SDPA, TE); flash1: FlashAttention v1; flash1-triton: its Triton kernel (flash-attn 1.x
# flash_attn_triton.py, llm-foundry's attn_impl: triton)
Attention = Literal["flash", "flash1", "flash1-triton", "eager"]
# The training software: what it fuses, overlaps and can run (catalog/frameworks.json cites each).
Framework = Literal["generic", "megatron-lm", "megatron-core", "torchtitan", "deepspeed", "pytorch-fsdp", "hf-trainer",
                    "torchtune", "nanotron", "unsloth"]
OptimizerImpl = Literal["fused", "foreach", "paged"]
# How fp8 GEMM inputs are scaled (catalog/matmul.json fp8_scaling_overhead cites each one's casts):
# tensorwise / rowwise / rowwise_with_gw_hp dynamic scaling (torchao, torchtitan), delayed scaling
# (Transformer Engine's DelayedScaling, Megatron-Core's default), mxfp8 (Blackwell block scales); the 4-bit
# recipes on the same low-precision path: nvfp4 (E2M1 with an E4M3 scale per 16 elements and a per-tensor scale,
# Blackwell) and mxfp4 (E2M1 with an E8M0 scale per 32, Blackwell and CDNA4) — their linears' GEMMs at the fp4 peak
Fp8Recipe = Literal["tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed", "mxfp8", "nvfp4", "mxfp4"]
# the recipes whose GEMMs run in 4-bit, and the matmul precision each runs them in (model/compute.py ``device``:
# NVFP4 as ``fp4``; MXFP4 on the same tensor cores at its own measured share, catalog/matmul.json)
FP4_GEMM: dict[str, str] = {"nvfp4": "fp4", "mxfp4": "mxfp4"}
FP4_RECIPES: tuple[str, ...] = tuple(FP4_GEMM)
Zero3Gather = Literal["layer", "module", "tensor-sync"]
# The dtype gradients are kept and accumulated in under bf16/fp8 mixed precision: fp32 (Megatron's main_grad
# buffers, PyTorch autocast's fp32 parameters) or the parameters' own 16-bit dtype (the ZeRO paper's 2Ψ)
GradDtype = Literal["fp32", "param"]
# CUDA graphs (training.cuda_graphs): none; per layer or module (Transformer Engine's make_graphed_callables,
# Megatron-Core's CudaGraphManager: --cuda-graph-impl transformer_engine | local); the whole forward-backward
# iteration (Megatron-Core's FullCudaGraphWrapper: --cuda-graph-impl full_iteration)
CudaGraphs = Literal["none", "layer", "full"]
# the model's kernels: as the framework runs them, or Liger Kernel's patch of a Hugging Face model (Trainer
# use_liger_kernel=True, Axolotl and LLaMA-Factory's liger options)
Kernels = Literal["framework", "liger"]
# the expert exchange of a MoE layer (model/ep_comm.py): an NCCL all-to-all, or DeepEP's node-deduplicating kernels
MoeDispatcher = Literal["alltoall", "deepep"]
MOE_DISPATCHERS: tuple[str, ...] = get_args(MoeDispatcher)
# the profiles that run Hugging Face transformers models, which Liger patches
LIGER_FRAMEWORKS = ("generic", "hf-trainer", "pytorch-fsdp", "deepspeed")
PRECISIONS: tuple[str, ...] = get_args(Precision)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
METHODS: tuple[str, ...] = get_args(Method)
RECOMPUTES: tuple[str, ...] = get_args(Recompute)
PP_SCHEDULES: tuple[str, ...] = get_args(PPSchedule)
OFFLOADS: tuple[str, ...] = get_args(Offload)
ATTENTIONS: tuple[str, ...] = get_args(Attention)
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
OPTIMIZER_IMPLS: tuple[str, ...] = get_args(OptimizerImpl)
# bitsandbytes.optim's paged classes: PagedAdam, PagedAdamW, PagedAdamW8bit/32bit, PagedLion (8/32-bit)
PAGED_OPTIMIZERS = ("adam", "adamw", "adamw-8bit", "lion", "lion-8bit", "ademamix", "ademamix-8bit")
FP8_RECIPES: tuple[str, ...] = get_args(Fp8Recipe)
GRAD_DTYPES: tuple[str, ...] = get_args(GradDtype)
ZERO3_GATHERS: tuple[str, ...] = get_args(Zero3Gather)
CUDA_GRAPHS: tuple[str, ...] = get_args(CudaGraphs)
KERNELS: tuple[str, ...] = get_args(Kernels)
LORA_TARGETS_ALL = ALL_LINEAR  # PEFT's "all-linear" (spec/model.py)
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a linear's leaf name (PEFT matches the last part)


# Upper bounds of the training job: far above any published run, low enough that a typo
# (1e15 for 1e5) or a missing unit is an error instead of a nonsense answer.
MAX_SEQ_LEN = 2**24        # 16.7M tokens per sequence (the longest-context models: ~10M)
MAX_GLOBAL_BATCH = 2**20   # 1M sequences per step (Llama 3 405B: 2,048; plan enumerates its divisors)
MAX_TOKENS = 1e17          # 100 quadrillion tokens (frontier pretraining: ~4e13)
MAX_STEPS = 10**9          # optimizer steps (long pretraining runs: ~1e6)
MAX_LORA_RANK = 2**16      # and never above the smallest targeted matrix dimension (scenario.py)
# Share of a GPU's memory kept free when deciding what fits (training.headroom), beyond the upper end of
# the peak's 80 % interval, which already carries the prediction's own spread (catalog/intervals.json): 0 by
# default — a margin of one's own (a longer batch in the data, a library's workspace) is the user's to add.
DEFAULT_SEQ_LEN = 4096  # a model with a shorter learned position table defaults to its length (io/scenario.py)
DEFAULT_HEADROOM = 0.0


def check_lora_target_names(names: tuple[str, ...]) -> None:
    """``training.lora_targets``: at least one, each a module name (or the ``NO_EXPERTS`` marker), none twice."""
    if not names:
        raise GpuplanError("training.lora_targets is empty: name at least one linear layer (e.g. "
                           f"{', '.join(LORA_TARGETS_ALL)}), or all-linear")
    for t in names:
        if t != NO_EXPERTS and (not isinstance(t, str) or not _MODULE_NAME.fullmatch(t)):
            raise GpuplanError(f"training.lora_targets: {t!r} is not a module name: name linear layers such as "
                               "q_proj, v_proj, or all-linear")
    if len(set(names)) != len(names):
        dup = sorted({t for t in names if names.count(t) > 1})
        raise GpuplanError(f"training.lora_targets names {', '.join(dup)} more than once: list each target once")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Training(ValueHashed):
    """The training job. Compared and hashed by content, the hash computed once (spec/_value.py):
    the planner's caches key on it."""

    seq_len: int = DEFAULT_SEQ_LEN
    global_batch: int | None = None   # sequences per optimizer step; None: dp × micro_batch
    tokens: float | None = None       # total tokens to train
    steps: int | None = None
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    # fused (torchtitan, Megatron, HF adamw_torch_fused) | foreach | paged (bitsandbytes' paged optimizers: the states
    # in CUDA unified memory, outside PyTorch's allocator, paged to the host when the GPU runs short)
    optimizer_impl: OptimizerImpl = "fused"
    method: Method = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = LORA_TARGETS_ALL
    # the adapters' dropout on their input (PEFT LoraConfig.lora_dropout, torchtune lora_dropout; both default 0):
    # each adapter then keeps its dropout mask (model/activations.py lora_terms)
    lora_dropout: float = 0.0
    # DoRA (Liu et al. 2024, arXiv:2402.09353; PEFT LoraConfig.use_dora): each adapted weight's column norms rescaled
    # by a trained magnitude — its extra work and memory in model/dora.py
    dora: bool = False
    # a preference run (``PREFERENCES``): global_batch counts sequences, two per pair (io/preference.py reads pairs)
    preference: str | None = None
    attention: Attention = "flash"
    framework: Framework = "generic"
    compile: bool = False  # torch.compile of the model (torchtitan, pytorch-fsdp)
    # with compile: the loss compiled too (torchtitan's compile.components default; a Hugging Face model's loss runs in
    # its forward) — False: the model only (scenario ``compile: model``), the loss eager over fp32 logits
    compile_loss: bool = True
    # each parameter's optimizer step runs in backward as its gradient is made, which is then freed (torchtune's
    # optimizer_in_bwd): one micro-batch per step, no pipeline, full fine-tune
    optimizer_in_backward: bool = False
    # saved activations to host memory in forward, back in backward (torchtune enable_activation_offloading,
    # Megatron-Core cpu_offloading): no pipeline
    activation_offloading: bool = False
    # CUDA graphs replayed each step: their static buffers are not modelled; the peak's interval carries the
    # documented allowance (model/graphs.py cuda_graph_allowance)
    cuda_graphs: CudaGraphs = "none"
    kernels: Kernels = "framework"  # liger: Liger Kernel's RMSNorm, RoPE, SwiGLU and fused linear cross-entropy
    fp8_recipe: Fp8Recipe | None = None  # precision fp8 only; None: the framework's documented default
    grad_dtype: GradDtype | None = None  # bf16/fp8 mixed precision only; None: the framework's documented choice
    moe_dispatcher: MoeDispatcher | None = None  # None: DeepSeek's kernels under DualPipe, else the all-to-all
    dropout: float = 0.0
    # precision fp32 with its matmuls on the TF32 tensor cores (the precision word tf32: torch.backends.cuda.matmul.
    # allow_tf32 / torch.set_float32_matmul_precision("high")); off, PyTorch's default since 1.12, fp32 runs its
    # matmuls on the CUDA cores at the fp32 peak
    tf32: bool = False
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; None: what the framework sets (model/allocator.py)
    expandable_segments: bool | None = None
    headroom: float = DEFAULT_HEADROOM  # share of GPU memory kept free: fits means fits with this margin
    _hash: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _positive(self.seq_len, "training.seq_len")
        if self.tf32 and self.precision != "fp32":
            raise GpuplanError(f"training.tf32 puts fp32 matmuls on the TF32 tensor cores; precision is "
                               f"{self.precision}: set precision: fp32 (or tf32), or drop tf32")
        _at_most(self.seq_len, MAX_SEQ_LEN, "training.seq_len", "give the sequence length in tokens, e.g. 8192")
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
        if self.preference is not None:
            _choice(self.preference, PREFERENCES, "training.preference")
            if self.global_batch is not None and self.global_batch % 2:
                raise GpuplanError(f"training.global_batch = {self.global_batch} sequences: a preference run's batch "
                                   "is whole pairs, a chosen and a rejected sequence each — give an even count (a "
                                   "scenario file's global_batch counts pairs)")
        _choice(self.attention, ATTENTIONS, "training.attention")
        _choice(self.framework, FRAMEWORKS, "training.framework")
        _choice(self.cuda_graphs, CUDA_GRAPHS, "training.cuda_graphs")
        _choice(self.kernels, KERNELS, "training.kernels")
        if self.moe_dispatcher is not None:
            _choice(self.moe_dispatcher, MOE_DISPATCHERS, "training.moe_dispatcher")
        if self.kernels == "liger" and self.framework not in LIGER_FRAMEWORKS:
            raise GpuplanError(f"training.kernels: liger patches Hugging Face transformers models, which "
                               f"{self.framework} does not run: use framework {', '.join(LIGER_FRAMEWORKS)}, or drop "
                               "kernels")
        if self.fp8_recipe is not None:
            _choice(self.fp8_recipe, FP8_RECIPES, "training.fp8_recipe")
            if self.precision != "fp8":
                raise GpuplanError(f"training.fp8_recipe ({self.fp8_recipe}) scales fp8 matmuls, but precision is "
                                   f"{self.precision}: set precision: fp8 or drop fp8_recipe")
        if self.grad_dtype is not None:
            _choice(self.grad_dtype, GRAD_DTYPES, "training.grad_dtype")
            if self.precision not in ("bf16", "fp8"):
                raise GpuplanError(f"training.grad_dtype ({self.grad_dtype}) chooses the gradient dtype under bf16/fp8 "
                                   f"mixed precision, but precision is {self.precision}: drop grad_dtype")
        if self.optimizer_in_backward and self.method != "full":
            raise GpuplanError(f"training.optimizer_in_backward steps every trained parameter in backward (torchtune's "
                               f"full fine-tune recipes), but method is {self.method}: drop optimizer_in_backward")
        self._check_methods()
        if not 0.0 <= self.headroom < 0.5:
            raise GpuplanError(f"training.headroom is the share of GPU memory kept free, in [0, 0.5): "
                               f"got {self.headroom} (write 0.05 or 5%)")
        if not 0.0 <= self.dropout < 1.0:
            raise GpuplanError(f"training.dropout must be in [0, 1), got {self.dropout}")
        seal(self)

    def _check_methods(self) -> None:
        """The LoRA fields and the optimizer implementation."""
        _positive(self.lora_rank, "training.lora_rank")
        _at_most(self.lora_rank, MAX_LORA_RANK, "training.lora_rank", "LoRA ranks are small, e.g. 16 or 64")
        check_lora_target_names(self.lora_targets)
        if not 0.0 <= self.lora_dropout < 1.0:
            raise GpuplanError(f"training.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.optimizer_impl == "paged" and self.optimizer not in PAGED_OPTIMIZERS:
            raise GpuplanError(f"training.optimizer_impl paged is bitsandbytes' paged optimizers "
                               f"({', '.join(PAGED_OPTIMIZERS)}), not {self.optimizer}: drop optimizer_impl or pick "
                               "one of those")
        if self.dora and self.method == "full":
            raise GpuplanError("training.dora decomposes LoRA adapters' weights (PEFT use_dora), but method is full: "
                               "drop dora, or set method lora or qlora")
        if self.lora_dropout and self.method == "full":
            raise GpuplanError(f"training.lora_dropout ({self.lora_dropout}) drops the LoRA adapters' input, but "
                               "method is full: drop lora_dropout, or set method lora, qlora or lora-int8")


def has_reference(training: Training) -> bool:
    """Whether a preference run keeps a frozen reference model (DPO, IPO: model/memory.py, model/runtime.py)."""
    return training.preference in WITH_REFERENCE


def quantized_base(training: Training) -> str | None:
    """How the frozen base of an adapter run is stored: "nf4" (QLoRA's 4-bit NormalFloat, bitsandbytes Linear4bit or
    torchao's NF4Tensor), "int8" (bitsandbytes' LLM.int8 Linear8bitLt), None for 16 bits or a full fine-tune."""
    return {"qlora": "nf4", "lora-int8": "int8"}.get(training.method)


def moe_dispatcher_of(tr: Training, pp_schedule: str) -> str:
    """The expert exchange a MoE run makes (model/ep_comm.py): as given, else DeepSeek's kernels (DeepEP) under
    DualPipe, DeepSeek-V3's schedule (arXiv:2412.19437 Sec. 3.2.2), else an NCCL all-to-all."""
    if tr.moe_dispatcher is not None:
        return tr.moe_dispatcher
    return "deepep" if pp_schedule == "dualpipe" else "alltoall"


@lru_cache(maxsize=64)
def per_step(tr: Training) -> Training:
    """``tr`` without what only the run's length reads (tokens, steps): a step's memory and time read neither, so
    the step model's caches key on this — a plan asked again for another token count finds them filled."""
    return tr if tr.tokens is None and tr.steps is None else replace(tr, tokens=None, steps=None)
