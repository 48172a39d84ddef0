"""Activation memory: what autograd keeps per transformer layer, per micro-batch.

Base: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198), Sec. 4. Their per-layer count for a GPT layer, 16-bit, no
tensor parallelism, with dropout and eager softmax, is (Eq. 1)

    s·b·h·(34 + 5·a·s/h)      bytes,

built from named pieces (attention 11·sbh + 5·a·s²·b, MLP 19·sbh, two LayerNorms 4·sbh).
We keep those pieces and generalise each one (``layer_terms``):

* GQA/MQA: K and V hold ``kv`` heads, not ``a`` (2·s·b·kv·d each instead of 2·sbh).
* Head size ``d`` need not be h/a (Gemma), and V's head size may differ (MLA).
* Gated MLPs (SwiGLU/GeGLU, 3 matrices, intermediate f): gate output, activation output,
  up output and their product (down-projection input) are all saved: 8·s·b·f, as eager
  PyTorch does (torchtitan, Hugging Face); a GeLU MLP keeps 4·s·b·f (= 16·sbh at f = 4h,
  Korthikanti's 8 + 8). A squared-ReLU MLP (Nemotron: up → relu(x)² → down, 2 matrices) keeps the
  same 4·s·b·f: ReLU saves its output, which is also what the square saves, and the square's
  output is the down projection's input; the up projection's output is freed.
* Dropout: the masks (1 byte/element) and the attention-dropout output exist only when
  ``dropout > 0``; modern LLM pre-training uses none.
* Attention kernel: eager softmax keeps the a·s² scores (2·a·s²·b, plus 3·a·s²·b with
  dropout); flash/SDPA attention (Dao et al. 2022) keeps only the fp32 log-sum-exp, 4·a·s·b.
* MoE: each token is dispatched to ``top_k`` experts, whose inputs and internals are kept
  per routed copy, plus fp32 router logits and probabilities (8·s·b·E).
* MLA (DeepSeek-V2/V3): the latent query/key-value tensors and their norms are kept too.

* Hybrid blocks (``LayerGroup.mixer``, ``.mlp``): a block keeps its mixer's terms — attention's above, a
  Mamba-2 or gated delta-rule layer's saved tensors (model/ssm.py ``ssm_terms``), none for an MLP-only block —
  and the MLP's only where it has one.

Tensor parallelism (Korthikanti Eq. 2/4): every term inside the TP region divides by t;
the norm inputs, the inputs of the column-parallel linears and the dropout masks (10·sbh in
their count) divide by t only with sequence parallelism — the linears' inputs only where the framework keeps
the shard and all-gathers it again in backward (Megatron, their Sec. 4.2.2); PyTorch's DTensor plan (torchtitan)
saves the all-gathered input whole (``ActShape.gathered``). Context parallelism splits s.

Recompute (Korthikanti Sec. 5): "selective" drops the attention core (the s² terms; with
flash attention there is nothing left to drop, as in Megatron-Core's default
``recompute_modules=[core_attn]``); "full" keeps only the layer input (2·sbh, /t with SP).
"selective-op" is torchtitan's per-op selective checkpointing (``selective_ac_option="op"``,
torchtitan/distributed/activation_checkpoint.py): it keeps the layer input, the outputs of
every other matmul (the 1st, 3rd, 5th, … of the block), and the attention kernel's output
and log-sum-exp; everything elementwise is recomputed. With "full" and "selective-op" the
backward pass rebuilds one layer's activations at a time (``recompute_working_set``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.model.dora import dora_kept
from gpuplan.model.recompute_modules import dropped, modules_of
from gpuplan.model.ssm import ssm_terms
from gpuplan.spec.model import LORA_GROUPS, NO_EXPERTS, ROW_PARALLEL_LEAVES, ModelSpec, is_lora_target

# Bytes per saved activation element for the precisions of spec.Precision.
ACT_BYTES = {"bf16": 2, "fp16": 2, "bf16-pure": 2, "fp8": 2, "fp32": 4}
# fp8 (Transformer Engine style): the inputs of the linear layers are kept in fp8, 1 byte
# (NVIDIA Transformer Engine docs, "Using FP8": the casted input is saved for backward).
FP8_LINEAR_INPUT_BYTES = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ActShape:
    """Local sizes on one rank for one micro-batch."""

    s: int      # sequence length on this rank (seq_len / cp)
    b: int      # micro-batch
    t: int      # tensor-parallel degree
    sp: bool    # sequence parallel
    dropout: bool
    flash: bool
    elem: int   # bytes per element (2 for 16-bit)
    linear_in: float  # bytes per element of a linear layer's saved input (1 for fp8)
    # bytes per element an RMSNorm keeps: a fused kernel its input (elem); Hugging Face's eager RMSNorm an fp32
    # copy and the normalized tensor (4 + elem: frameworks.json memory.norm_fp32_copy)
    norm_in: float = 0.0
    # LoRA/QLoRA (``lora_terms``): the method, the adapted projections, the rank; bytes per element of the
    # copy of its input each adapter keeps (0: it keeps the input tensor itself, shared with the other
    # adapters on it); bytes per adapter element cast for each micro-batch (autocast's bf16 copies)
    method: str = "full"
    lora_targets: tuple[str, ...] = ()
    lora_rank: int = 0
    lora_copy: float = 0.0
    lora_weight_cast: float = 0.0
    lora_dropout: bool = False  # the adapters drop their input: each keeps a 1-byte mask of it
    dora: bool = False  # DoRA (PEFT use_dora): the magnitude's inputs kept too (model/dora.py dora_kept)
    # AMP over fp32 weights (model/kept.py amp_fp32): each linear reading a normalized stream keeps its own
    # 16-bit cast of it — as many copies as separate linears read it (q, k, v: 3; gate, up: 2)
    qkv_copies: int = 1
    mlp_copies: int = 1
    stream: int = 0  # bytes per element of the residual stream between layers (0: ``elem``; 4 under AMP)
    # sequence parallelism: the column-parallel linears keep their all-gathered input whole (DTensor's plan,
    # frameworks.json memory.sp_saved_input), not the shard all-gathered again in backward (Megatron)
    gathered: bool = False
    # bytes per element of the MLP's elementwise tensors (gate and up outputs, the activation's output): 0 is
    # ``elem``; 4 where the 4-bit linears return fp32 (QLoRA after PEFT's prepare_model_for_kbit_training)
    inner: int = 0
    # a fused SwiGLU/GeGLU keeps only its input, the gate and up outputs, and recomputes the activation in backward
    # (model/kept.py fused_glu_keeps_input): 2 of the eager 3 elementwise tensors per intermediate element
    fused_glu: bool = False
    # eager attention whose softmax runs in fp32 and is cast back (Hugging Face's eager_attention_forward:
    # softmax(scores, dtype=torch.float32).to(query.dtype)): the fp32 probabilities its backward reads beside the
    # 16-bit copy P·V keeps — where Megatron's fused kernel (or torch.compile) keeps one 16-bit tensor
    softmax_fp32: bool = False
    # the scores soft-capped before the softmax, cap·tanh(x/cap) (Gemma 2's attn_logit_softcapping under transformers'
    # eager attention): tanh keeps its output for backward, one more score-sized tensor
    softcap: bool = False

    @property
    def norm(self) -> float:
        return self.norm_in or self.elem

    @property
    def in_rep(self) -> float:
        """The share of a column-parallel linear's input (the hidden stream) one rank keeps."""
        return 1 / self.t if self.sp and not self.gathered else 1.0


