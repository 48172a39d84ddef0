"""Per-architecture builders: a Hugging Face ``config.json`` mapping → ``ModelSpec``.

Each builder lists every parameter tensor the matching ``transformers`` model class creates, with
its exact shape, so ``ModelSpec.params`` equals ``sum(p.numel() for p in model.parameters())``.
Weight names are module paths inside one block (``self_attn.q_proj``); the leaf is the module name
PEFT matches (``q_proj``), and a bias carries the same name as its matrix with ``bias=True``.
Defaults are those of the ``transformers`` config class; any default that shapes the weights is
recorded in ``ModelSpec.assumed`` so nothing is assumed silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpuplan.catalog.builder_parts import (
    MAX_CONFIG_INT,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_PARAMS,
    MAX_VOCAB,
    Cfg,
    emb,
    gated,
    groups,
    lin,
    nrm,
    spec,
    tie,
    windows,
)
from gpuplan.catalog.families_conv import lfm2
from gpuplan.catalog.families_gpt import bloom, falcon, gpt2, gpt_bigcode, gpt_neox, gptj, mpt, opt
from gpuplan.catalog.families_gpt_more import biogpt, gpt_neo, persimmon, xglm
from gpuplan.catalog.families_hybrid import bamba, falcon_h1, granitemoehybrid, nemotron_h, olmo_hybrid, qwen3_next
from gpuplan.catalog.families_llama import LLAMA_LIKE
from gpuplan.catalog.families_ln import cohere, dbrx, nemotron, phi, stablelm, starcoder2
from gpuplan.catalog.families_mla import MLA_TYPES, deepseek, kimi_linear
from gpuplan.catalog.families_moa import jetmoe
from gpuplan.catalog.families_moe import llama_moe, moe_required
from gpuplan.catalog.families_more2 import MORE2
from gpuplan.catalog.families_remote import chatglm_config, qwen_config
from gpuplan.catalog.families_ssm import jamba, mamba, mamba2
from gpuplan.catalog.families_v4 import V4_BUILDERS
from gpuplan.catalog.families_v5_a import V5A_BUILDERS
from gpuplan.catalog.families_v5_b import V5B_BUILDERS
from gpuplan.catalog.families_v5_c import V5C_BUILDERS
from gpuplan.catalog.families_v5_d import V5D_BUILDERS
from gpuplan.catalog.families_vlm import (
    GEMMA3_TEXT,
    LLAMA4_TEXT,
    LLAVA_TEXT,
    MLLAMA_CROSS_LAYERS,
    MLLAMA_TEXT,
    ONEVISION_TEXT,
    PALIGEMMA_TEXT,
    QWEN3VL_TEXT,
    QWEN25VL_TEXT,
    idefics3_vision_params,
    internvl_vision_params,
    llama4_vision_params,
    llava_vision_params,
    mllama_vision_params,
    onevision_vision_params,
    paligemma_vision_params,
    pixtral_params,
    qwen2_vl_vision_params,
    qwen3_vl_vision_params,
    qwen25_vl_vision_params,
    siglip_params,
    text_config,
    vision_note,
)
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, Weight

__all__ = ["BUILDERS", "GENERIC_DECODERS", "MAX_CONFIG_INT", "MAX_HIDDEN", "MAX_LAYERS", "MAX_PARAMS", "MAX_VOCAB",
           "Cfg", "deepseek", "emb", "gated", "gemma3", "groups", "lin", "llama_like", "nrm", "spec", "tie"]


GENERIC_DECODERS = tuple(mt for mt, f in LLAMA_LIKE.items() if "generic" in f)


def _bias(c: Cfg, key: Any, default: bool = False) -> bool:
    return key if isinstance(key, bool) else (c.flag(key, default=default) if key else False)


def llama_like(c: Cfg, name: str) -> ModelSpec:
    f = LLAMA_LIKE[c.mt]
    if "keys" in f:  # the config class's attribute_map: its own key names for the Llama ones
        c.d = {**{new: c.d[old] for old, new in f["keys"].items() if c.d.get(old) is not None}, **c.d}
    if "note" in f:
        c.assumed.append(f"model_type {c.mt}: {f['note']}")
    if "generic" in f:
        c.assumed.append(f"model_type {c.mt} read through the generic Llama-shaped decoder mapping (RMSNorm, RoPE, "
                         f"SwiGLU, the Llama config keys): {f['generic']}")
    moe = f.get("moe")
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", *moe_required(moe))
    h, L, nh, V = (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
                   c.int("vocab_size"))
    nkv = c.kv_heads(nh, "num_key_value_heads")
    d = c.head_dim(h, nh, None if c.raw("head_dim") is not None else f.get("hd"))
    qkv_b = _bias(c, f.get("qkv"), f.get("qkv_default", False))
    # o's bias defaults as q/k/v's where one key sets both (gpt-oss attention_bias: true)
    o_b = _bias(c, f.get("o"), f.get("qkv_default", False) and f.get("o") == f.get("qkv"))
    mlp_b = _bias(c, f.get("mlp"), f.get("mlp_default", False))
    tied = tie(c, f["tie"])
    ffn = c.int("intermediate_size", default=0, minimum=0 if moe in ("qwen3_moe", "llama4") else 1, note=False)
    attn = _llama_attention(c, f, h, nh, nkv, d, qkv_b, o_b)
    ln = bool(f.get("ln"))  # LayerNorm with a bias (PhiMoE) instead of RMSNorm
    norms = nrm("input_layernorm", h, ln) + nrm("post_attention_layernorm", h, ln) if f.get("norms", 2) else []
    if f.get("post") and f.get("norms", 2) == 2:  # post-norm (OLMo 2/3, FlexOlmo, EXAONE 4): no input_layernorm
        norms = nrm("post_attention_layernorm", h, ln) + nrm("post_feedforward_layernorm", h, ln)
    if f.get("norms", 2) == 4:
        norms += nrm("pre_feedforward_layernorm", h) + nrm("post_feedforward_layernorm", h)
    m = llama_moe(c, moe, h, L, ffn)
    ffn = m.dense_ffn or ffn
    dense_mlp = _llama_mlp(f, h, ffn, mlp_b)
    if not all(m.sparse) and ffn == 0:
        c.require("intermediate_size")
    layers = [(attn + norms + (m.mlp if s else dense_mlp), s) for s in m.sparse]
    head = (nrm("norm", h, ln) if f.get("norms", 2) else []) + ([] if tied else emb("lm_head", V, h, "head"))
    if _bias(c, f.get("head_bias")):  # the LM head's own bias, apart from a tied weight (ERNIE 4.5 MoE)
        head.append(Weight(name="lm_head", shape=(V,), group="head", bias=True))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=d,
                ffn=0 if all(m.sparse) else ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", "model_max_length", default=f.get("pos", 2048)),
                gated_mlp=not f.get("plain"),
                norm="layernorm" if ln else "rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers), head=tuple(head), n_experts=m.experts, top_k=m.top_k, moe_ffn=m.ffn,
                shared_ffn=m.shared, activation=f.get("act", "silu"),
                post_norms=f.get("norms", 2) == 4 or f.get("post", False), **_llama_windows(c, f, L))


def _llama_mlp(f: dict[str, Any], h: int, ffn: int, bias: bool) -> list[Weight]:
    """The dense MLP: SwiGLU/GeGLU (gate, up, down; Phi-3 fuses gate and up) or, ``plain``, up and down only."""
    if f.get("fused") or f.get("gate_up"):
        return lin("mlp.gate_up_proj", 2 * ffn, h, "mlp") + lin("mlp.down_proj", h, ffn, "mlp")
    if f.get("plain"):
        xielu = [Weight(name=f"mlp.act_fn.{a}", shape=(1,), group="mlp", bias=True) for a in ("alpha_p", "alpha_n")]
        up, down = ("fc1", "fc2") if f.get("norms", 2) == 0 else ("up_proj", "down_proj")  # nanochat's names
        return (lin(f"mlp.{up}", ffn, h, "mlp", bias) + lin(f"mlp.{down}", h, ffn, "mlp", bias)
                + (xielu if f.get("act") == "xielu" else []))
    return gated("mlp", h, ffn, "mlp", bias) + (nrm("mlp.ffn_sub_norm", ffn) if f.get("sub_norms") else [])


def _llama_windows(c: Cfg, f: dict[str, Any], L: int) -> dict[str, Any]:
    """Sliding-window layers (builder_parts.windows) with the family's transformers defaults; Qwen 2/3 only
    with use_sliding_window, on the layers from max_window_layers on."""
    if "win" in f:
        return windows(c, L, f["win"], f.get("every"), full_every=f.get("full_every"))
    if "qwen_win" in f and c.flag("use_sliding_window", default=False):
        return windows(c, L, 4096, full_below=f["qwen_win"])
    return {}


def _llama_attention(c: Cfg, f: dict[str, Any], h: int, nh: int, nkv: int, d: int, qkv_b: bool,
                     o_b: bool) -> list[Weight]:
    """Self-attention weights of one block: q/k/v (or fused qkv), o, q/k norms where the family has them (or
    where its ``qk`` flag key says so) and gpt-oss's per-head attention sinks."""
    attn: list[Weight] = [Weight(name="self_attn.sinks", shape=(nh,), group="attention", bias=True)] \
        if f.get("sinks") else []
    if f.get("fused"):
        attn += lin("self_attn.qkv_proj", (nh + 2 * nkv) * d, h, "attention", qkv_b)
    else:
        attn += (lin("self_attn.q_proj", nh * d, h, "attention", qkv_b)
                 + lin("self_attn.k_proj", nkv * d, h, "attention", qkv_b)
                 + lin("self_attn.v_proj", nkv * d, h, "attention", qkv_b))
    attn += lin("self_attn.o_proj", h, nh * d, "attention", o_b)
    if f.get("attn_gate"):  # AFMoE, Beam: the attention output's sigmoid gate (Beam: with a bias per head)
        attn += lin("self_attn.gate_proj", nh * d, h, "attention")
        attn += [Weight(name="self_attn.gate_bias", shape=(nh,), group="attention", bias=True)] \
            if f.get("attn_gate") == "bias" else []
    if f.get("sub_norms"):  # BitNet: the norm before o_proj
        attn += nrm("self_attn.attn_sub_norm", h)
    qk = f.get("qk")
    if isinstance(qk, str) and qk != "full":  # a config flag turns the q/k norms on (GLM-4.5 use_qk_norm)
        qk = c.flag(qk, default=f.get("qk_default", False))
    if qk == "full":
        attn += nrm("self_attn.q_norm", nh * d) + nrm("self_attn.k_norm", nkv * d)
    elif qk:
        attn += nrm("self_attn.q_norm", d) + nrm("self_attn.k_norm", d)
    return attn


