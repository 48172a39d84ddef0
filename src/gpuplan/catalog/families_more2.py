"""More decoder-only families ``transformers`` 5.24 ships: Aria's MoE text decoder (aria_text), Emu3's text decoder
(emu3), HyperCLOVA X (hyperclovax), DiffLlama (diffllama), RecurrentGemma (recurrent_gemma: RG-LRU recurrent blocks
and local MQA attention), the original GPT (openai-gpt), GPT-NeoX-Japanese (gpt_neox_japanese) and MiniMax-Text-01
(minimax: lightning linear attention and softmax attention, every block a top-k MoE). Each lists every parameter
tensor the matching ``transformers`` class creates (checked against it on the meta device:
tests/golden/test_hf_families_more2.py); defaults are those of the config class, recorded in ``assumed`` where they
shape the weights. What the time and memory model cannot represent (differential attention, RG-LRU, lightning
attention) is mapped to the closest block kind and said in ``assumed``."""

from __future__ import annotations

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_gpt import plain_decoder
from gpuplan.catalog.families_hybrid import listed_types, vector
from gpuplan.catalog.families_ln import qkvo
from gpuplan.catalog.families_moe import fused_experts
from gpuplan.catalog.families_ssm import mamba1_dims
from gpuplan.catalog.families_vlm import text_config
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight

__all__ = ["MORE2", "aria_text", "diffllama", "emu3", "gpt_neox_japanese", "hyperclovax", "minimax", "openai_gpt",
           "recurrent_gemma"]


def _shape(c: Cfg, h: int, L: int, nh: int, V: int, ffn: int, nkv: int | None = None
           ) -> tuple[int, int, int, int, int, int, int]:
    """hidden, layers, heads, key/value heads, head_dim, vocabulary, MLP width: as given, else the config class's
    defaults (noted); key/value heads default to the heads, head_dim to hidden / heads."""
    h, L, nh = c.int("hidden_size", default=h), c.int("num_hidden_layers", default=L), \
        c.int("num_attention_heads", default=nh)
    nkv = c.kv_heads(nh, "num_key_value_heads", default=nkv)
    return h, L, nh, nkv, c.head_dim(h, nh), c.int("vocab_size", default=V), c.int("intermediate_size", default=ffn)


def _llama(c: Cfg, name: str, h: int, L: int, nh: int, nkv: int, hd: int, V: int, ffn: int, *,
           attn_extra: list[Weight] | None = None, bias: bool = False, mlp_bias: bool = False,
           post_norms: bool = False, max_pos: int = 2048, tie_default: bool = False) -> ModelSpec:
    """A Llama-shaped decoder: q/k/v/o (``bias`` on all four), two pre-RMSNorms (and, ``post_norms``, one after
    attention and one after the MLP), a SwiGLU MLP, a final RMSNorm and the LM head (untied unless the config ties)."""
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    if post_norms:
        norms += nrm("post_norm1", h) + nrm("post_norm2", h)
    block = (attn_extra or []) + qkvo(h, nh, nkv, hd, bias) + norms + gated("mlp", h, ffn, "mlp", mlp_bias)
    tied = tie(c, tie_default)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=max_pos), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, False)] * L),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))), post_norms=post_norms)


def aria_text(c: Cfg, name: str) -> ModelSpec:
    """AriaTextForCausalLM (Rhymes Aria's language model): Llama attention (attention_bias on q/k/v/o) and in every
    block a MoE — a bias-free router, moe_num_experts SwiGLU experts of intermediate_size (fused gate_up, down), top
    moe_topk, and moe_num_shared_experts shared experts as one SwiGLU of intermediate_size x that many (mlp_bias)."""
    h, L, nh, nkv, hd, V, ffn = _shape(c, 4096, 32, 32, 32000, 4096)
    E, k = c.int("moe_num_experts", default=8), c.int("moe_topk", default=2)
    shared = ffn * c.int("moe_num_shared_experts", default=2, minimum=0)
    mlp = lin("mlp.router", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
    if shared:
        mlp += gated("mlp.shared_experts", h, shared, "shared_expert", c.flag("mlp_bias", default=False))
    block = (qkvo(h, nh, nkv, hd, c.flag("attention_bias", default=False)) + nrm("input_layernorm", h)
             + nrm("post_attention_layernorm", h) + mlp)
    tied = tie(c, False)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups([(block, True)] * L),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=ffn, shared_ffn=shared)


# Emu3TextConfig defaults (transformers 5.24) for a text_config that leaves a shape key out
_EMU3_TEXT = {"vocab_size": 184622, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 9216}