def layer_terms(m: ModelSpec, kind: int, x: ActShape) -> dict[str, float]:
    """Bytes of each activation a block of ``m.kinds[kind]`` keeps, without recomputation (see module doc)."""
    lg = m.kinds[kind]
    rep = 1 / x.t if x.sp else 1.0           # the part outside the TP region
    terms = _attention_terms(m, x, rep) if lg.attends else _conv_terms(m, x, rep) if lg.mixer == "conv" else {}
    if lg.scan:  # beside attention (Falcon-H1) the in-projection reads the normed input q, k and v read
        scan = ssm_terms(m, lg.scan, x.s * x.b, x.t, rep, x.elem, x.norm, x.linear_in)
        terms.update({k: v for k, v in scan.items() if not (lg.attends and k in ("mixer_norm_input", "qkv_input"))})
    if lg.mlp:
        terms.update(_mlp_terms(m, lg.moe, x, rep))
    if x.method == "full":
        return terms
    terms = lora_terms(m, kind, x, terms)
    if x.dora:  # base_result and lora_result for the magnitude's gradient; with dropout the base GEMM's inputs
        per_token, per_layer = dora_kept(lg, x.lora_targets, x.t, x.elem, x.lora_dropout, x.lora_copy > 0)
        terms["dora"] = per_token * x.s * x.b + per_layer
    return terms


