"""The non-matmul work of a transformer block as the training software runs it: bytes moved and
kernels launched per token by norms, rotary embeddings, the MLP activation, residual adds and the
loss — fused (one kernel that reads and writes each tensor once) or eager PyTorch (one kernel per
op, RMSNorm and RoPE in fp32). Which ops a framework fuses is cited in catalog/frameworks.json;
``torch.compile`` (training.compile) fuses every elementwise chain.

Bytes per element, 16-bit tensors, forward pass (backward moves about twice as much):
* norm, fused (Apex/Transformer Engine, flash-attn, inductor): read x, write y: 4 B, 1 kernel.
  Eager RMSNorm (torchtitan and Hugging Face ``RMSNorm``: x.float(), pow(2), mean, rsqrt, mul,
  type_as, mul weight): 2+4 + 4+4 + 4 + 4+4 + 4+2 + 2+2 ≈ 36 B, 7 kernels. Eager LayerNorm is one
  native kernel (``F.layer_norm``) that reads each row twice — its Welford statistics, then again to
  normalise (PyTorch aten/src/ATen/native/cuda/layer_norm_kernel.cu vectorized_layer_norm_kernel_impl:
  compute_stats over the row, then the loop over X_vec writing Y) — and writes it once: 6 B, 1 kernel (short
  rows find part of the second read in L2).
* rotary embedding on q and k, fused: 4 B per element, 1 kernel per tensor; eager (torchtitan's
  complex product in fp32: float(), complex mul with the frequencies, type_as): 2+4 + 4+4+4 + 4+2
  = 24 B, 3 kernels per tensor.
* activation, fused SwiGLU: read gate and up, write the product: 6 B per ffn element, 1 kernel;
  eager silu then mul: 10 B, 2 kernels. GeLU: fused 4 B, eager (bias add + gelu) 8 B.
* residual add: read two, write one: 6 B per hidden element, 1 kernel. Where the add and the
  following norm run as one kernel (``torch.compile``: Inductor fuses the pointwise add into the
  norm's reduction; Liger's LigerFusedAddRMSNorm; flash-attn's dropout_add_layer_norm): read x and
  the residual, write the sum (the next residual) and the normed output, 8 B, 1 kernel for both.
* eager attention's softmax: fused with the scaling and the causal mask only where the framework says
  so (Megatron's FusedScaleMaskSoftmax) or under ``torch.compile``; else PyTorch's softmax and a
  separate mask add (model/attention.py).
* cross-entropy over the logits (forward and backward): eager (fp32 upcast, log-softmax, the
  gradient) 24 B per logit — also chunk by chunk (torchtune's chunked losses, not compiled); fused or compiled
  (Megatron-Core, llm-foundry; a compiled loss, chunked or not) 6 B: read the logits, write their gradient.
* memory the loss holds at the start of backward, per logit: eager 12 B (fp32 log-softmax output,
  incoming and outgoing fp32 gradients: activations.logits_bytes); fused (the gradient computed
  in the forward into the logits' own bf16 buffer — Megatron-Core's vocab-parallel fused
  cross-entropy, flash-attn's CE): 4 B. Compiled (torch.compile of
  the loss, Training.compile_loss): Inductor's decompositions and min-cut partitioner save the bf16 logits and
  two fp32 numbers per row (max, log-sum-exp) — tests/test_compiled_loss.py partitions the eager loss as
  torchtitan writes it — and the backward's one fused kernel writes the bf16 gradient: 4 B, as fused.
  Chunked (torchtune's CEWithChunkedOutputLoss and LinearCrossEntropyLoss, 8 chunks, each upcast and its loss
  taken one at a time): autograd still saves every chunk's fp32 log-softmax output until backward, so eager it
  holds 4 B plus the first chunk's two fp32 gradients, 5 B; compiled chunk by chunk (torchtune compiles
  ``compute_cross_entropy`` alone) every chunk's bf16 logits plus one chunk's bf16 gradient, 2.25 B.
  Fused linear (Unsloth's unsloth_fused_ce_loss, Liger's LigerFusedLinearCrossEntropyLoss): the LM head and the
  loss run chunk by chunk in the forward, which also fills the head input's gradient; one chunk's logits at a time
  (activations.fused_linear_loss_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.framework_memory import loss_logit_bytes
from gpuplan.catalog.frameworks import get_framework
from gpuplan.model.attention import SOFTCAP_BWD_BYTES, SOFTCAP_FWD_BYTES
from gpuplan.spec import ModelSpec, Training

MATMULS_PER_BLOCK = 7  # q, k, v, o, gate/up, down (the attention core is one more kernel)
RESIDUAL_ADD_BYTES = 6.0  # read two 16-bit tensors, write one
ADD_NORM_BYTES = 8.0  # fused residual add + norm: read x and the residual, write the sum and the normed output
NATIVE_LAYER_NORM_BYTES = 6.0  # F.layer_norm: read the row twice (statistics, then normalise), write it once
# torchtune's chunked loss (CEWithChunkedOutputLoss, LinearCrossEntropyLoss: num_output_chunks = 8), bytes per logit at
# the start of backward (tests/test_compiled_loss.py measures what autograd and Inductor save): eager, every chunk's
# fp32 log-softmax output is saved (4 B) and the first chunk's backward adds its fp32 incoming and outgoing gradients;
# compiled chunk by chunk (apply_compile_strategy), every chunk's 16-bit logits are saved and one chunk's 16-bit
# gradient is written
TORCHTUNE_CHUNKS = 8
CHUNKED_EAGER_HELD = 4.0 + (4.0 + 4.0) / TORCHTUNE_CHUNKS
CHUNKED_COMPILED_HELD = 2.0 + 2.0 / TORCHTUNE_CHUNKS


@dataclass(frozen=True, slots=True)
class Software:
    """Per-token bytes and kernels of one block's forward non-matmul work, and of the loss."""

    per_h: float         # bytes per hidden element (2 norms + 2 residual adds)
    per_qk: float        # bytes per q/k element (rotary embedding)
    per_f_gated: float   # bytes per ffn element, gated MLP
    per_f_plain: float   # bytes per ffn element, plain MLP
    kernels: int         # forward kernels per block
    loss_per_logit: float  # bytes per logit, forward and backward
    logits_memory: float  # bytes per logit held by the loss at the start of backward
    # a fused linear cross-entropy (the LM head and the loss chunk by chunk, the logits never whole): whose chunking,
    # "unsloth" or "liger" (model/activations.py fused_linear_loss_bytes); None: the logits are materialised
    fused_linear: str | None = None
    grouped_experts: bool = True  # one grouped GEMM for a rank's experts (False: a loop, one GEMM each)
    ops: tuple[tuple[str, float, int], ...] = ()  # (op, bytes per element, kernels) as this software runs it
    fused_softmax: bool = False  # eager attention's scale, mask and softmax in one kernel (Megatron's fused softmax)
    # the whole logits tensor made by eager PyTorch ops before the loss (not compiled, chunked or fused with the head):
    # a final logit soft-cap's tanh keeps its 16-bit output there (Gemma 2, model/act_parts.py)
    eager_logits: bool = False

    def cost(self, op: str) -> tuple[float, int]:
        """(bytes per element, kernels) of one memory-bound op, forward, 16-bit tensors: ``norm``,
        ``residual_add``, ``add_norm`` (a residual add and the norm after it), ``rope``,
        ``activation_gated``, ``activation_plain``."""
        return next((b, k) for name, b, k in self.ops if name == op)


