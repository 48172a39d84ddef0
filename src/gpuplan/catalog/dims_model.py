"""A model given by its dimensions, as papers' tables and launch scripts state them — ``{layers: 24, hidden: 2304,
heads: 24, ffn: 9216, vocab: 51200}``, Megatron-LM's ``num_layers``/``hidden_size``/``ffn_hidden_size``/
``num_query_groups``, MPT's ``n_layers``/``d_model`` — without a ``model_type``: read as the decoder those
dimensions describe, every choice named under ``assumed``. catalog/models.py routes inline models here.

The rule:
* a gated MLP (SwiGLU) — said by ``swiglu: true``, an activation word (swiglu, silu, geglu), an architecture text
  naming SwiGLU, Llama or RMSNorm, grouped-query attention (fewer key/value heads than query heads), or an FFN
  width that is not 4 × hidden — reads as a Llama-shaped decoder (RMSNorm, RoPE, SwiGLU, no biases, untied
  embeddings: ``model_type: llama``); its FFN, when not given, is 8h/3 rounded up to a multiple of 256 (Llama);
* otherwise a GPT-shaped decoder (LayerNorm, learned positions, GeLU MLP of ``ffn`` = 4 × hidden unless given,
  biases, tied embeddings: Megatron-LM's GPT and GPT-2, ``model_type: gpt2``);
* vocabulary 50,257 (the GPT-2 BPE) for a GPT-shaped and 32,000 for a Llama-shaped one unless given; positions
  the given sequence length, else 2,048.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec

# each dimension's spellings (papers, Megatron-LM arguments, MPT and GPT-2 configs, Hugging Face configs)
SYNONYMS: dict[str, tuple[str, ...]] = {
    "layers": ("layers", "n_layers", "num_layers", "num_hidden_layers", "n_layer", "depth"),
    "hidden": ("hidden", "hidden_size", "d_model", "dim", "model_dim", "width"),
    "heads": ("heads", "n_heads", "num_attention_heads", "num_heads", "attention_heads"),
    "kv_heads": ("kv_heads", "num_key_value_heads", "n_kv_heads", "num_query_groups", "num_kv_heads", "kv_groups"),
    "ffn": ("ffn", "ffn_hidden_size", "intermediate_size", "ffn_dim", "d_ff", "mlp_dim", "ffn_size"),
    "vocab": ("vocab", "vocab_size", "padded_vocab_size", "n_vocab"),
    "seq": ("seq_len", "seq", "seq_length", "max_position_embeddings", "max_seq_len", "n_positions", "n_ctx"),
    "head_dim": ("head_dim", "kv_channels", "head_size", "d_head", "d_kv"),
    # a mixture of experts: routed experts, how many each token takes, and each expert's FFN width (Megatron-LM's
    # --num-experts/--moe-router-topk/--moe-ffn-hidden-size, the Hugging Face configs' names)
    "experts": ("experts", "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "n_experts"),
    "top_k": ("top_k", "moe_router_topk", "num_experts_per_tok", "experts_per_token", "moe_top_k", "topk"),
    "moe_ffn": ("moe_ffn", "moe_ffn_hidden_size", "moe_intermediate_size", "expert_ffn", "expert_hidden_size"),
}
SHARED_EXPERTS = ("n_shared_experts", "num_shared_experts", "moe_shared_expert_intermediate_size",
                  "shared_expert_intermediate_size")
# the other keys the reading uses (the MLP's kind, the embeddings' tie, Meta's FFN rule, the name); anything else is
# listed as not used under assumed
READ_KEYS = frozenset({"name", "swiglu", "gated", "activation", "hidden_act", "activation_function", "arch",
                       "architecture", "normalization", "untie_embeddings_and_output_weights", "tie_word_embeddings",
                       "multiple_of", "ffn_dim_multiplier", *SHARED_EXPERTS})
_GATED_WORDS = re.compile(r"swiglu|silu|geglu|swish|llama|rmsnorm|gated")


def has_dims(m: Mapping[str, Any]) -> bool:
    """Whether a mapping gives a decoder's layers, width and heads in any of their spellings."""
    return all(_first(m, key) is not None for key in ("layers", "hidden", "heads"))


def _first(m: Mapping[str, Any], key: str) -> Any:
    for k in SYNONYMS[key]:
        if k in m and m[k] is not None:
            return m[k]
    return None