def _attention_terms(m: ModelSpec, x: ActShape, rep: float) -> dict[str, float]:
    s, b, t, e = x.s, x.b, x.t, x.elem
    h, a, d, dv = m.hidden, m.n_heads, m.head_dim, m.v_head_dim
    kv_local = max(m.n_kv_heads / t, 1.0)  # K/V heads on one rank (replicated when t > kv)
    if m.kv_lora_rank:  # MLA: K and V are expanded per query head
        kv_local = a / t
    sbh = s * b * h
    terms = {
        # attention block
        "attn_norm_input": x.norm * sbh * rep,
        "qkv_input": x.linear_in * sbh * x.in_rep * x.qkv_copies,
        "q": e * s * b * a * d / t,
        "k": e * s * b * kv_local * d,
        "v": e * s * b * kv_local * dv,
        "out_proj_input": x.linear_in * s * b * a * dv / t,
    }
    if m.kv_lora_rank:
        lat = m.q_lora_rank * 2 + m.kv_lora_rank * 2 + m.qk_rope_dim
        terms["mla_latents"] = e * s * b * lat * rep
    if x.flash:
        terms["attn_core"] = 4 * a * s * b / t  # fp32 log-sum-exp per query row
    else:
        terms["attn_core"] = score_bytes(x) * a * s * s * b / t
    if x.dropout:
        terms["dropout_masks"] = 2 * sbh * rep
    return terms


def score_bytes(x: ActShape) -> float:
    """Bytes eager attention keeps per score element: the softmax output its backward reads, and what P·V keeps —
    the same 16-bit tensor (Korthikanti et al. 2022 Sec. 4.1: 2 B), or, where the softmax runs in fp32 and is cast
    back (``softmax_fp32``), the fp32 output beside its cast (4 + 2 B; one tensor in fp32 training); with dropout its
    1-byte mask and its output in place of the cast (Korthikanti: 2 + 1 + 2 B); a soft-cap's tanh output beside them
    (``softcap``: tanh's backward reads its output, 1 - y²)."""
    cap = x.elem if x.softcap else 0
    if not x.softmax_fp32:
        return x.elem + ((1 + x.elem) if x.dropout else 0) + cap
    return 4 + (x.elem if x.elem < 4 or x.dropout else 0) + (1 if x.dropout else 0) + cap


def _conv_terms(m: ModelSpec, x: ActShape, rep: float) -> dict[str, float]:
    """A gated short convolution (LFM2's Lfm2ShortConv): the norm's and the in-projection's inputs, its output B, C,
    x (kept by the two products), B·x (the convolution's input), the convolution's output (kept by C·y) and C·y (the
    out-projection's input)."""
    sbh = x.s * x.b * m.hidden
    return {"mixer_norm_input": x.norm * sbh * rep, "qkv_input": x.linear_in * sbh * rep,
            "in_proj_output": x.elem * 3 * sbh / x.t, "conv_input": x.elem * sbh / x.t,
            "conv_output": x.elem * sbh / x.t, "ssm_out_proj_input": x.linear_in * sbh / x.t}


def _mlp_terms(m: ModelSpec, moe_layer: bool, x: ActShape, rep: float) -> dict[str, float]:
    s, b, t, e, h = x.s, x.b, x.t, x.elem, m.hidden
    sbh = s * b * h
    terms = {"mlp_norm_input": x.norm * sbh * rep}
    terms["mlp_input"] = x.linear_in * sbh * x.in_rep * x.mlp_copies
    inner = x.inner or e
    per_f = ((2 if x.fused_glu else 3) * inner + x.linear_in) if m.gated_mlp else (inner + x.linear_in)  # gated: 8
    # (2+2+2+2; fused 6), else 4
    if moe_layer:
        k, n_exp = m.top_k, m.n_experts
        terms["router"] = 8 * s * b * n_exp * rep  # fp32 logits + probabilities
        terms["expert_dispatch"] = (x.linear_in + e) * s * b * k * h * rep  # routed copies in and out
        terms["expert_mlp"] = per_f * s * b * k * m.moe_ffn / t
        if m.shared_ffn:
            terms["shared_expert_mlp"] = per_f * s * b * m.shared_ffn / t
    else:
        terms["mlp"] = per_f * s * b * m.ffn / t
    return terms