def emu3(c: Cfg, name: str) -> ModelSpec:
    """Emu3ForCausalLM, the model transformers builds for an Emu3 config.json: the Llama decoder of ``text_config``
    (Emu3TextConfig: no biases, untied head; its top-level keys are not read). The VQ-VAE image tokenizer
    (vq_config) is not part of it and is not counted: image tokens are text tokens of the vocabulary."""
    if c.raw("text_config") is None and c.raw("hidden_size") is not None:
        raise GpuplanError(f"{c.source}: an emu3 config.json keeps the decoder's keys in text_config (transformers "
                           "does not read hidden_size and the rest at the top level): move them into text_config")
    t = text_config(c, "emu3", _EMU3_TEXT)
    h, L, nh, nkv, hd, V, ffn = _shape(t, 4096, 32, 32, 184622, 14336, 8)
    t.assumed.append("model_type emu3: the causal LM over text and image tokens is counted; the VQ-VAE image "
                     "tokenizer (vq_config) is not (it encodes images before training)")
    return _llama(t, name, h, L, nh, nkv, hd, V, ffn, bias=t.flag("attention_bias", default=False),
                  mlp_bias=t.flag("mlp_bias", default=False), max_pos=9216)


def hyperclovax(c: Cfg, name: str) -> ModelSpec:
    """HyperCLOVAXForCausalLM (NAVER HyperCLOVA X SEED): Llama's block (attention_bias on q/k/v/o, mlp_bias) with, when
    use_post_norm (the default), RMSNorms after attention and after the MLP (post_norm1, post_norm2); its
    embedding, residual, attention and logits multipliers change no shape or FLOP count (noted)."""
    h, L, nh, nkv, hd, V, ffn = _shape(c, 4096, 32, 32, 32000, 11008)
    c.assumed.append("model_type hyperclovax: its embedding, residual, attention and logits multipliers change no "
                     "shape or FLOP count")
    return _llama(c, name, h, L, nh, nkv, hd, V, ffn, bias=c.flag("attention_bias", default=False),
                  mlp_bias=c.flag("mlp_bias", default=False), post_norms=c.flag("use_post_norm", default=True))


