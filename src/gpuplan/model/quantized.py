"""A quantized frozen base under LoRA adapters — QLoRA's NF4 (bitsandbytes Linear4bit, torchao NF4Tensor) and
LLM.int8 (bitsandbytes Linear8bitLt, method lora-int8): the bytes it keeps (model/memory.py) and the memory-bound
passes its linears add beside their GEMMs (model/compute.py times them at the streaming rate)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_memory import nf4_state_sharded
from gpuplan.model.kept import kbit_upcast
from gpuplan.model.params import RankParams
from gpuplan.model.states import StateBytes
from gpuplan.spec import LayerGroup, ModelSpec, Training
from gpuplan.spec.model import LORA_GROUPS, ROW_PARALLEL_LEAVES, local_shape


def frozen_base(training: Training, rp: RankParams, sb: StateBytes, zero: int) -> tuple[float, float]:
    """A LoRA/QLoRA rank's frozen base: (bytes ZeRO-3 / FSDP shard, bytes every rank keeps whole). lora-int8: the block
    linears in bitsandbytes' Int8Params (``CB``, 1 B each, and ``SCB``, an fp32 scale per output row). QLoRA: the block
    linears' 4-bit values packed (sharded) and their quantization constants (absmax, double-quantized) — in each
    bitsandbytes Linear4bit's quant_state, no parameter, so replicated (bitsandbytes nn/modules.py
    fix_4bit_weight_quant_state_from_module: "the quant state got lost ... for example for fsdp"); torchao's NF4Tensor
    shards them with the values (``nf4_state_sharded``) —; the rest in 16 bits, but where PEFT prepared the model
    (``kbit_upcast``) the norms and other small parameters in fp32: prepare_model_for_kbit_training casts all of them
    to fp32, then TRL's peft_module_casting_to_bf16 (and the QLoRA paper's qlora.py) casts the embeddings and the LM
    head back to bf16 and keeps the norms in fp32."""
    base = rp.dense + rp.expert
    if training.method not in ("qlora", "lora-int8"):
        return base * sb.weight, 0.0
    small = base - rp.quantizable - rp.tables  # norms, biases, routers
    upcast = kbit_upcast(training, zero)
    tables = 4 if upcast and training.precision == "fp16" else 2  # TRL casts them back only with args.bf16
    rest = rp.tables * tables + small * (4 if upcast else 2)
    if training.method == "lora-int8":  # Int8Params: 1 B per weight (the fp32 row scales, 4 B per output row: < 0.1 %)
        return rp.quantizable * 1.0 + rest, 0.0
    state = rp.quantizable * (constant("nf4_bytes_per_param") - 0.5)
    sharded = nf4_state_sharded(training.framework)
    return rp.quantizable * 0.5 + rest + (state if sharded else 0.0), 0.0 if sharded else state


@dataclass(frozen=True, slots=True)
class BasePass:
    """What a layer's quantized base linears stream beside their GEMMs: forward bytes per token and kernels, and the
    bytes of each forward and each backward pass over their weights."""

    per_token: float = 0.0
    kernels: float = 0.0
    fwd: float = 0.0
    bwd: float = 0.0
    # lora-int8 under PEFT's fp32 preparation: the input-gradient GEMMs MatMul8bitLt.backward runs in fp32 — (n, k,
    # count) of each (tokens×n)·(n×k), n its output, k its input width — grad_output.to(dtype_A) · CB.to(dtype_A), a
    # custom autograd Function's backward outside autocast, TF32 off by default
    fp32_dgrad: tuple[tuple[float, float, float], ...] = ()


def base_pass_bytes(m: ModelSpec, lg: LayerGroup, tp: int, ep: int, method: str, stream: float) -> BasePass:
    """The memory-bound work of a layer's quantized base linears beside their GEMMs (16-bit GEMMs either way).
    QLoRA: every pass over a frozen NF4 weight first dequantizes it to bf16 (bitsandbytes ``dequantize_4bit`` before
    the matmul: read the 4-bit codes and their scales, write 2 B per parameter — Dettmers et al. 2023, QLoRA, Sec. 3),
    forward and backward. lora-int8: bitsandbytes' MatMul8bitLt (0.45, autograd/_functions.py) — forward, per linear
    and token, its input cast to fp16 (read ``stream`` bytes — 4 where PEFT upcast the norms —, write 2 per element)
    and quantized row-wise with the outlier search of the default threshold 6.0 (functional.py
    int8_vectorwise_quant: abs, the threshold mask, its row and column any, argwhere, the quantization — 14 B per
    element beside the cast), the int8 product's int32 output written, dequantized to fp16 and cast to the input's
    dtype (int8_mm_dequant, then .to), the outliers' product added out of place (read and write the output); eight
    memory-bound kernels, the int8 GEMM timed at the 16-bit rate (no int8 tensor-core speed credited: an estimate);
    backward, each weight dequantized for the input gradient, ``CB.to(dtype).mul_(SCB)`` (read 1, write 2, read 2,
    write 2 B) — bitsandbytes 95f9af30 as read by a review."""
    if method not in ("qlora", "lora-int8"):
        return BasePass()
    mats = [w for w in lg.weights if w.is_matrix and w.group in LORA_GROUPS]
    share = [(w, (ep if w.group == "expert" else 1) * tp) for w in mats]
    params = sum(w.numel / d for w, d in share)
    if method == "qlora":
        nbytes = params * (constant("nf4_bytes_per_param") + 2)
        return BasePass(fwd=nbytes, bwd=nbytes)
    ins = sum(w.shape[1] * w.count / d for w, d in share)
    outs = sum(w.shape[0] * w.count / d for w, d in share)
    # the linears whose input is the fp32 stream or the fp32 MLP product, as (local d_out, local d_in, count): all but
    # the heads' output projection, whose input is 16-bit (attention runs under autocast) — none without the upcast
    fp32 = tuple((*local_shape(w, tp)[::-1], w.count) for w in mats if stream == 4.0 and w.group != "expert"
                 and not (w.group == "attention" and w.name.rsplit(".", 1)[-1] in ROW_PARALLEL_LEAVES))
    outs_b = 4 + 4 + 2 + (2 + stream if stream != 2 else 0.0) + 2 * stream  # int32, fp16, cast, outliers' add
    return BasePass(ins * (stream + 16) + outs * outs_b, 8.0 * sum(w.count for w in mats), bwd=params * 7,
                    fp32_dgrad=fp32)