def lora_terms(m: ModelSpec, kind: int, x: ActShape, terms: dict[str, float]) -> dict[str, float]:
    """A LoRA/QLoRA layer's activations, from the full fine-tune's ``terms``: a frozen linear keeps nothing of its
    input (its weight needs no gradient) — QLoRA's 4-bit base neither: bitsandbytes' MatMul4Bit.forward saves
    ``ctx.tensors = (None, B)``, the packed weight only, since 0.43.2 (commit 9e753741, 2024-07-16, "delete useless
    buffered activation"; before it kept its input A), and torchao's LinearNF4 (torchtune) keeps only the NF4
    weight —; each adapter keeps its own copy of its input — PEFT casts the input to the adapters' fp32, autocast
    casts it back to bf16 (``lora_copy`` bytes per element) — or the input itself, shared by the adapters on it
    (``lora_copy`` 0: torchtune's LoRALinear, or fp32 training), plus its rank-r output and, under autocast, a bf16
    copy of its two matrices per micro-batch. With ``lora_dropout`` (PEFT: lora_B(lora_A(dropout(x)))) each adapter also
    keeps its dropout's mask, 1 B per element (native_dropout_cuda: a bool mask), and where adapters would share the
    input, each keeps its own dropout output instead. Measured (PEFT 0.21.2, transformers 5.24, torch 2.13,
    saved_tensors_hooks; Llama shapes h 512, f 1408, 8 heads, 2 K/V heads, s 256, bf16 base under CPU autocast): all
    seven projections 49.7 B per token per hidden unit per layer, q/v only 34.1, the full fine-tune 43.1 — the
    formula gives 49.7, 34.1 and 43.1. Expert matrices (MoE) keep the full fine-tune's count where the stack adapts
    them; frozen (``NO_EXPERTS``: PEFT) they keep what a frozen dense MLP keeps."""
    s, b, t, e = x.s, x.b, x.t, x.elem
    out = dict(terms)
    lg = m.kinds[kind]
    adapted = [w for w in lg.weights if w.group in ("attention", "mlp", "shared_expert")
               and is_lora_target(w, x.lora_targets)]
    # the frozen projections' inputs are not kept (the adapters keep theirs below) — but an 8-bit base's are:
    # bitsandbytes' MatMul8bitLt.forward keeps its input A (ctx.tensors = (CAt, subA, A)) whenever it needs grad,
    # as is, so the normed stream once for q/k/v and once for gate/up (fp32 where PEFT upcast the norms)
    kept_in = (x.stream or e) * s * b * m.hidden * x.in_rep if (int8 := x.method == "lora-int8") else 0.0
    out["qkv_input"] = kept_in if "qkv_input" in terms else 0.0
    out["mlp_input"] = kept_in if "mlp_input" in terms else 0.0
    if "ssm_out_proj_input" in out:  # a recurrent mixer's out_proj reads the gated norm's output, kept by no kernel
        out["ssm_out_proj_input"] = 0.0
    ie = x.inner or e  # the MLP's elementwise tensors: fp32 where the 4-bit linears return the fp32 stream's dtype
    inner = ie if m.gated_mlp and not x.fused_glu else 0.0  # the activation's input and output, the up projection's
    if "mlp" in out:  # an 8-bit down projection keeps its input, the activation's product, too
        out["mlp"] = (2 * ie + inner + (ie if int8 else 0)) * s * b * m.ffn / t
    if "shared_expert_mlp" in out:
        out["shared_expert_mlp"] = (2 * ie + inner) * s * b * m.shared_ffn / t
    if "expert_mlp" in out and x.lora_targets[-1:] == (NO_EXPERTS,):  # frozen routed experts, no adapter on them:
        # their linears keep no input (no weight gradient) — the routed copy in and the down projection's input —,
        # the activation its own (transformers 5's grouped experts under PEFT)
        out["expert_mlp"] = (2 * ie + inner) * s * b * m.top_k * m.moe_ffn / t
        out["expert_dispatch"] = e * s * b * m.top_k * m.hidden * (1 / t if x.sp else 1.0)
    kept = 0.0
    shared: set[tuple[str, bool]] = set()  # (weight group, row-parallel) of the inputs adapters keep themselves
    for w in adapted:
        leaf = w.name.rsplit(".", 1)[-1]
        out_f, in_f = w.shape
        row = leaf in ROW_PARALLEL_LEAVES  # its input: the heads' output or the MLP's inner product
        local_in = in_f / t if row else in_f * x.in_rep
        mask = 1.0 if x.lora_dropout else 0.0  # torch's dropout keeps a bool mask for its backward
        if x.lora_copy:
            kept += (x.lora_copy + mask) * s * b * local_in * w.count
        elif x.lora_dropout:  # its own dropout output in place of the shared input, and the mask
            kept += (x.linear_in + mask) * s * b * local_in * w.count
        elif not (row and w.group == "attention") and not int8:  # the heads' output: kept by attention; an
            shared.add((w.group, row))  # 8-bit base keeps the input the adapters share (above)
        kept += e * s * b * x.lora_rank * w.count  # the rank-r output the second matrix reads
        kept += x.lora_weight_cast * x.lora_rank * (out_f + in_f) / t * w.count
    for group, row in shared:  # the input tensor itself, once for the adapters that share it
        width = (m.ffn if group == "mlp" else m.shared_ffn) / t if row else m.hidden * x.in_rep
        kept += x.linear_in * s * b * width
    out["lora_inputs"] = kept
    return out