# ---- image-text wrappers: the decoder of text_config, the vision tower apart (families_vlm) ------------
def gemma3(c: Cfg, name: str) -> ModelSpec:
    """Gemma3ForConditionalGeneration: its language model is the Gemma 3 decoder of ``text_config`` (read as
    gemma3_text); the SigLIP vision tower and the projector are counted apart, in ``extra_params``, because a
    text step does not run them (an image fine-tune adds their weights and FLOPs: noted in assumed)."""
    t = text_config(c, "gemma3_text", GEMMA3_TEXT)
    vision = siglip_params(c, t.int("hidden_size"))
    vision_note(t, "gemma3", vision)
    return dataclasses.replace(llama_like(t, name), model_type="gemma3", extra_params=vision, frozen_params=vision)


def llama4(c: Cfg, name: str) -> ModelSpec:
    """Llama4ForConditionalGeneration (the released Llama 4 Scout and Maverick config.json): its language model is
    the Llama 4 decoder of ``text_config`` (read as llama4_text); the vision tower, its pixel-shuffle adapter and
    the projector are counted apart, in ``extra_params``."""
    t = text_config(c, "llama4_text", LLAMA4_TEXT)
    vision = llama4_vision_params(c, t.int("hidden_size"))
    vision_note(t, "llama4", vision)
    return dataclasses.replace(llama_like(t, name), model_type="llama4", extra_params=vision, frozen_params=vision)