def _gated(m: Mapping[str, Any], h: int, heads: int, kv: int, ffn: int | None) -> tuple[bool, str]:
    """Whether the dimensions describe a gated (SwiGLU) MLP, and what said so."""
    for key in ("swiglu", "gated"):
        if isinstance(m.get(key), bool):
            return m[key], f"{key}: {str(m[key]).lower()}"
    for key in ("activation", "hidden_act", "activation_function", "arch", "architecture", "normalization"):
        text = m.get(key)
        if isinstance(text, str) and text.strip():
            if _GATED_WORDS.search(text.lower()):
                return True, f"{key} {text!r}"
            if key != "normalization" and re.search(r"gelu|relu|gpt", text.lower()):
                return False, f"{key} {text!r}"
    if m.get("multiple_of") is not None or m.get("ffn_dim_multiplier") is not None:
        return True, "Meta's params.json (multiple_of: the SwiGLU FFN rule of Llama's model.py)"
    if kv < heads:
        return True, "grouped-query attention"
    if ffn is not None and ffn != 4 * h:
        return True, f"an FFN of {ffn / h:.3g} × hidden (a plain GeLU MLP is 4 ×)"
    return False, "no gated MLP, activation or grouped-query attention stated"


def from_dims(m: Mapping[str, Any]) -> ModelSpec:
    """The decoder a mapping of dimensions describes (the module docstring's rule), its reading under ``assumed``."""
    from gpuplan.catalog.models import _from_config
    from gpuplan.catalog.params_model import count

    dims = {key: _first(m, key) for key in SYNONYMS}
    if dims["vocab"] == -1:  # Meta's Llama 1/2 params.json: the tokenizer sets the vocabulary (-1 in the file)
        dims["vocab"] = None
    h, L = count(dims["hidden"], "hidden"), count(dims["layers"], "layers")
    heads = count(dims["heads"], "heads")
    kv = count(dims["kv_heads"], "kv_heads") if dims["kv_heads"] is not None else heads
    ffn = count(dims["ffn"], "hidden") if dims["ffn"] is not None else None
    d = count(dims["head_dim"], "hidden") if dims["head_dim"] is not None else None
    if (d is None and h % heads) or heads % kv:
        raise GpuplanError(f"model dimensions: heads {heads} must divide hidden {h} and kv_heads {kv} divide heads "
                           "(head_dim = hidden / heads unless given; each key/value head serves heads / kv_heads "
                           "query heads)")
    gated, why = _gated(m, h, heads, kv, ffn)
    if d is not None and d * heads != h and not gated:  # a head width apart from hidden / heads: Llama's head_dim,
        # the plain MLP's parameters and FLOPs kept: a SwiGLU of 2/3 its width (3·h·2f/3 = 2·h·f)
        gated, why = True, f"head_dim {d} ≠ hidden / heads; a GeLU MLP {ffn or 4 * h} as a SwiGLU of its size"
        ffn = 2 * (ffn or 4 * h) // 3
    seq = count(dims["seq"], "seq") if dims["seq"] is not None else 2048
    tied = _tied(m)
    if gated:
        ffn = ffn or _meta_ffn(m, h) or _llama_ffn(h)
        vocab = count(dims["vocab"], "vocab") if dims["vocab"] is not None else 32000
        cfg: dict[str, Any] = {
            "model_type": "llama", "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": heads,
            "num_key_value_heads": kv, "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": seq,
            "tie_word_embeddings": bool(tied), **({"head_dim": d} if d is not None else {})}
        shape = (f"a Llama-shaped decoder ({why}): RMSNorm, RoPE, SwiGLU FFN {ffn}, no biases, "
                 f"{'tied' if tied else 'untied'} embeddings" + (f", head_dim {d}" if d is not None else ""))
    else:
        vocab = count(dims["vocab"], "vocab") if dims["vocab"] is not None else 50257
        ffn = ffn or 4 * h
        cfg = {"model_type": "gpt2", "n_embd": h, "n_layer": L, "n_head": heads, "n_inner": ffn, "vocab_size": vocab,
               "n_positions": seq, "tie_word_embeddings": tied is not False}
        shape = (f"a GPT-shaped decoder ({why}): LayerNorm, learned positions, GeLU MLP {ffn}, biases, "
                 f"{'untied' if tied is False else 'tied'} embeddings (Megatron-LM's GPT, GPT-2)")
    if dims["experts"] is not None:
        cfg, shape = _moe(m, dims, cfg, shape)
    vocab_note = "" if dims["vocab"] is not None else \
        " (-1 in Meta's params.json: the tokenizer's)" if _first(m, "vocab") == -1 else " (not given)"
    unused = sorted(k for k in m if k not in READ_KEYS and not any(k in names for names in SYNONYMS.values()))
    rule = (f"model given by its dimensions, read as {shape}; vocabulary {vocab}"
            f"{vocab_note}, {seq} positions"
            f"{'' if dims['seq'] is not None else ' (not given)'}"
            + (f"; not used (no bearing on the shape read): {', '.join(map(str, unused))}" if unused else ""))
    name = str(m.get("name") or f"custom-{L}x{h}")
    return _from_config(cfg, "model dimensions", name, (rule,))