def _int8_ctx_inputs(m: ModelSpec, kind: int, x: ActShape) -> float:
    """lora-int8 under full recompute: bitsandbytes' MatMul8bitLt.forward keeps each 8-bit linear's input as an
    attribute of its ctx (``ctx.tensors = (CAt, subA, A)``), not through save_for_backward, which non-reentrant
    activation checkpointing (TRL's use_reentrant=False, transformers 5's default) cannot free: every block keeps its
    linears' inputs — the normed stream for q/k/v and for gate/up (fp32 where PEFT upcast the norms), the heads'
    output, the activation's product — until its backward (bitsandbytes autograd/_functions.py @95f9af30; issue #2034
    for MatMul4Bit's weight)."""
    lg = m.kinds[kind]
    if x.method != "lora-int8":
        return 0.0
    sb, stream = x.s * x.b, x.stream or x.elem
    heads = x.elem * m.n_heads * m.v_head_dim / x.t + stream * m.hidden * x.in_rep if lg.attends else 0.0
    mlp = stream * m.hidden * x.in_rep + (x.inner or x.elem) * m.ffn / x.t if lg.mlp and not lg.moe else 0.0
    return sb * (heads + mlp)


def op_sac_bytes(m: ModelSpec, kind: int, x: ActShape) -> float:
    """torchtitan per-op SAC: layer input + every other matmul output + attention output and LSE."""
    lg = m.kinds[kind]
    rep = 1 / x.t if x.sp else 1.0
    saved = (x.stream or x.elem) * x.s * x.b * m.hidden * rep
    mats = [w for w in lg.weights if w.is_matrix and w.group in LORA_GROUPS]
    for i, w in enumerate(mats):
        if i % 2 == 0:  # the 1st, 3rd, ... matmul of the block (torchtitan's mm_count odd)
            per_token = w.shape[0] * (m.top_k if w.group == "expert" else 1)
            saved += x.elem * x.s * x.b * per_token / x.t
    if lg.attends:
        saved += x.elem * x.s * x.b * m.n_heads * m.v_head_dim / x.t + 4 * m.n_heads * x.s * x.b / x.t
    return saved


@lru_cache(maxsize=65536)
def layer_bytes(m: ModelSpec, kind: int, x: ActShape, recompute: str) -> float:
    """Bytes one block of ``m.kinds[kind]`` keeps between its forward and backward pass (``recompute``: a mode, or
    selective by module, ``Layout.recompute_mode``)."""
    if recompute == "full":
        return (x.stream or x.elem) * x.s * x.b * m.hidden * (1 / x.t if x.sp else 1.0) + _int8_ctx_inputs(m, kind, x)
    terms = layer_terms(m, kind, x)
    modules = modules_of(recompute)
    if modules is not None and recompute != "selective":
        return sum(terms.values()) - dropped(terms, modules, x.flash, _moe_act_kept(m, x))[0]
    if recompute in ("selective", "selective-op") and not x.flash:
        terms.pop("attn_core", None)
    if recompute == "selective-op":
        return min(op_sac_bytes(m, kind, x), sum(terms.values()))
    return sum(terms.values())