def diffllama(c: Cfg, name: str) -> ModelSpec:
    """DiffLlamaForCausalLM (Differential Transformer on Llama): Llama's block (attention_bias on q/k/v/o, a bias-free
    SwiGLU) with four learned λ vectors of head_dim per attention (lambda_q1, lambda_k1, lambda_q2, lambda_k2) and a
    weightless RMSNorm over each head pair's output. Its differential attention is costed as softmax attention over
    the same heads (noted)."""
    h, L, nh, nkv, hd, V, ffn = _shape(c, 2048, 16, 32, 32000, 8192)
    lambdas = [Weight(name=f"self_attn.{n}", shape=(hd,), group="attention", bias=True)
               for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")]
    c.assumed.append("model_type diffllama: differential attention (two softmax maps over the query/key head "
                     "halves, subtracted with a learned λ) is costed as one softmax attention of the same heads; "
                     "transformers' implementation runs the attention kernel twice (once per value half), "
                     "about twice the attention core timed here")
    return _llama(c, name, h, L, nh, nkv, hd, V, ffn, attn_extra=lambdas, bias=c.flag("attention_bias", default=False))


def recurrent_gemma(c: Cfg, name: str) -> ModelSpec:
    """RecurrentGemmaForCausalLM (Griffin): blocks cycle through block_types (recurrent, recurrent, attention). A
    recurrent block: linear_y and linear_x (hidden → lru_width, biased), a depthwise causal conv1d of conv1d_width
    (biased), the RG-LRU (a recurrence parameter per channel, block-diagonal input and recurrence gates: one
    (lru_width / heads)² matrix and bias per head), linear_out; an attention block: local (attention_window_size)
    multi-query attention, q/k/v (attention_bias) and o (always biased), head_dim hidden / heads, half rotary. Every
    block a biased GeGLU MLP of intermediate_size / 2 and two pre-RMSNorms; tied head."""
    h, L, nh = (c.int("hidden_size", default=2560), c.int("num_hidden_layers", default=26),
                c.int("num_attention_heads", default=10))
    V, ffn = c.int("vocab_size", default=256000), c.int("intermediate_size", default=3 * 2560) // 2
    if h % nh:
        raise GpuplanError(f"{c.source}: hidden_size {h} is not divisible by {nh} attention heads: fix the sizes")
    hd = h // nh  # RecurrentGemmaConfig sets head_dim to hidden_size // num_attention_heads whatever is given
    nkv = c.kv_heads(nh, "num_key_value_heads")
    lru = c.int("lru_width", default=h, note=False)
    if lru % nh:
        raise GpuplanError(f"{c.source}: lru_width {lru} is not divisible by {nh} heads (the RG-LRU's gate blocks): "
                           "fix the sizes")
    bw, kw = lru // nh, c.int("conv1d_width", default=4)
    kinds = c.raw("block_types", default=["recurrent", "recurrent", "attention"])
    if not isinstance(kinds, list) or not kinds or any(k not in ("recurrent", "attention") for k in kinds):
        raise GpuplanError(f"{c.source}: block_types must list recurrent or attention (cycled over the layers)")
    types = [kinds[i % len(kinds)] for i in range(L)]
    at = "temporal_block."
    gates = [Weight(name=f"{at}rg_lru.{g}_gate_weight", shape=(nh, bw, bw), group="attention")
             for g in ("input", "recurrent")]
    recurrent = (lin(f"{at}linear_y", lru, h, "attention", True) + lin(f"{at}linear_x", lru, h, "attention", True)
                 + [Weight(name=f"{at}conv_1d", shape=(lru, 1, kw), group="attention")]
                 + vector(f"{at}conv_1d.bias", lru)
                 + vector(f"{at}rg_lru.recurrent_param", lru) + gates
                 + vector(f"{at}rg_lru.input_gate_bias", lru) + vector(f"{at}rg_lru.recurrent_gate_bias", lru)
                 + lin(f"{at}linear_out", h, lru, "attention", True))
    ab = c.flag("attention_bias", default=False)
    attention = (lin(f"{at}q_proj", nh * hd, h, "attention", ab) + lin(f"{at}k_proj", nkv * hd, h, "attention", ab)
                 + lin(f"{at}v_proj", nkv * hd, h, "attention", ab) + lin(f"{at}o_proj", h, nh * hd, "attention", True))
    rest = nrm("temporal_pre_norm", h) + nrm("channel_pre_norm", h) + gated("mlp_block", h, ffn, "mlp", True)
    blocks = {"recurrent": (recurrent, "mamba1"), "attention": (attention, "attention")}
    window = c.int("attention_window_size", "sliding_window", default=2048)
    tied = tie(c, True)
    c.assumed.append("model_type recurrent_gemma: the RG-LRU (a gated diagonal recurrence, one state per channel) is "
                     "costed as Mamba-1's selective scan with a state of 1 over lru_width channels; its block-diagonal "
                     "gate matmuls (2·lru_width·lru_width/heads per token) are not counted as matmul FLOPs; no "
                     "measured rate of the scan kernel was found, so the throughput interval is widened for it")
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=ffn, vocab=V,
                max_positions=0, gated_mlp=True, norm="rmsnorm", tied_embeddings=tied,
                embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(blocks[t][0] + rest, False) for t in types], [(blocks[t][1], True) for t in types]),
                head=tuple(nrm("final_norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                activation=str(c.raw("hidden_activation", default="gelu_pytorch_tanh")),
                rotary_percent=0.5, sliding_window=window,
                window_layers=tuple(t == "attention" for t in types) if "attention" in types else (),
                ssm=mamba1_dims(lru, 1, kw))


def openai_gpt(c: Cfg, name: str) -> ModelSpec:
    """OpenAIGPTLMHeadModel (GPT-1): token and learned position embeddings, blocks of biased c_attn / c_proj and a
    4·n_embd c_fc / c_proj MLP, each sublayer followed by its LayerNorm (post-norm: ln_1, ln_2), no final norm, the
    head tied to the token embedding by default."""
    L, h = c.int("n_layer", "num_hidden_layers", default=12), c.int("n_embd", "hidden_size", default=768)
    nh = c.int("n_head", "num_attention_heads", default=12)
    c.head_dim(h, nh)
    V, P = c.int("vocab_size", default=40478), c.int("n_positions", "max_position_embeddings", default=512)
    block = (lin("attn.c_attn", 3 * h, h, "attention", True) + lin("attn.c_proj", h, h, "attention", True)
             + nrm("ln_1", h, True) + lin("mlp.c_fc", 4 * h, h, "mlp", True) + lin("mlp.c_proj", h, 4 * h, "mlp", True)
             + nrm("ln_2", h, True))
    return plain_decoder(c, name, L=L, h=h, nh=nh, nkv=nh, ffn=4 * h, V=V, max_pos=P, tied=tie(c, True),
                         embedding=emb("tokens_embed", V, h) + emb("positions_embed", P, h, "position"), block=block,
                         final=[], activation=str(c.raw("afn", default="gelu")), post_norms=True)


def gpt_neox_japanese(c: Cfg, name: str) -> ModelSpec:
    """GPTNeoXJapaneseForCausalLM (abeja/gpt-neox-japanese-2.7b): LayerNorms with bias before attention and MLP
    (sequential), a bias-free fused query_key_value and dense, a bias-free MLP of hidden_size x
    intermediate_multiple_size; only the last block's attention carries an output bias (dense_bias); the head
    (embed_out) tied to embed_in by default."""
    h, L = c.int("hidden_size", default=2560), c.int("num_hidden_layers", default=32)
    nh, V = c.int("num_attention_heads", default=32), c.int("vocab_size", default=32000)
    c.head_dim(h, nh)
    ffn = h * c.int("intermediate_multiple_size", default=4)
    block = (nrm("input_layernorm", h, True) + nrm("post_attention_layernorm", h, True)
             + lin("attention.query_key_value", 3 * h, h, "attention") + lin("attention.dense", h, h, "attention")
             + lin("mlp.dense_h_to_4h", ffn, h, "mlp") + lin("mlp.dense_4h_to_h", h, ffn, "mlp"))
    last = block + [Weight(name="attention.dense_bias", shape=(h,), group="attention", bias=True)]
    tied = tie(c, True)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=h // nh, ffn=ffn, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=False, norm="layernorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_in", V, h)),
                layers=groups([(block, False)] * (L - 1) + [(last, False)]),
                head=tuple(nrm("final_layer_norm", h, True) + ([] if tied else emb("embed_out", V, h, "head"))),
                activation="gelu")