def _moe(m: Mapping[str, Any], dims: dict[str, Any], cfg: dict[str, Any], shape: str) -> tuple[dict[str, Any], str]:
    """The decoder's MLPs as routed experts (Mixtral's block: every MLP a top-k of SwiGLU experts), where the
    dimensions name experts; a shared expert needs its family's config.json."""
    from gpuplan.catalog.params_model import count

    shared = [k for k in SHARED_EXPERTS if m.get(k)]
    if shared:
        raise GpuplanError(f"model dimensions: {shared[0]} names a shared expert beside the routed ones, which a "
                           "dimensions mapping does not describe: give the model's config.json (model_type "
                           "deepseek_v3, qwen2_moe, ...)")
    if dims["top_k"] is None:
        raise GpuplanError("model dimensions: experts given without the experts each token takes: add top_k "
                           "(moe_router_topk, num_experts_per_tok)")
    experts, k = count(dims["experts"], "experts"), count(dims["top_k"], "top_k")
    if k > experts:
        raise GpuplanError(f"model dimensions: top_k {k} is more than the {experts} experts")
    h = cfg.get("hidden_size") or cfg["n_embd"]
    ffn = count(dims["moe_ffn"], "hidden") if dims["moe_ffn"] is not None else \
        cfg.get("intermediate_size") or _llama_ffn(h)
    moe = {"model_type": "mixtral", "hidden_size": h, "num_hidden_layers": cfg.get("num_hidden_layers") or
           cfg["n_layer"], "num_attention_heads": cfg.get("num_attention_heads") or cfg["n_head"],
           "num_key_value_heads": cfg.get("num_key_value_heads") or cfg["n_head"], "intermediate_size": ffn,
           "num_local_experts": experts, "num_experts_per_tok": k, "vocab_size": cfg["vocab_size"],
           "max_position_embeddings": cfg.get("max_position_embeddings") or cfg["n_positions"],
           "tie_word_embeddings": cfg["tie_word_embeddings"]}
    return moe, (f"a Mixtral-shaped mixture of experts (experts given): every MLP routed to {k} of {experts} SwiGLU "
                 f"experts of width {ffn}, RMSNorm, RoPE, no biases; not {shape}")


def _llama_ffn(h: int) -> int:
    """A gated MLP's width when the dimensions give none: 8h/3 rounded up to a multiple of 256 (Llama)."""
    return -(-8 * h // 3 // 256) * 256


def _meta_ffn(m: Mapping[str, Any], h: int) -> int | None:
    """The FFN width of Meta's params.json (llama/model.py FeedForward): 2/3 of 4·dim, times ffn_dim_multiplier
    when given, rounded up to a multiple of multiple_of — Llama 3 70B: dim 8192, 1.3, 4096 → 28,672."""
    from gpuplan.catalog.params_model import count

    if m.get("multiple_of") is None:
        return None
    step = count(m["multiple_of"], "hidden")
    width = int(2 * 4 * h / 3)
    mult = m.get("ffn_dim_multiplier")
    if mult is not None:
        if isinstance(mult, bool) or not isinstance(mult, int | float) or not 0 < mult <= 16:
            raise GpuplanError(f"model dimensions: ffn_dim_multiplier {mult!r} is not a factor between 0 and 16")
        width = int(mult * width)
    return step * -(-width // step)


def _tied(m: Mapping[str, Any]) -> bool | None:
    """Whether the embeddings are tied to the LM head, where the mapping says (Megatron's untie flag, or HF's)."""
    if isinstance(m.get("untie_embeddings_and_output_weights"), bool):
        return not m["untie_embeddings_and_output_weights"]
    if isinstance(m.get("tie_word_embeddings"), bool):
        return m["tie_word_embeddings"]
    return None