def _moe_act_kept(m: ModelSpec, x: ActShape) -> float:
    """What a block's experts keep with their activation function recomputed: the up/gate projections' outputs."""
    return (2 if m.gated_mlp else 1) * (x.inner or x.elem) * x.s * x.b * m.top_k * m.moe_ffn / x.t


@lru_cache(maxsize=65536)
def module_working_set(m: ModelSpec, kind: int, x: ActShape, recompute: str) -> float:
    """Selective recomputation by module: the largest module's bytes of one block, rebuilt in backward while its
    backward runs (model/recompute_modules.py); 0 for any other mode."""
    modules = modules_of(recompute)
    if modules is None or recompute == "selective":
        return 0.0
    return dropped(layer_terms(m, kind, x), modules, x.flash, _moe_act_kept(m, x))[1]


@lru_cache(maxsize=65536)
def recompute_working_set(m: ModelSpec, kind: int, x: ActShape) -> float:
    """Full recompute: the backward pass rebuilds one block's activations at a time."""
    return sum(layer_terms(m, kind, x).values())


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False) -> float:
    """Korthikanti et al. 2022, Eq. 2 (t=1: Eq. 1) and Eq. 4 (sequence parallel): 16-bit GPT layer,
    dropout, eager softmax. s seq len, b micro-batch, h hidden, a heads, t tensor-parallel size."""
    if sp:
        return s * b * h * (34 / t + 5 * a * s / (h * t))
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


# a chunked fused linear cross-entropy's budget for one chunk's fp32 logits: unsloth-zoo fused_losses/
# cross_entropy_loss.py target_gb = min(half the free memory, 4 GiB), "the max GB memory the fused loss can use"
UNSLOTH_CHUNK_BYTES = 4 * 2**30


def fused_linear_loss_bytes(kind: str, m: ModelSpec, tokens: int, elem: float = 2.0) -> float:
    """What a fused linear cross-entropy holds on the last stage: one chunk's logits and the LM head input's
    gradient, which it fills in forward (``elem`` bytes per hidden element: the 16-bit activations').

    * ``unsloth`` (unsloth-zoo ``unsloth_fused_ce_loss``): chunks of fp32 logits, 4 B each, within
      ``UNSLOTH_CHUNK_BYTES`` (which shrinks to half the free memory on a fuller GPU: this is its upper end);
    * ``liger`` (Liger Kernel ``fused_linear_cross_entropy_forward``): chunk_size = next_power_of_2(ceil(BT /
      ceil(V / H))) rows of logits in the input's dtype, the gradient written in place — about the size of the
      hidden states, "the same memory consumption as BT x H" (its comment)."""
    v, h = m.vocab, m.hidden
    if kind == "unsloth":
        chunk = min(4.0 * tokens * v, UNSLOTH_CHUNK_BYTES)
    else:
        rows = 1 << max(0, math.ceil(tokens / math.ceil(v / h)) - 1).bit_length()
        chunk = elem * min(rows, tokens) * v
    return chunk + elem * tokens * h


def logits_bytes(m: ModelSpec, s: int, b: int, t: int, per_logit: float = 12.0) -> float:
    """The LM head's output and the loss's buffers on the last stage.

    Eager PyTorch (Hugging Face, torchtitan) computes bf16 logits, upcasts them to fp32 and
    runs log-softmax + NLL; log-softmax keeps its fp32 output for backward. The peak comes at
    the start of backward, while every activation is still held: the saved fp32 log-softmax
    output (4 B), the fp32 gradient arriving from NLL (4 B) and the fp32 gradient it produces
    (4 B) — 12 bytes per logit, s·b·V/t logits per rank (vocab-parallel). (The forward's
    transient is 10 B: bf16 logits + fp32 copy + fp32 output.) Korthikanti et al. count
    4·s·b·V/t (fused fp32 loss); chunked/fused losses (e.g. Liger) approach that. ``per_logit``:
    the loss as the framework runs it (model/software.py).
    """
    return per_logit * s * b * m.vocab / t