def qwen2_5_vl(c: Cfg, name: str) -> ModelSpec:
    """Qwen2_5_VLForConditionalGeneration: its language model is a Qwen2 decoder (q/k/v biases), its keys at the
    file's top level or in text_config; the vision transformer and patch merger are counted apart, in
    ``extra_params``."""
    t = text_config(c, "qwen2", QWEN25VL_TEXT, flat=True)
    vision = qwen25_vl_vision_params(c)
    vision_note(t, "qwen2_5_vl", vision)
    return dataclasses.replace(llama_like(t, name), model_type="qwen2_5_vl", extra_params=vision, frozen_params=vision)


# image-text models whose decoder is text_config's own model_type: (the config class's default text model_type and
# shape, the vision tower and projector's parameters given the text width)
_LLAVA_LIKE: dict[str, tuple[str, dict[str, Any], Callable[[Cfg, int], int]]] = {
    "llava": ("llama", LLAVA_TEXT, llava_vision_params), "llava_next": ("llama", LLAVA_TEXT, llava_vision_params),
    "llava_onevision": ("qwen2", ONEVISION_TEXT, onevision_vision_params),
    "paligemma": ("gemma", PALIGEMMA_TEXT, lambda c, _: paligemma_vision_params(c)),
    "idefics3": ("llama", LLAVA_TEXT, idefics3_vision_params), "smolvlm": ("llama", LLAVA_TEXT, idefics3_vision_params),
    "internvl": ("qwen2", ONEVISION_TEXT, internvl_vision_params),
}
# wrappers whose own top-level tie_word_embeddings ties the decoder's head (InternVLConfig: default true), whatever
# text_config says
_TOP_TIE = {"internvl": True}


