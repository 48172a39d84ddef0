"""A rank's activations per micro-batch, as the step keeps them (model/activations.py counts the bytes of each saved
tensor; this module sizes a stage's share, the recompute working set, the LM head's inputs and the logits for the
software that runs it: model/kept.py, model/software.py). model/memory.py adds them to the peak."""

from __future__ import annotations

from functools import lru_cache

from gpuplan.catalog.framework_memory import keeps_gathered_sp_input, loss_parallel_logit_bytes, offloads_checkpoints
from gpuplan.model.activations import (
    ACT_BYTES,
    FP8_LINEAR_INPUT_BYTES,
    ActShape,
    fused_linear_loss_bytes,
    layer_bytes,
    logits_bytes,
    module_working_set,
    recompute_working_set,
)
from gpuplan.model.breakdown import StageActivations
from gpuplan.model.dora import dora_working_set
from gpuplan.model.kept import fused_glu_keeps_input, keeps_fp32_norm_copy, lora_shape, norm_keeps, normed_readers
from gpuplan.model.params import rank_params
from gpuplan.model.software import software_of
from gpuplan.spec import ModelSpec, Training

# a preference run's logits under TRL (trainer/utils.py selective_log_softmax over the bf16 logits, row by row, each
# row's log-softmax kept for backward; the reference's bf16 logits beside them during its forward — the DPOTrainer
# of TRL 1.x, f2cd5771): ~2 + 2 + 2 B per logit, no fp32 upcast (a review of the code, not a measurement)
PREFERENCE_LOGIT_BYTES = 6.0


def stage_activations(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                      cp: int, sp: bool, mb: int, recompute: str, flight: float,
                      factor: float = 1.0, *, every: int = 1, amp: bool = False,
                      upcast: bool = False, adapters16: bool = False) -> StageActivations:
    """One rank's activations; ``factor`` is a correction fitted by `gpuplan trace --calibrate`;
    ``every`` > 1 with full recompute: only every k-th block is recomputed; ``amp``: PyTorch AMP over fp32
    weights (model/kept.py ``amp_fp32``); ``upcast``: QLoRA prepared by PEFT (model/kept.py ``kbit_upcast``);
    ``adapters16``: the LoRA adapters compute in 16 bits (model/kept.py ``adapters_in_16_bits``)."""
    per_mb, extra, logits = activation_parts(model, training, tp, ep, pp, vstages, stage, cp, sp, mb, recompute, amp,
                                             upcast, adapters16)
    if recompute == "full" and every > 1:  # the other blocks keep what they would without recompute
        kept, _, _ = activation_parts(model, training, tp, ep, pp, vstages, stage, cp, sp, mb, "none", amp, upcast,
                                      adapters16)
        per_mb = per_mb / every + kept * (1 - 1 / every)
    if training.dora:  # DoRA's weight rebuild of the largest adapted linear, forward and recomputed (model/dora.py)
        extra += dora_working_set(model, training.lora_targets, tp, 2.0 if lora_shape(training, adapters16)[
            "lora_copy"] == 0 else 4.0)
    if factor != 1.0:
        per_mb, extra = per_mb * factor, extra * factor
    # activation offloading (torchtune OffloadActivations, Megatron-Core cpu_offloading; no pipeline): the saved
    # tensors go to host memory in forward, back in backward — two blocks' on the GPU, the one in use and the next
    on_gpu = per_mb * min(1.0, 2 / model.n_layers) if offloaded(training, recompute) else per_mb
    return StageActivations(per_mb, on_gpu * flight + extra, logits)


def offloaded(training: Training, recompute: str) -> bool:
    """Whether the saved activations go to host memory: ``training.activation_offloading``, or full recompute under a
    stack that offloads its checkpoints (Unsloth: catalog/framework_memory.py ``offloads_checkpoints``)."""
    return training.activation_offloading or (recompute == "full" and offloads_checkpoints(training.framework))


