"""What is alive at a stage's peak when the backward pass shapes it (model/memory.py picks the case):
one GPU whose gradients appear as its activations are freed, the first stage's embedding gradient, and
a framework's 16-bit gradients beside its fp32 buffer. Each returns (gradients, activations, logits)."""

from __future__ import annotations

from functools import lru_cache

from gpuplan.model.breakdown import ModelStates, StageActivations
from gpuplan.model.kept import amp_of
from gpuplan.model.states import StateBytes, state_bytes
from gpuplan.spec import Layout, ModelSpec, Training


@lru_cache(maxsize=1024)
def cached_state_bytes(precision: str, optimizer: str, model: ModelSpec, grad_fp32: bool, amp: bool = False
                       ) -> StateBytes:
    """``states.state_bytes``, once per (precision, optimizer, model, gradient dtype, AMP over fp32 weights)."""
    return state_bytes(precision, optimizer, model, grad_fp32, amp)


def one_gpu_backward(model: ModelSpec, training: Training, states: ModelStates, act: StageActivations,
                      ) -> tuple[float, float, float]:
    """(gradients, activations, logits) alive at the peak on one GPU with one micro-batch per step.

    Gradients set to None after each step (PyTorch's zero_grad default since 2.0): backward frees
    activations layer by layer while it allocates gradients, so the peak is at its start
    (activations + loss buffers; then the LM head's gradient beside the activations) or at its end
    (every gradient; with tied embeddings the embedding's own V×h gradient and its out-of-place
    sum with the head's beside them) — not the sum. Measured with `gpuplan trace`, allocated peak
    to the MiB: Llama-3.2-1B (tied) seq 2048 = states without gradients + activations + logits
    buffers, seq 256/1024 = states + 2 V×h gradients; Llama-3.1-8B (untied) seq 4096 = the start,
    seq 512 = the optimizer step. Accumulation over micro-batches, data parallelism (DDP/Megatron
    keep persistent gradient buffers) and pipelines keep the sum."""
    grads, trainable = states.gradients, states.trainable_on_rank
    full = trainable and training.method == "full"
    head = model.vocab * model.hidden * grads / trainable if full else 0.0
    end = grads + (2 * head if model.tied_embeddings else 0.0)
    if end >= max(act.held + act.logits, act.held + head):
        return end, 0.0, 0.0  # the end: activations are gone
    if head > act.logits:
        return head, act.held, 0.0
    return 0.0, act.held, act.logits


def embedding_backward(model: ModelSpec, training: Training, lay: Layout, states: ModelStates,
                        act: StageActivations, flight: float) -> tuple[float, float, float]:
    """(gradients, activations, logits) alive at the first stage's peak where gradients persist (several
    micro-batches, data-parallel or pipeline gradient buffers, ZeRO-1/2): the start of backward, or the
    embedding's backward that ends each micro-batch's — its dense vocab × hidden gradient
    (``embedding_dense_backward``) is made before it is added to the kept one (with a tied head on the
    stage, the head's gradient waits in autograd's input buffer and their sum is a third) while the other
    micro-batches in flight keep their activations. Measured with `gpuplan trace` (8-layer Llama-3.2-1B
    shapes, seq 512): zero 1 over 4 and zero 2 over 8 ranks end with the three gradients (allocated peak
    to the formula's 50 MiB of DDP buckets, which the trace does not allocate), pp 4's first stage with
    one beside 3 micro-batches in flight (to 0.2 %); before, the formula was 5-9 % under them."""
    # made in the weights' dtype (fp32 under AMP)
    grad = cached_state_bytes(training.precision, training.optimizer, model, False, amp_of(training, lay)).grad
    made = model.vocab * model.hidden / lay.tp * grad * (3 if model.tied_embeddings and lay.pp == 1 else 1)
    others = act.per_microbatch * max(flight - 1, 0)
    if made + others > act.held + act.logits:
        return states.gradients + made, others, 0.0
    return states.gradients, act.held, act.logits


def half_grads_backward(states: ModelStates, act: StageActivations, flight: float) -> tuple[float, float, float]:
    """(gradients, activations, logits) alive at the peak where a micro-batch's backward leaves a 16-bit
    ``.grad`` of every parameter of the stage beside the fp32 gradient buffer until it returns
    (frameworks.json ``memory.half_grads``: nanotron's FP32GradientAccumulator.backward runs loss.backward(),
    then adds each .grad into the fp32 buffer and frees it): the start of backward, or its end — those
    2 B per parameter (unsharded under ZeRO-1) beside the other micro-batches in flight."""
    made = 2 * states.trainable_on_rank
    others = act.per_microbatch * max(flight - 1, 0)
    if made + others > act.held + act.logits:
        return states.gradients + made, others, 0.0
    return states.gradients, act.held, act.logits