def llava(c: Cfg, name: str) -> ModelSpec:
    """LLaVA (llava), LLaVA-NeXT (llava_next), LLaVA-OneVision (llava_onevision), PaliGemma (paligemma), Idefics3 and
    SmolVLM (idefics3, smolvlm; their config classes' default decoder is Llama's too): the
    Llama-shaped decoder of ``text_config`` (its own model_type, else the config class's default), the vision tower
    and projector counted apart, in ``extra_params`` (families_vlm)."""
    default_kind, defaults, vision_params = _LLAVA_LIKE[c.mt]
    text = c.raw("text_config", default={})
    kind = text.get("model_type", default_kind) if isinstance(text, dict) else default_kind
    if kind not in LLAMA_LIKE:
        raise GpuplanError(f"{c.source}: text_config model_type {kind!r} of {c.mt} is not a Llama-shaped decoder "
                           f"gpuplan reads: give {{params: N}} for this model")
    top = {"tie_word_embeddings": c.flag("tie_word_embeddings", default=_TOP_TIE[c.mt])} if c.mt in _TOP_TIE else None
    t = text_config(c, kind, defaults, overrides=top)
    vision = vision_params(c, t.int("hidden_size"))
    vision_note(t, c.mt, vision)
    return dataclasses.replace(llama_like(t, name), model_type=c.mt, extra_params=vision, frozen_params=vision)


def mllama(c: Cfg, name: str) -> ModelSpec:
    """MllamaForConditionalGeneration (Llama 3.2 Vision): a Llama decoder of ``text_config`` whose
    cross_attention_layers are cross-attention blocks (q/k/v/o with q/k RMSNorms over head_dim and two tanh gates
    beside the MLP) and whose embedding holds 8 more rows than the vocabulary; the vision tower and projector counted
    apart (families_vlm.mllama_vision_params). A cross-attention block is timed as a self-attention block over the
    text: with images its keys and values come from the image tokens instead (noted)."""
    t = text_config(c, "llama", MLLAMA_TEXT)
    base = llama_like(t, name)
    cross = t.raw("cross_attention_layers", default=list(MLLAMA_CROSS_LAYERS))
    if not isinstance(cross, list) or any(not isinstance(i, int) or not 0 <= i < base.n_layers for i in cross):
        raise GpuplanError(f"{c.source}: text_config.cross_attention_layers must list layer indices below "
                           f"{base.n_layers}: fix the value")
    block = list(base.layers[0].weights)
    gates = [Weight(name=g, shape=(1,), group="attention", bias=True) for g in ("cross_attn_attn_gate",
                                                                                 "cross_attn_mlp_gate")]
    cross_block = block + nrm("cross_attn.q_norm", base.head_dim) + nrm("cross_attn.k_norm", base.head_dim) + gates
    crossing = set(cross)
    layers = groups([(cross_block if i in crossing else block, False) for i in range(base.n_layers)])
    vocab_rows = emb("embed_tokens", base.vocab + 8, base.hidden)
    vision = mllama_vision_params(c, base.hidden)
    vision_note(t, "mllama", vision)
    note = (f"model_type mllama: its {len(cross)} cross-attention blocks are timed as self-attention over the text "
            "(with images they attend to the image tokens; a text-only step skips them)")
    return dataclasses.replace(base, model_type="mllama", layers=layers, embedding=tuple(vocab_rows),
                               extra_params=vision, frozen_params=vision, assumed=(*base.assumed, note))


def qwen2_vl(c: Cfg, name: str) -> ModelSpec:
    """Qwen2VLForConditionalGeneration: a Qwen2 decoder (as Qwen2.5-VL's), Qwen2-VL's vision tower counted apart."""
    t = text_config(c, "qwen2", QWEN25VL_TEXT, flat=True)
    vision = qwen2_vl_vision_params(c)
    vision_note(t, "qwen2_vl", vision)
    return dataclasses.replace(llama_like(t, name), model_type="qwen2_vl", extra_params=vision, frozen_params=vision)


def qwen3_vl(c: Cfg, name: str) -> ModelSpec:
    """Qwen3VLForConditionalGeneration / Qwen3VLMoeForConditionalGeneration: the Qwen3 (or Qwen3-MoE) decoder of
    ``text_config``; the vision transformer, its patch merger and DeepStack mergers counted apart, in
    ``extra_params``."""
    moe = c.mt == "qwen3_vl_moe"
    t = text_config(c, "qwen3_moe" if moe else "qwen3", QWEN3VL_TEXT, flat=True)
    vision = qwen3_vl_vision_params(c)
    vision_note(t, c.mt, vision)
    return dataclasses.replace(llama_like(t, name), model_type=c.mt, extra_params=vision, frozen_params=vision)