def _minimax_types(c: Cfg, L: int) -> list[str]:
    """MiniMaxConfig.layer_types; else the original release's attn_type_list (0 lightning, 1 softmax; noted: the
    transformers class ignores it); else its default, full attention on even layers, lightning on odd ones."""
    types = listed_types(c, ("full_attention", "linear_attention"), L)
    if types is not None:
        return types
    legacy = c.raw("attn_type_list")
    if legacy is not None:
        if not isinstance(legacy, list) or len(legacy) != L or any(t not in (0, 1) for t in legacy):
            raise GpuplanError(f"{c.source}: attn_type_list must list 0 (lightning) or 1 (softmax) for each of the "
                               f"{L} layers: fix the list")
        c.assumed.append("attn_type_list read for the layer kinds (transformers' MiniMaxConfig reads layer_types only)")
        return ["full_attention" if t == 1 else "linear_attention" for t in legacy]
    c.assumed.append("layer_types not given: using the transformers default (full attention on even layers, "
                     "lightning attention on odd ones)")
    return ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(L)]


def minimax(c: Cfg, name: str) -> ModelSpec:
    """MiniMaxForCausalLM (MiniMax-Text-01): blocks of softmax GQA attention (q/k/v/o, no bias) or lightning attention
    (qkv_proj, an RMSNorm over the heads' width, a sigmoid output_gate, out_proj) as layer_types orders them, every
    block a top-k MoE of num_local_experts SwiGLU experts (fused gate_up, down) behind a bias-free gate. Lightning
    attention, a decayed linear attention computed in blocks, is costed as the gated delta rule's chunked scan over
    the same heads (noted)."""
    h, L, nh, nkv, hd, V, ffn = _shape(c, 4096, 32, 32, 32000, 14336, 8)
    E, k = c.int("num_local_experts", "num_experts", default=8), c.int("num_experts_per_tok", default=2)
    types = _minimax_types(c, L)
    width = nh * hd
    lightning = (nrm("self_attn.norm", width) + lin("self_attn.qkv_proj", 3 * width, h, "attention")
                 + lin("self_attn.out_proj", h, width, "attention")
                 + lin("self_attn.output_gate", width, h, "attention"))
    mixers = {"full_attention": (qkvo(h, nh, nkv, hd, False), "attention"), "linear_attention": (lightning, "gdn")}
    rest = (nrm("input_layernorm", h) + nrm("post_attention_layernorm", h) + lin("mlp.gate", E, h, "router")
            + fused_experts("mlp.experts", h, ffn, E))
    d = SsmDims(heads=nh, head_dim=hd, groups=nh, state=hd, conv_kernel=1, chunk=64)
    c.assumed.append("model_type minimax: lightning attention (linear attention with a per-head decay, computed in "
                     "blocks of block_size) is costed as the gated delta rule's chunked scan (64-token chunks, no "
                     "convolution) over its heads, which does somewhat more work per chunk; no measured kernel rate "
                     "backs it, so the throughput interval is widened for it")
    tied = tie(c, False)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nkv, head_dim=hd, ffn=0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=4096 * 32), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups([(mixers[t][0] + rest, True) for t in types], [(mixers[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))),
                n_experts=E, top_k=k, moe_ffn=ffn, ssm=d)


# model_type -> builder, merged into families.BUILDERS
MORE2 = {"aria_text": aria_text, "emu3": emu3, "hyperclovax": hyperclovax, "diffllama": diffllama,
         "recurrent_gemma": recurrent_gemma, "openai-gpt": openai_gpt, "gpt_neox_japanese": gpt_neox_japanese,
         "minimax": minimax}