@lru_cache(maxsize=65536)
def activation_parts(model: ModelSpec, training: Training, tp: int, ep: int, pp: int, vstages: int, stage: int,
                     cp: int, sp: bool, mb: int, recompute: str, amp: bool = False,
                     upcast: bool = False, adapters16: bool = False) -> tuple[float, float, float]:
    """(activations per micro-batch in flight, held once — recompute working set, LM-head inputs —, logits).
    ``amp``: PyTorch AMP over fp32 weights — the fp32 stream into the norms, each linear's own 16-bit input cast,
    and autocast's 16-bit cast of every matmul weight, kept from forward to backward (model/kept.py).
    ``upcast``: QLoRA after PEFT's ``prepare_model_for_kbit_training`` (model/kept.py ``kbit_upcast``) — the fp32
    norms (the embeddings and LM head cast back to bf16 by TRL) make the residual stream fp32, and bitsandbytes'
    Linear4bit returns its output in its input's dtype: its 16-bit cast of the fp32 input is transient (MatMul4Bit
    keeps no input), the MLP's elementwise tensors are fp32; the bf16 head needs no autocast copy."""
    targets = training.lora_targets if training.method != "full" else None
    rp = rank_params(model, tp, ep, pp, vstages, stage, targets, training.lora_rank)
    elem = ACT_BYTES[training.precision]
    eager_norm = keeps_fp32_norm_copy(model, training)
    qkv, mlp = normed_readers(model) if amp or upcast else (1, 1)
    x = ActShape(s=training.seq_len // cp, b=mb, t=tp, sp=sp, dropout=training.dropout > 0,
                 flash=training.attention != "eager", elem=elem,
                 linear_in=FP8_LINEAR_INPUT_BYTES if training.precision == "fp8" else elem,
                 norm_in=norm_keeps(eager_norm, training.method, elem, amp), qkv_copies=qkv, mlp_copies=mlp,
                 stream=4 if amp or upcast else 0, inner=4 if upcast else 0,
                 fused_glu=fused_glu_keeps_input(training),
                 softmax_fp32=training.attention == "eager" and not software_of(training, model).fused_softmax,
                 softcap=model.attn_softcap > 0,
                 gathered=keeps_gathered_sp_input(training.framework), **lora_shape(training, adapters16))
    per_mb = sum(n * layer_bytes(model, kind, x, recompute) for kind, n in enumerate(rp.kind_layers) if n)
    # autocast's weight casts (AMP), one per matrix whatever the micro-batches in flight: the blocks' matrices,
    # unless a checkpointed block's forward saved none (full and per-op recompute: freed as its autocast region
    # ends, remade one block at a time in the recompute); the LM head's (or the tied embedding's) on the last stage
    checkpointed = recompute in ("full", "selective-op")
    casts = elem * rp.quantizable if amp and not checkpointed else 0.0
    fp32_head = amp or (upcast and training.precision == "fp16")  # TRL casts a prepared head back to bf16 only
    head_cast = elem * model.vocab * model.hidden / tp if fp32_head and stage == pp - 1 else 0.0
    extra = casts + (0.0 if checkpointed else head_cast)
    rep = 1 / x.t if x.sp else 1.0
    if eager_norm and pp > 1 and recompute not in ("full", "selective-op"):  # none, selective (by module too)
        # a received stage input is held for its gradient; a fused norm keeps it as its own input, an eager one
        # an fp32 copy instead: one elem·s·b·h more per micro-batch in flight past the first stage (gpuplan trace)
        per_mb += (vstages - (stage == 0)) * elem * x.s * x.b * model.hidden * rep
    if checkpointed and rp.layers:
        # one block rebuilt at a time (under AMP with its own weight casts); the head's cast freed before the first
        rebuilt = max(recompute_working_set(model, kind, x) for kind, n in enumerate(rp.kind_layers) if n) \
            + (elem * rp.largest_layer if amp else 0.0)
        extra += max(rebuilt, head_cast)
    elif checkpointed:
        extra += head_cast
    elif rp.layers and recompute.startswith("selective:"):  # one module of one block rebuilt at a time
        extra += max(module_working_set(model, kind, x, recompute) for kind, n in enumerate(rp.kind_layers) if n)
    logits = 0.0
    if stage == pp - 1:
        extra += (x.norm * rep + elem * x.in_rep) * x.s * x.b * model.hidden  # the final norm's; the LM head's input
        sw = software_of(training, model)
        if sw.fused_linear is None:
            capped = elem if model.final_softcap and sw.eager_logits else 0  # the soft-cap's tanh output
            # a DTensor vocab-parallel loss (torchtitan's loss_parallel under tp) holds its own bytes per local logit
            held = loss_parallel_logit_bytes(training.framework) if x.t > 1 and sw.eager_logits else \
                PREFERENCE_LOGIT_BYTES if training.preference and sw.logits_memory > PREFERENCE_LOGIT_BYTES else None
            logits = logits_bytes(model, x.s, x.b, x.t, (held or sw.logits_memory) + capped)
        else:  # a chunked fused linear loss: one chunk's logits, and the head input's gradient
            logits = fused_linear_loss_bytes(sw.fused_linear, model, x.s * x.b, elem)
    return per_mb, extra, logits