# Qwen3_5TextConfig / Qwen3_5MoeTextConfig shape defaults (transformers 5.24) for a text_config that leaves one out
_QWEN35_TEXT = {"vocab_size": 248320, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 16}
_QWEN35_MOE_TEXT = {"vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
                    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                    "shared_expert_intermediate_size": 512}


def qwen3_5(c: Cfg, name: str) -> ModelSpec:
    """Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration: the gated delta-rule hybrid decoder of
    ``text_config`` (families_hybrid.qwen3_next); the vision transformer and its patch merger counted apart, in
    ``extra_params``."""
    moe = c.mt == "qwen3_5_moe"
    t = text_config(c, f"{c.mt}_text", _QWEN35_MOE_TEXT if moe else _QWEN35_TEXT)
    vision = qwen3_vl_vision_params(c, deepstack_mergers=False)
    vision_note(t, c.mt, vision)
    return dataclasses.replace(qwen3_next(t, name), model_type=c.mt, extra_params=vision, frozen_params=vision)


# MistralConfig defaults (transformers 5.24) for a Mistral 3 text_config that leaves a shape key out
_MISTRAL_TEXT = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 8}


def mistral3(c: Cfg, name: str) -> ModelSpec:
    """Mistral3ForConditionalGeneration (Mistral Small 3.1 / 3.2): the Mistral decoder of ``text_config``; the
    Pixtral vision encoder and the multi-modal projector counted apart, in ``extra_params``."""
    top_tie = c.raw("tie_word_embeddings")
    if top_tie is None:  # the head's tie: text_config's (transformers v4 saves it there), else Mistral3Config's: tied
        t = text_config(c, "mistral", {**_MISTRAL_TEXT, "tie_word_embeddings": True})
    else:  # the top-level key (v5 saves it there) wins
        t = text_config(c, "mistral", _MISTRAL_TEXT, overrides={"tie_word_embeddings": top_tie})
    vision = pixtral_params(c, t.int("hidden_size"))
    vision_note(t, "mistral3", vision)
    return dataclasses.replace(llama_like(t, name), model_type="mistral3", extra_params=vision, frozen_params=vision)


BUILDERS: dict[str, Callable[[Cfg, str], ModelSpec]] = {
    **{mt: llama_like for mt in LLAMA_LIKE},
    **{mt: deepseek for mt in MLA_TYPES},
    "gpt2": gpt2, "gpt-sw3": gpt2, "bloom": bloom, "opt": opt,
    "falcon": falcon, "RefinedWeb": falcon, "RefinedWebModel": falcon,
    "mpt": mpt, "gpt_neox": gpt_neox,
    "nemotron": nemotron, "starcoder2": starcoder2, "cohere": cohere, "cohere2": cohere, "gemma3": gemma3,
    "gptj": gptj, "codegen": gptj, "gpt_neo": gpt_neo, "persimmon": persimmon, "xglm": xglm, "biogpt": biogpt,
    "gpt_bigcode": gpt_bigcode, "phi": phi, "stablelm": stablelm, "dbrx": dbrx, "llama4": llama4,
    "qwen2_5_vl": qwen2_5_vl, "qwen2_vl": qwen2_vl, "qwen3_vl": qwen3_vl, "qwen3_vl_moe": qwen3_vl,
    "mistral3": mistral3, **{mt: llava for mt in _LLAVA_LIKE}, "mllama": mllama,
    "nemotron_h": nemotron_h, "qwen3_next": qwen3_next, "qwen3_5_text": qwen3_next, "qwen3_5_moe_text": qwen3_next,
    "qwen3_5": qwen3_5, "qwen3_5_moe": qwen3_5, "granitemoehybrid": granitemoehybrid,
    "bamba": bamba, "olmo_hybrid": olmo_hybrid, "falcon_h1": falcon_h1, "kimi_linear": kimi_linear,
    "lfm2": lfm2, "lfm2_moe": lfm2, "mamba2": mamba2, "mamba": mamba, "falcon_mamba": mamba,
    "jamba": jamba, "jetmoe": jetmoe,
    "qwen": lambda c, name: llama_like(qwen_config(c), name),
    "chatglm": lambda c, name: llama_like(chatglm_config(c), name),
    **MORE2,
    **V4_BUILDERS,
    **V5A_BUILDERS,
    **V5B_BUILDERS,
    **V5C_BUILDERS,
    **V5D_BUILDERS,
}
