"""Decoders published with their own modelling code (``trust_remote_code``), not shipped by ``transformers``:
Qwen (v1: Qwen-1.8B to 72B, model_type ``qwen``) and ChatGLM2, ChatGLM3 and GLM-4 (model_type ``chatglm``).
Each is a Llama-shaped block (RMSNorm, RoPE, SwiGLU) under its own key and module names: its config.json is
translated to the Llama keys and read by ``families.llama_like`` (catalog/families_llama.py ``qwen``,
``chatglm``), and the reading is listed under ``assumed``."""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.builder_parts import Cfg
from gpuplan.errors import GpuplanError

__all__ = ["chatglm_config", "qwen_config"]


def _translated(c: Cfg, keys: dict[str, Any], note: str) -> Cfg:
    t = Cfg({k: v for k, v in keys.items() if v is not None}, c.source, c.mt, c.quote)
    t.assumed = c.assumed + [f"model_type {c.mt} (remote code) read as a Llama-shaped decoder: {note}"]
    return t


def qwen_config(c: Cfg) -> Cfg:
    """Qwen v1 (Qwen/Qwen-7B modeling_qwen.py, QWenConfig): ``c_attn`` one q/k/v projection of 3 x kv_channels x
    heads with a bias, ``c_proj`` without (no_bias, default true); the MLP's w1 and w2 (the gate and up) and its
    c_proj are intermediate_size / 2 wide; no grouped-query attention; wte and lm_head untied."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")
    inter = c.int("intermediate_size")
    if inter % 2:
        raise GpuplanError(f"{c.source}: intermediate_size = {inter} must be even (Qwen's MLP is intermediate_size / 2 "
                           "wide): fix the value")
    no_bias = c.flag("no_bias", default=True)
    keys = {"hidden_size": c.raw("hidden_size"), "num_hidden_layers": c.raw("num_hidden_layers"),
            "num_attention_heads": c.raw("num_attention_heads"), "vocab_size": c.raw("vocab_size"),
            "head_dim": c.raw("kv_channels"), "intermediate_size": inter // 2,
            "max_position_embeddings": c.raw("max_position_embeddings", "seq_length"),
            "tie_word_embeddings": c.flag("tie_word_embeddings", default=False),
            "layer_norm_epsilon": c.raw("layer_norm_epsilon"), "linear_bias": not no_bias}
    return _translated(c, keys, f"c_attn as q/k/v with biases, w1/w2/c_proj as a SwiGLU MLP of intermediate_size / 2 "
                                f"= {inter // 2}, {'no' if no_bias else 'with'} biases on c_proj and the MLP")


def chatglm_config(c: Cfg) -> Cfg:
    """ChatGLM2/3 and GLM-4 (THUDM/chatglm2-6b modeling_chatglm.py, ChatGLMConfig): ``query_key_value`` one
    projection for the heads and multi_query_group_num key/value groups (multi_query_attention) of kv_channels,
    with a bias where add_qkv_bias or add_bias_linear; ``dense`` (the output) and the MLP's dense_h_to_4h
    (gate and up, 2 x ffn_hidden_size) and dense_4h_to_h with a bias only where add_bias_linear; RMSNorm; the
    padded vocabulary's embedding and output_layer untied. ChatGLM-6B (v1: GLM blocks, 2-D positions, GeLU) is
    not this block and is refused."""
    if c.raw("padded_vocab_size") is None and c.raw("ffn_hidden_size") is None:
        raise GpuplanError(f"{c.source}: model_type chatglm without padded_vocab_size and ffn_hidden_size is "
                           "ChatGLM-6B (v1: GLM blocks with 2-D positions), which gpuplan does not model: give "
                           "{params: 6.2e9}, or a ChatGLM2/3 or GLM-4 config.json")
    c.require("hidden_size", "num_layers", "num_attention_heads", "padded_vocab_size", "ffn_hidden_size")
    if not c.flag("rmsnorm", default=True):
        raise GpuplanError(f"{c.source}: rmsnorm = false (LayerNorm blocks) is not a released ChatGLM2/3 or GLM-4 "
                           "shape: give {params: N} for this model")
    heads = c.int("num_attention_heads")
    groups = c.int("multi_query_group_num", default=1) if c.flag("multi_query_attention", default=False) else heads
    linear_bias = c.flag("add_bias_linear", default=False)
    keys = {"hidden_size": c.raw("hidden_size"), "num_hidden_layers": c.raw("num_layers"),
            "num_attention_heads": heads, "num_key_value_heads": groups, "vocab_size": c.raw("padded_vocab_size"),
            "head_dim": c.raw("kv_channels"), "intermediate_size": c.raw("ffn_hidden_size"),
            "max_position_embeddings": c.raw("seq_length"), "tie_word_embeddings": False,
            "layer_norm_epsilon": c.raw("layernorm_epsilon"),
            "qkv_bias": linear_bias or c.flag("add_qkv_bias", default=False), "linear_bias": linear_bias}
    t = _translated(c, keys, f"query_key_value as q/k/v for {heads} heads and {groups} key/value groups, "
                             "dense_h_to_4h as the gate and up of a SwiGLU MLP, output_layer untied")
    if not c.flag("post_layer_norm", default=True):
        t.assumed.append("post_layer_norm = false: the final RMSNorm is counted anyway (hidden_size parameters)")
    return t