def _fused(value: object) -> bool | None:
    """A fact of catalog/frameworks.json: True/'chunked'/'dail' = fused, False = eager, None = unknown."""
    if value is None:
        return None
    return value is not False


@lru_cache(maxsize=64)
def software(framework: str, compile_: bool, model: ModelSpec, compile_loss: bool = True,
             kernels: str = "framework") -> Software:
    """``compile_loss``: under ``compile_``, the loss compiled with the model (Training.compile_loss); ``kernels``
    "liger": Liger Kernel's fused RMSNorm, RoPE, SwiGLU and linear cross-entropy in place of the model's own."""
    profile = get_framework(framework)
    facts = profile.fused_kernels
    grouped = profile.moe.get("grouped_gemm")
    liger = kernels == "liger"

    def fused(op: str) -> bool:
        if compile_ or liger:
            return True
        fact = facts.get(op)
        state = _fused(fact.value) if fact is not None else None
        return state is not False  # unknown: fused (what the model assumed before frameworks were named)

    eager_norm = not fused("norm")
    rms_eager = model.norm == "rmsnorm" and eager_norm
    norm_b, norm_k = (36.0, 7) if rms_eager else (NATIVE_LAYER_NORM_BYTES, 1) if eager_norm else (4.0, 1)
    rope = model.qk_rope_dim > 0 or (model.position == "rope"
                                     and model.model_type not in ("gpt2", "mpt", "bloom", "opt", "gpt_neox"))
    rope_b, rope_k = ((4.0, 2) if fused("rope") else (24.0, 6)) if rope else (0.0, 0)
    act = fused("activation")
    act_g, act_p, act_k = (6.0, 4.0, 1) if act else (10.0, 8.0, 2)
    loss = "liger" if liger else facts["cross_entropy"].value if "cross_entropy" in facts else None
    compiled_loss = compile_ and compile_loss
    if compiled_loss and loss not in ("chunked", "fused-linear", "liger"):
        loss = True  # Inductor fuses the upcast into the loss: the 16-bit logits and their gradient (a chunked loss
        # stays chunked, compiled chunk by chunk)
    if loss == "chunked":  # each chunk's own loss: eager, or compiled chunk by chunk
        ce, held = (6.0, CHUNKED_COMPILED_HELD) if compiled_loss else (24.0, CHUNKED_EAGER_HELD)
    else:
        ce = 6.0 if loss is not False else 24.0
        held = 4.0 if loss else 12.0
        own = loss_logit_bytes(framework)  # the framework's own loss, read in its code
        if own is not None and not compiled_loss and not liger:
            held = own
    linear = {"fused-linear": "unsloth", "liger": "liger"}.get(loss) if isinstance(loss, str) else None
    eager_logits = not compiled_loss and linear is None and loss != "chunked"
    if eager_logits and model.final_softcap:  # the soft-cap's three passes over the 16-bit logits each way
        ce += SOFTCAP_FWD_BYTES + SOFTCAP_BWD_BYTES
    # a residual add and the norm after it: one kernel under torch.compile, else two
    add_norm_b, add_norm_k = (ADD_NORM_BYTES, 1) if compile_ else (RESIDUAL_ADD_BYTES + norm_b, 1 + norm_k)
    n_kernels = MATMULS_PER_BLOCK + 1 + 2 * add_norm_k + rope_k + act_k
    ops = (("norm", norm_b, norm_k), ("residual_add", RESIDUAL_ADD_BYTES, 1), ("add_norm", add_norm_b, add_norm_k),
           ("rope", rope_b, rope_k), ("activation_gated", act_g, act_k), ("activation_plain", act_p, act_k))
    return Software(per_h=2 * add_norm_b, per_qk=rope_b, per_f_gated=act_g, per_f_plain=act_p,
                    kernels=n_kernels, loss_per_logit=ce, logits_memory=held, fused_linear=linear,
                    grouped_experts=grouped is None or grouped.value is not False, ops=ops,
                    fused_softmax=compile_ or ("softmax" in facts and _fused(facts["softmax"].value) is True),
                    eager_logits=eager_logits)


def software_of(training: Training, model: ModelSpec) -> Software:
    """``software`` as ``training`` runs ``model``: its framework, compile and kernels."""
    return software(training.framework, training.compile, model, training.compile_loss, training.kernels)
