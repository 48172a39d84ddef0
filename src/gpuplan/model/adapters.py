"""The work of a LoRA/QLoRA layer's adapters beside its frozen base matmuls, as the stack runs them: two thin
GEMMs per adapted linear and each direction (x·A, then ·B; backward the input and weight gradients of both), and
the memory-bound kernels around them, counted from the code that runs them (bytes per token; compute.py times the
GEMMs at the GEMM model's rates and the bytes at the streaming rate with each kernel's fixed time).

PEFT (``lora.Linear.forward``, peft 0.19: ``result = base_layer(x)``; ``x = self._cast_input_dtype(x,
lora_A.weight.dtype)``; ``result = result + lora_B(lora_A(dropout(x))) * scaling``; ``result.to(torch_result_dtype)``)
keeps its adapters in fp32 beside a 16-bit base (``get_peft_model(..., autocast_adapter_dtype=True)``, the default):

* the input cast to fp32 (read 2 B, write 4 B per element; backward the gradient cast back), under autocast (mixed
  precision) cast again to 16 bits for the GEMM (4 + 2 B; backward 2 + 4 B), without autocast (pure bf16) the GEMMs
  in fp32;
* the scaling (read and write the rank-r product's output) and the add into the base output (read two, write one);
  with fp32 adapters and no autocast the sum is fp32 and ``.to(bf16)`` copies it back (read 4, write 2; backward the
  gradient cast up and, at the add, down again for the base branch);
* backward, the input's gradient accumulated from the base and the adapter branch (read two, write one).

Where the adapters compute in the base's dtype and read its input itself — torchtune's ``LoRALinear`` (``out +
lora_b(lora_a(dropout(x))) * alpha / rank``), Megatron-Core/NeMo's ``LoRALinear`` (``linear_output +
self.adapter(x)``, the adapter scaling its output), PEFT under FSDP/DeepSpeed 16-bit parameters (model/kept.py
``adapters_in_16_bits``) or fp32 training — there is no cast. Unsloth's ``matmul_lora`` (unsloth/kernels/utils.py,
which its fast_lora.py autograd functions call) fuses the rest: ``XA = X @ A``; ``out.addmm_(XA, B, alpha=s)`` —
the second GEMM accumulates into the base output (reading it once more) with the scaling as its alpha, and backward
adds the adapter's input gradient into dX by ``addmm_`` the same way: no elementwise kernel. Dropout on the
adapters' input (``lora_dropout`` > 0): one more read and write of it and a 1-byte mask, each way. Under
torch.compile the pointwise ops on each side of the adapter GEMMs fuse (``_compiled``).

Every byte is timed at the streaming rate from HBM: where the tensors fit the L2 cache (a few hundred tokens per
micro-batch) the adapters cost less (README). The experts' own adapters (a MoE model's expert linears under
all-linear) count in memory, not here: their tokens are routed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.catalog.framework_memory import lora_fused, lora_keeps_shared_input
from gpuplan.model.dora import COMPOSE_KERNELS, DoraPass, adapted, dora_compose, dora_pass
from gpuplan.model.kept import adapters_in_16_bits, kbit_upcast
from gpuplan.spec import Training
from gpuplan.spec.model import LayerGroup

# how a stack runs the adapters (``Adapters.kind``)
FUSED = "fused"            # Unsloth: x·A, then out.addmm_(xA, B, alpha=s); backward dX.addmm_ the same way
SHARED = "shared"          # adapters in the base's dtype on its input: scaling and add eager
CAST_AUTOCAST = "cast-autocast"  # PEFT's fp32 adapters, the input cast up, autocast casting it down for the GEMMs
CAST_FP32 = "cast-fp32"    # PEFT's fp32 adapters without autocast: fp32 GEMMs, the sum fp32 and cast back


@dataclass(frozen=True, slots=True)
class Adapters:
    """What sets the adapters' work: the targeted projections, the rank, how the stack runs them (``kind``), the
    bytes per element of the base's input and output stream (2; 4 for fp32 training or QLoRA's fp32 stream) and
    whether dropout precedes them."""

    targets: tuple[str, ...]
    rank: int
    kind: str
    stream: float = 2.0
    dropout: bool = False
    compiled: bool = False  # torch.compile: the pointwise ops around the adapter GEMMs fused (``_compiled``)
    dora: bool = False  # DoRA (PEFT use_dora): the weight rebuilt each forward, the output rescaled (model/dora.py)


@dataclass(frozen=True, slots=True)
class AdapterWork:
    """One layer's adapters on one rank: the GEMMs of the forward and of the input gradient as (n, k, count, bytes
    per operand element), a (tokens×k)·(k×n) product each; the weight gradients' as (m, n, count, elem), an (m×n)
    result reduced over the tokens; and the memory-bound bytes per token and kernels of each direction."""

    fwd_gemms: tuple[tuple[float, float, float, float], ...]
    dgrad_gemms: tuple[tuple[float, float, float, float], ...]
    wgrad_gemms: tuple[tuple[float, float, float, float], ...]
    fwd_bytes: float
    fwd_kernels: float
    bwd_bytes: float
    bwd_kernels: float
    per_pass: DoraPass | None = None  # DoRA's weight rebuild, once per forward pass whatever the tokens


def adapter_work(lg: LayerGroup, ad: Adapters, tp: int) -> AdapterWork:
    """The adapters of one layer: each targeted dense projection's (the experts' own adapters are not modelled:
    their tokens are routed), on this rank's shard of it (a row-parallel projection splits its input, the others
    their output)."""
    fwd, dgrad, wgrad = [], [], []
    fb = fk = bb = bk = 0.0
    r = ad.rank
    a = 4.0 if ad.kind == CAST_FP32 else 2.0 if ad.kind == CAST_AUTOCAST else ad.stream  # the GEMMs' operand bytes
    for i, o, n in adapted(lg, ad.targets, tp):  # each adapted linear's local (d_in, d_out, count)
        fwd += [(r, i, n, a), (o, r, n, a)]            # x·A, then (xA)·B
        dgrad += [(r, o, n, a), (i, r, n, a)]          # dY·Bᵀ, then (dY·Bᵀ)·Aᵀ
        wgrad += [(o, r, n, a), (r, i, n, a)]          # dB = dYᵀ·xA (o×r), dA = (dY·Bᵀ)ᵀ·x (r×i): tokens reduced
        f_b, f_k, b_b, b_k = (_compiled if ad.compiled else _eager)(ad, a, i, o)
        if ad.dora:  # the output rescaled; with dropout the base GEMM again on the dropped input (model/dora.py)
            (d_f, d_b), (d_fk, d_bk) = dora_compose(i, o, ad.stream, ad.dropout), COMPOSE_KERNELS
            f_b, f_k, b_b, b_k = f_b + d_f, f_k + d_fk, b_b + d_b, b_k + d_bk
            if ad.dropout:
                fwd, dgrad = fwd + [(o, i, n, 2.0)], dgrad + [(i, o, n, 2.0)]
        fb, fk, bb, bk = fb + n * f_b, fk + n * f_k, bb + n * b_b, bk + n * b_k
    rebuild = dora_pass(lg, ad.targets, r, tp, 4.0 if ad.kind in (CAST_AUTOCAST, CAST_FP32) else ad.stream, a) \
        if ad.dora else None
    return AdapterWork(tuple(fwd), tuple(dgrad), tuple(wgrad), fb, fk, bb, bk, rebuild)


def _eager(ad: Adapters, a: float, i: float, o: float) -> tuple[float, float, float, float]:
    """(forward bytes, kernels, backward bytes, kernels) per token of one adapted linear of input width ``i`` and
    output width ``o``, its GEMM operands ``a`` bytes each, op by op as the eager stack runs them."""
    x = ad.stream
    f_b = b_b = f_k = b_k = 0.0
    inner = x  # bytes per element of the adapters' input as they read it
    if ad.kind in (CAST_AUTOCAST, CAST_FP32) and x != 4.0:  # _cast_input_dtype to the fp32 adapters; its grad back
        f_b, b_b, f_k, b_k = f_b + (x + 4) * i, b_b + (4 + x) * i, f_k + 1, b_k + 1
        inner = 4.0
    if ad.dropout:  # its output and a bool mask; backward the mask read, the gradient read and written
        f_b, b_b, f_k, b_k = f_b + (2 * inner + 1) * i, b_b + (2 * inner + 1) * i, f_k + 1, b_k + 1
    if ad.kind == CAST_AUTOCAST:  # autocast's 16-bit copy for the GEMM, and its gradient's fp32 cast
        f_b, b_b, f_k, b_k = f_b + 6 * i, b_b + 6 * i, f_k + 1, b_k + 1
    if ad.kind == FUSED:  # the accumulating GEMMs read the base output (forward), dX (backward) once more
        return f_b + x * o, f_k, b_b + x * i, b_k
    # scaling: read and write the adapter's output, each way; the add: read two, write one (the wider dtype)
    s = max(a, x)
    f_b, b_b, f_k, b_k = f_b + 2 * a * o + (x + a + s) * o, b_b + 2 * a * o, f_k + 2, b_k + 1
    if s > x:  # fp32 sum: .to(bf16) forward; backward its gradient up, and down for the base branch
        f_b, b_b, f_k, b_k = f_b + (s + x) * o, b_b + 2 * (s + x) * o, f_k + 1, b_k + 2
    return f_b, f_k, b_b + 3 * x * i, b_k + 1  # the input's gradient: base branch + adapter branch


def _compiled(ad: Adapters, a: float, i: float, o: float) -> tuple[float, float, float, float]:
    """``_eager`` under torch.compile: Inductor fuses the pointwise ops on each side of the adapter GEMMs (cuBLAS
    calls it cannot enter) into one kernel that reads its inputs and writes its outputs once — the input's casts and
    dropout into the GEMM operand, the scaling and add (and cast back) into the layer output; backward the output
    gradient into the adapters' dtype and the adapters' input gradient into the accumulated one. Unsloth's fused
    adapters are as eager."""
    if ad.kind == FUSED:
        return _eager(ad, a, i, o)
    x, mask = ad.stream, 1.0 if ad.dropout else 0.0
    f_b = b_b = f_k = b_k = 0.0
    if ad.kind != SHARED or ad.dropout:  # the GEMM operand: the input cast and/or dropped out
        f_b, f_k, b_b = (x + a + mask) * i, 1.0, mask * i
    f_b, f_k = f_b + (2 * x + a) * o, f_k + 1  # base output + scaled adapter output
    b_b, b_k = b_b + (x + a) * o + (a + 2 * x) * i, 2.0  # the adapter branch's gradient in; the input's out
    return f_b, f_k, b_b, b_k


def adapters_of(training: Training, zero: int) -> Adapters | None:
    """How ``training``'s stack runs its LoRA/QLoRA adapters on a layout of ZeRO stage ``zero`` (None: full
    fine-tune): fused where the framework's ``memory.lora_input`` says so (Unsloth); in the base's dtype on its input
    where the framework's adapters share it (torchtune, Megatron-Core), the adapters compute in 16 bits (model/kept.py
    ``adapters_in_16_bits``) or training is fp32; else PEFT's fp32 adapters behind an input cast — under autocast
    (bf16/fp16/fp8 mixed precision) GEMMs in 16 bits, pure bf16 in fp32. The base's stream is fp32 under fp32 training
    and QLoRA's fp32 preparation (``kbit_upcast``), else 16-bit (PyTorch AMP over fp32 base weights, rare under LoRA,
    is counted as 16-bit)."""
    if training.method == "full":
        return None
    fw = training.framework
    if lora_fused(fw):
        kind = FUSED
    elif lora_keeps_shared_input(fw) or training.precision == "fp32" or adapters_in_16_bits(training, zero):
        kind = SHARED
    else:
        kind = CAST_AUTOCAST if training.precision in ("bf16", "fp16", "fp8") else CAST_FP32
    stream = 4.0 if training.precision == "fp32" or kbit_upcast(training, zero) else 2.0
    return Adapters(training.lora_targets, training.lora_rank, kind, stream, training.lora_dropout > 0,
                    training.compile, training.dora)
