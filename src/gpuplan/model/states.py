"""Model-state bytes per parameter (weights, gradients, optimizer) and where each rank's share lives.

Convention (Rajbhandari et al. 2020, ZeRO, arXiv:1910.02054, Sec. 3.1): mixed-precision
Adam keeps 2Ψ bytes of 16-bit weights, 2Ψ of 16-bit gradients and KΨ of optimizer state
with K = 12 (fp32 master weights, momentum, variance) — 16 bytes per parameter. The fp32
master copy is counted under ``optimizer`` as in the paper, so ZeRO-1 shards it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.catalog.constants import constant
from gpuplan.catalog.framework_memory import (
    ddp_bucket_in_param_dtype,
    ddp_copies_gradients,
    nf4_state_sharded,
    zero3_buffers,
)
from gpuplan.model.kept import kbit_upcast
from gpuplan.model.muon import muon_split
from gpuplan.model.params import RankParams
from gpuplan.spec.job import Training
from gpuplan.spec.model import ModelSpec, is_lora_target


@dataclass(frozen=True, slots=True)
class StateBytes:
    weight: float  # compute copy held on the GPU (per parameter)
    grad: float    # gradient (per trainable parameter)
    master: float  # fp32 master copy under mixed precision (per trainable parameter)
    states: float  # optimizer moments (per trainable parameter)

    @property
    def optimizer(self) -> float:
        return self.master + self.states

    @property
    def total(self) -> float:
        return self.weight + self.grad + self.optimizer


# Bytes of one optimizer-state element: fp32 under mixed precision and fp32, 16-bit under bf16-pure.
def _moment_bytes(precision: str) -> int:
    return 2 if precision == "bf16-pure" else 4


def adafactor_state_ratio(model: ModelSpec) -> float:
    """Adafactor (Shazeer & Stern 2018, arXiv:1804.04235, Alg. 4) with beta1 = None keeps, per
    r×c matrix, r + c second-moment factors, and a full second moment for vectors.
    Returns state elements per parameter for the whole model."""
    elems = 0
    for lg_count, weights in [(1, model.embedding + model.head)] + [(lg.count, lg.weights) for lg in model.layers]:
        for w in weights:
            per = (w.shape[0] + w.shape[1]) * w.count if w.is_matrix else w.numel
            elems += lg_count * per
    return elems / max(model.params_formula, 1)


def adapter_state_bytes(optimizer: str, precision: str, model: ModelSpec, targets: tuple[str, ...], rank: int,
                        full_model: float) -> float:
    """Optimizer-state bytes per LoRA adapter parameter: every adapter is a matrix (A: r x in, B: out x r), so Muon
    keeps one momentum for all of them and Adafactor r + in and out + r factors per pair; the other optimizers keep
    what they keep per parameter of the model (``full_model``, ``state_bytes``'s states)."""
    mb = _moment_bytes(precision)
    if optimizer == "muon":
        return float(mb)
    if optimizer != "adafactor":
        return full_model
    params = factors = 0
    for lg in model.layers:
        for w in lg.weights:
            if is_lora_target(w, targets):
                out_f, in_f = w.shape
                params += lg.count * w.count * rank * (out_f + in_f)
                factors += lg.count * w.count * (2 * rank + out_f + in_f)
    return mb * factors / params if params else full_model


def state_bytes(precision: str, optimizer: str, model: ModelSpec, grad_fp32: bool = False, amp: bool = False
                ) -> StateBytes:
    """Bytes per parameter of each model-state kind.

    weights: 16-bit compute copy (fp32: 4; fp8: 2 + 1 for the fp8 weight cache that
    Transformer Engine keeps beside the bf16 weight — TE docs, "FP8 primer").
    gradients: the compute dtype (ZeRO's 2Ψ); fp32 under bf16/fp8 mixed precision where the framework keeps
    fp32 gradients (``grad_fp32``: training.grad_dtype, e.g. Megatron's main_grad buffers).
    master: 4 (fp32) under bf16/fp16/fp8 mixed precision; none for bf16-pure and fp32.
    amp: PyTorch AMP over fp32 parameters (model/kept.py ``amp_fp32``): the fp32 parameters are the master
    copy — 4 B weights, 4 B gradients, no separate master.
    optimizer moments per parameter:
      adamw/adam: 2 moments (Kingma & Ba 2015) → 8 B fp32;
      adamw-8bit: 2 moments × 1 B + one fp32 absmax per 2048-block each (Dettmers et al. 2022);
      sgd: none; sgd-momentum: 1 moment; lion: 1 moment (Chen et al. 2023, arXiv:2302.06675); lion-8bit: that
      moment in 1 B + one fp32 absmax per 2048-block (bitsandbytes Lion8bit: Optimizer1State, optim_bits 8, block-wise);
      adamw-4bit: 2 moments × 0.5 B + one fp32 scale per 128-block each (torchao AdamW4bit; Li et al. 2023);
      ademamix: 3 moments — a fast and a slow EMA of the gradient and the second moment (Pagliardini et al. 2024,
      arXiv:2409.03137, Alg. 1) → 12 B, fp32 under bf16-pure too (bitsandbytes' 32-bit states); ademamix-8bit:
      those 3 in 1 B + one fp32 absmax per block each (bitsandbytes AdEMAMix8bit: state1 holds both EMAs, state2 the
      second moment);
      adafactor: factored second moment (see ``adafactor_state_ratio``);
      muon: one momentum per block matrix, AdamW's two moments for the rest (model/muon.py ``muon_split``).
    """
    w = {"fp32": 4, "fp8": 3}.get(precision, 2)
    g = 4 if precision == "fp32" or (grad_fp32 and precision in ("bf16", "fp8")) else 2
    master = 4 if precision in ("bf16", "fp16", "fp8") else 0
    mb = _moment_bytes(precision)
    if optimizer in ("adamw", "adam"):
        states = 2 * mb
    elif optimizer in ("adamw-8bit", "lion-8bit", "ademamix-8bit"):  # block-wise 8-bit moments: 2, Lion's 1, 3
        states = {"adamw-8bit": 2, "lion-8bit": 1}.get(optimizer, 3) * (1 + 4 / constant("adam8bit_block_size"))
    elif optimizer == "adamw-4bit":  # two 4-bit moments, packed two to a byte
        states = 2 * (0.5 + 4 / constant("adam4bit_block_size"))
    elif optimizer == "ademamix":  # bitsandbytes' 32-bit states are fp32 whatever the parameters' dtype
        states = 3 * 4
    elif optimizer in ("sgd-momentum", "lion"):
        states = mb
    elif optimizer == "sgd":
        states = 0
    elif optimizer == "adafactor":
        states = mb * adafactor_state_ratio(model)
    elif optimizer == "muon":
        states = mb * (2 - muon_split(model)[0])
    else:  # spec.Training validates the name
        raise AssertionError(optimizer)
    if amp:
        w, g, master = 4, 4, 0
    return StateBytes(weight=w, grad=g, master=master, states=states)


def optimizer_step_temp_bytes(optimizer: str, precision: str, impl: str) -> float:
    """Temporary bytes per (local, sharded) trainable parameter during ``optimizer.step()``.
    Fused kernels (``fused=True``; Megatron/Apex FusedAdam) update in place: none.
    PyTorch's foreach AdamW materialises sqrt(v) as a new tensor list
    (torch/optim/adamw.py, ``_multi_tensor_adamw``): one moment-sized copy."""
    if impl == "foreach" and optimizer in ("adamw", "adam", "adafactor"):
        return _moment_bytes(precision)
    return 0.0


def transient_buffers(training: Training, rp: RankParams, sb: StateBytes, gathered: bool, plain_ddp: bool,
                       dp_group: int, grads: float, head: tuple[float, float] = (0.0, 0.0)) -> float:
    """Communication and dequantisation buffers beside one rank's model states; ``head``: (its FSDP unit, the LM head)
    in elements on this rank (the last stage), gathered whole — the unit may hold the embedding too (memory.py
    _gathered_head)."""
    unit, head_only = head
    w_elem = 4 if training.precision == "fp32" else 2
    # QLoRA under FSDP / ZeRO-3 gathers the base weights as they are stored: 4-bit values packed into a 16-bit
    # storage dtype FSDP can flatten (bitsandbytes bnb_4bit_quant_storage, docs/source/fsdp_qlora.md), not bf16;
    # bitsandbytes' quantization constants stay whole on every rank, torchao's are gathered with the values
    # (model/quantized.py frozen_base)
    g_elem = (constant("nf4_bytes_per_param") if nf4_state_sharded(training.framework) else 0.5) \
        if training.method == "qlora" else w_elem
    grad = sb.grad if training.method == "full" else 0
    buffers = 0.0
    by_module = zero3_buffers(training.framework) if gathered else None
    if by_module is not None:
        # DeepSpeed ZeRO-3: modules gathered up to the live-parameter limit (at least the largest module — the LM
        # head, a 16-bit module of its own, where it is the largest) plus the prefetch bucket; gradients reduced from
        # a bucket of 16-bit elements (frameworks.json)
        live, prefetch, bucket = by_module
        buffers += max((max(rp.largest_matrix, min(rp.largest_layer, live)) + prefetch) * g_elem,
                       head_only * w_elem + prefetch * g_elem)
        buffers += min(bucket, rp.largest_layer) * (w_elem if training.method == "full" else 0)
    elif gathered:
        # FSDP: the layer being computed and the prefetched next one, unsharded, plus the unsharded gradient of one
        # layer before its reduce-scatter — or, where the backward starts, the LM head's unit (never quantized)
        # beside the last block prefetched for its backward, and the head's unsharded gradient. The head's unit is
        # not resharded after the forward: FSDP2 keeps the root's parameters gathered (_fsdp_state.py _lazy_init:
        # "For the root, do not reshard after forward"), torchtitan shards [norm, output] with
        # reshard_after_forward False by default ("FSDP would prefetch them immediately after the forward pass"),
        # FSDP1 frees no root parameters after the forward (_runtime_utils.py _post_forward_reshard)
        blocks = rp.largest_layer * (2 * g_elem + grad)
        buffers += max(blocks, unit * w_elem + head_only * grad + rp.largest_layer * g_elem)
    elif plain_ddp and ddp_copies_gradients(training.framework):
        # DDP's buckets beside the gradients (gradient_as_bucket_view off); in the parameters' dtype where the
        # framework keeps its own fp32 gradient buffer besides (nanotron)
        param_dtype = ddp_bucket_in_param_dtype(training.framework) and training.method == "full" and sb.grad
        buffers += grads * w_elem / sb.grad if param_dtype else grads
    elif dp_group > 1:
        buffers += 2 * constant("ddp_bucket_bytes")
    if training.method == "qlora":
        buffers += rp.largest_matrix * 2  # one weight dequantised to bf16 at a time
    elif training.method == "lora-int8":  # MatMul8bitLt.backward: CB.to(input dtype) — fp32 where PEFT upcast it
        buffers += rp.largest_matrix * (4 if kbit_upcast(training, 0) else 2)
    return buffers


def state_on_host(training: Training, offload: str) -> bool:
    """Whether a layout with ``offload`` keeps state in host memory (model/memory.py ``model_states``' cpu_offload:
    offloaded state, or a paged optimizer's moments), whose verdict then checks the host."""
    return offload != "none" or training.optimizer_impl == "paged"
