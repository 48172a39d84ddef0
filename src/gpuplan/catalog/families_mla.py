"""Decoders with multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1): DeepSeek V2/V3/V3.2,
Kimi K2 (DeepSeek-V3's architecture), Glm4MoeLite (glm4_moe_lite), MiniCPM3 (dense), Mistral 4 (mistral4) and
GLM-5 (glm_moe_dsa: DeepSeek-V3.2's sparse attention, an indexer on the "full" layers), each as its
``transformers`` class builds it — fine-grained routed experts plus shared ones from the first MoE layer on."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.catalog.builder_parts import Cfg, emb, gated, groups, lin, nrm, spec, tie
from gpuplan.catalog.families_hybrid import listed_types, scan_note, vector
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec, SsmDims, Weight


@dataclass(frozen=True, slots=True)
class _Family:
    """What the config class defaults and the modelling class builds differently per model_type."""
    tie: bool = False             # tie_word_embeddings default
    shared: int = 0               # n_shared_experts default
    first_dense: int = 0          # first_k_dense_replace default (layers before it are dense)
    router_bias: bool = False     # e_score_correction_bias a parameter (not a buffer)
    mlp_bias: bool = False        # the MLPs take config.mlp_bias
    v_head_dim_default: bool = False  # v_head_dim defaults to hidden // heads
    indexer: int = 0              # index_n_heads default of DeepSeek Sparse Attention's indexer (0: none)


_FAMILIES = {
    "deepseek_v2": _Family(shared=2),
    "deepseek_v3": _Family(shared=1, first_dense=3, router_bias=True),
    "kimi_k2": _Family(shared=1, first_dense=3, router_bias=True),  # its config.json: DeepseekV3ForCausalLM
    "deepseek_v32": _Family(shared=1, first_dense=3, indexer=64),
    "glm4_moe_lite": _Family(shared=1, first_dense=1),
    "minicpm3": _Family(tie=True, mlp_bias=True, v_head_dim_default=True),
    "mistral4": _Family(shared=1),  # Mistral 4: DeepSeek-V3's MLA + routed/shared experts, a buffer-less router
    "glm_moe_dsa": _Family(shared=1, first_dense=3, indexer=32),  # GLM-5: DeepSeek-V3.2's sparse attention
    "youtu": _Family(tie=True),  # Youtu-LLM: dense MLA (no experts), tied
    "sarvam_mla": _Family(shared=1, first_dense=1),  # Sarvam: DeepSeek-V3 MLA + experts, the router bias a buffer
}
MLA_TYPES = tuple(_FAMILIES)


def _dsa_indexer(c: Cfg, h: int, qr: int) -> list[Weight]:
    """DeepSeek-V3.2's lightning indexer (DeepSeek Sparse Attention; transformers' DeepseekV32Indexer, GLM-5's
    GlmMoeDsaIndexer): index_n_heads query heads of index_head_dim from the compressed query (wq_b), one shared key
    head (wk) with a LayerNorm, and a per-head weight (weights_proj). The step is timed as dense MLA attention: the
    indexer's own scores and the top-index_topk selection are not modelled (noted)."""
    f = _FAMILIES.get(c.mt)
    if f is None or not f.indexer:
        return []
    if not qr:
        raise GpuplanError(f"{c.source}: {c.mt} needs q_lora_rank (its indexer reads the compressed query)")
    n, d = c.int("index_n_heads", default=f.indexer), c.int("index_head_dim", default=128)
    note = (f"{c.mt}: attention timed as dense MLA over the whole sequence; DeepSeek Sparse Attention's "
            f"top-{c.int('index_topk', default=2048):,} keys per query and its indexer's scores are not modelled")
    if note not in c.assumed:
        c.assumed.append(note)
    return (lin("self_attn.indexer.wq_b", n * d, qr, "attention") + lin("self_attn.indexer.wk", d, h, "attention")
            + nrm("self_attn.indexer.k_norm", d, bias=True) + lin("self_attn.indexer.weights_proj", n, h, "attention"))


def _mla(c: Cfg, h: int, nh: int, nope: int, rope: int, vd: int, qr: int, kvr: int) -> list[Weight]:
    """The attention block: q through a low-rank latent (q_a, its norm, q_b) or one projection, the joint
    key/value latent with the decoupled rotary key, its up-projection, the output projection."""
    ab = c.flag("attention_bias", default=False)
    if qr:
        attn = (lin("self_attn.q_a_proj", qr, h, "attention", ab) + nrm("self_attn.q_a_layernorm", qr)
                + lin("self_attn.q_b_proj", nh * (nope + rope), qr, "attention"))
    else:
        attn = lin("self_attn.q_proj", nh * (nope + rope), h, "attention")
    return attn + (lin("self_attn.kv_a_proj_with_mqa", kvr + rope, h, "attention", ab)
                   + nrm("self_attn.kv_a_layernorm", kvr)
                   + lin("self_attn.kv_b_proj", nh * (nope + vd), kvr, "attention")
                   + lin("self_attn.o_proj", h, nh * vd, "attention", ab) + _dsa_indexer(c, h, qr))


def _sparse_layers(c: Cfg, f: _Family, L: int) -> list[bool]:
    """Which layers route: mlp_layer_types where the config lists it, else from first_k_dense_replace on
    (every moe_layer_freq-th)."""
    listed = c.raw("mlp_layer_types")
    if listed is not None:
        if not isinstance(listed, list) or len(listed) != L or not all(t in ("dense", "sparse") for t in listed):
            raise GpuplanError(f"{c.source}: mlp_layer_types must list 'dense' or 'sparse' for each of the {L} layers")
        return [t == "sparse" for t in listed]
    first = c.int("first_k_dense_replace", default=f.first_dense, minimum=0)
    freq = c.int("moe_layer_freq", default=1)
    return [i >= first and i % freq == 0 for i in range(L)]


def _indexed_layers(c: Cfg, L: int) -> list[bool]:
    """Which layers hold their own indexer: all, except GLM-5's "shared" ones (GlmMoeDsaConfig: indexer_types, else
    the index_topk_pattern string of F and S, else every index_topk_freq-th layer from index_skip_topk_offset)."""
    if c.mt != "glm_moe_dsa":
        return [True] * L
    listed = c.raw("indexer_types", "index_topk_pattern")
    if listed is not None:
        kinds = [{"F": "full", "S": "shared"}.get(k, k) for k in listed] if isinstance(listed, str | list) else None
        if kinds is None or len(kinds) != L or any(k not in ("full", "shared") for k in kinds):
            raise GpuplanError(f"{c.source}: indexer_types must list full or shared for each of the {L} layers")
        return [k == "full" for k in kinds]
    freq, offset = c.int("index_topk_freq", default=1), c.int("index_skip_topk_offset", default=2, minimum=0)
    return [max(i - offset + 1, 0) % freq == 0 for i in range(L)]


def deepseek(c: Cfg, name: str) -> ModelSpec:
    f = _FAMILIES[c.mt]
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size",
              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              *(() if f.v_head_dim_default else ("v_head_dim",)))
    h, L, nh, V = (c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"),
                   c.int("vocab_size"))
    ffn, kvr = c.int("intermediate_size"), c.int("kv_lora_rank")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    vd = c.int("v_head_dim", default=h // nh) if f.v_head_dim_default else c.int("v_head_dim")
    qr = c.int("q_lora_rank", default=0, minimum=0, note=False)
    tied = tie(c, f.tie)
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    attn = _mla(c, h, nh, nope, rope, vd, qr, kvr) + norms
    mlp = gated("mlp", h, ffn, "mlp", f.mlp_bias and c.flag("mlp_bias", default=False))
    dense = attn + mlp
    E = c.int("n_routed_experts", default=0, minimum=0, note=False)
    k = moe_ffn = n_shared = n_group = topk_group = 0
    sparse = [False] * L
    moe_block: list[Weight] = []
    moe_mlp: list[Weight] = []
    if E:
        moe_ffn, k = c.int("moe_intermediate_size"), c.int("num_experts_per_tok")
        n_shared = c.int("n_shared_experts", default=f.shared, minimum=0, note=f.shared > 0)
        sparse = _sparse_layers(c, f, L)
        n_group, topk_group = _route_groups(c, E)
        router = lin("mlp.gate", E, h, "router")
        # the score-correction bias: a parameter in transformers' DeepseekV3TopkRouter, a buffer in the others
        if f.router_bias or (c.mt == "deepseek_v2" and c.raw("topk_method") == "noaux_tc"):
            router.append(Weight(name="mlp.gate.e_score_correction_bias", shape=(E,), group="router", bias=True))
        moe_mlp = router + gated("mlp.experts", h, moe_ffn, "expert", count=E)
        if n_shared:
            moe_mlp += gated("mlp.shared_experts", h, moe_ffn * n_shared, "shared_expert")
        moe_block = attn + moe_mlp
    # GLM-5: a layer whose indexer_types entry is "shared" reuses the previous layer's top-k and holds no indexer
    bare = [w for w in attn if ".indexer." not in w.name]
    own = _indexed_layers(c, L)
    layers = [((attn if own[i] else bare) + ((moe_mlp if s else mlp) if E else mlp), s) for i, s in enumerate(sparse)]
    # Multi-token prediction (V3): per module embed_tokens, enorm, hnorm, eh_proj, one decoder block,
    # shared_head.norm and shared_head.head, as stored in the released checkpoint (layers L..L+n-1).
    n_mtp = c.int("num_nextn_predict_layers", default=0, minimum=0, note=False)
    extra = n_mtp * (sum(w.numel for w in (moe_block if E else dense)) + 2 * V * h + 2 * h * h + 3 * h)
    head = nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=ffn if not all(sparse) else 0, vocab=V,
                max_positions=c.int("max_position_embeddings", default=2048), gated_mlp=True, norm="rmsnorm",
                tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)), layers=groups(layers),
                head=tuple(head), n_experts=E, top_k=k, moe_ffn=moe_ffn, shared_ffn=moe_ffn * n_shared,
                q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=rope, extra_params=extra, route_groups=n_group,
                route_topk_groups=topk_group)


def _route_groups(c: Cfg, experts: int) -> tuple[int, int]:
    """(groups, top groups) of group-limited routing (transformers' DeepseekV3TopkRouter and DeepSeek-V2's
    group_limited_greedy: the experts split into ``n_group`` equal groups, a token's experts taken inside its best
    ``topk_group``); (0, 0) where no group limits it (one group, or as many chosen as there are)."""
    groups = c.int("n_group", default=0, minimum=0, note=False) or 0
    top = c.int("topk_group", default=0, minimum=0, note=False) or 0
    greedy = c.mt == "deepseek_v2" and c.raw("topk_method") not in ("group_limited_greedy", "noaux_tc")
    if greedy or groups <= 1 or not 0 < top < groups or experts % groups:  # DeepSeek-V2's greedy reads no group
        return 0, 0
    return groups, top


def _kda(h: int, d: SsmDims) -> list[Weight]:
    """KimiLinearDeltaAttention: q, k, v projections, a depthwise causal conv1d over them (no bias), the forget gate
    (low-rank f_a/f_b, per-channel dt_bias, per-head A_log), β (b_proj), the output gate (low-rank g_a/g_b), the
    gated RMSNorm over one head's width, o_proj."""
    qkv = d.inner
    return (lin("self_attn.q_proj", qkv, h, "attention") + lin("self_attn.k_proj", qkv, h, "attention")
            + lin("self_attn.v_proj", qkv, h, "attention")
            + [Weight(name="self_attn.conv1d", shape=(3 * qkv, 1, d.conv_kernel), group="attention")]
            + lin("self_attn.forget_gate.f_a_proj", d.head_dim, h, "attention")
            + lin("self_attn.forget_gate.f_b_proj", qkv, d.head_dim, "attention")
            + vector("self_attn.forget_gate.dt_bias", qkv) + vector("self_attn.forget_gate.A_log", d.heads)
            + lin("self_attn.b_proj", d.heads, h, "attention") + lin("self_attn.g_a_proj", d.head_dim, h, "attention")
            + lin("self_attn.g_b_proj", qkv, d.head_dim, "attention") + nrm("self_attn.o_norm", d.head_dim)
            + lin("self_attn.o_proj", h, qkv, "attention"))


def _kimi_layer_types(c: Cfg, L: int) -> list[str]:
    """KimiLinearConfig: layer_types, else linear_attn_config's 1-indexed full_attn_layers / kda_layers, else full
    attention on every 4th layer from the 5th."""
    types = listed_types(c, ("full_attention", "linear_attention"), L)
    if types is not None:
        return types
    lac = c.raw("linear_attn_config", default={})
    if not (isinstance(lac, dict) and "full_attn_layers" in lac and "kda_layers" in lac):
        return ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(L)]
    listed: list[str | None] = [None] * L
    for key, kind in (("full_attn_layers", "full_attention"), ("kda_layers", "linear_attention")):
        for i in lac[key]:
            if not isinstance(i, int) or not 1 <= i <= L:
                raise GpuplanError(f"{c.source}: linear_attn_config.{key} must list layer numbers 1 to {L}")
            listed[i - 1] = kind
    if None in listed:
        raise GpuplanError(f"{c.source}: linear_attn_config's full_attn_layers and kda_layers must together name each "
                           f"of the {L} layers")
    return [t for t in listed if t is not None]


def kimi_linear(c: Cfg, name: str) -> ModelSpec:
    """KimiLinearForCausalLM (Kimi Linear): Kimi Delta Attention blocks (a gated delta rule with per-channel decay:
    costed as the gated delta rule) and MLA blocks without positional encoding, each with a routed + shared-expert
    MoE from first_k_dense_replace on (a dense SwiGLU before)."""
    c.require("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    h, L, nh, V = c.int("hidden_size"), c.int("num_hidden_layers"), c.int("num_attention_heads"), c.int("vocab_size")
    lac = c.raw("linear_attn_config", default={})
    lac = lac if isinstance(lac, dict) else {}
    heads = c.int("linear_num_heads", default=lac.get("num_heads", 32))
    hd = c.int("linear_head_dim", default=lac.get("head_dim", 128))
    d = SsmDims(heads=heads, head_dim=hd, groups=heads, state=hd,
                conv_kernel=c.int("linear_conv_kernel_dim", default=lac.get("short_conv_kernel_size", 4)), chunk=64)
    nope, rope, vd, kvr = (c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim"), c.int("v_head_dim"),
                           c.int("kv_lora_rank"))
    qr = c.int("q_lora_rank", default=0, minimum=0, note=False)
    # Moonshot's config.json spells the experts num_experts / num_experts_per_token / num_shared_experts
    E = c.int("num_experts", "num_local_experts", "n_routed_experts", default=256)
    k = c.int("num_experts_per_token", "num_experts_per_tok", default=8)
    moe_ffn, ffn = c.int("moe_intermediate_size", default=1024), c.int("intermediate_size", default=9216)
    shared = c.int("num_shared_experts", "n_shared_experts", default=1, minimum=0) * moe_ffn
    sparse = _sparse_layers(c, _Family(first_dense=1), L)
    norms = nrm("input_layernorm", h) + nrm("post_attention_layernorm", h)
    mixers = {"full_attention": (_mla(c, h, nh, nope, rope, vd, qr, kvr), "attention"),
              "linear_attention": (_kda(h, d), "gdn")}
    moe = (lin("mlp.gate", E, h, "router") + gated("mlp.experts", h, moe_ffn, "expert", count=E)
           + (gated("mlp.shared_experts", h, shared, "shared_expert") if shared else []))
    types = _kimi_layer_types(c, L)
    layers = [(mixers[t][0] + norms + (moe if s else gated("mlp", h, ffn, "mlp")), s)
              for t, s in zip(types, sparse, strict=True)]
    if c.flag("tie_word_embeddings", default=False):  # KimiLinearForCausalLM._tied_weights_keys is empty
        c.assumed.append("tie_word_embeddings true: transformers' KimiLinear keeps its own lm_head (counted)")
    tied = False
    c.assumed.append("kimi_linear: Kimi Delta Attention is costed as the gated delta rule (its decay is per channel, "
                     "not per head)")
    scan_note(c)
    return spec(c, name, n_layers=L, hidden=h, n_heads=nh, n_kv_heads=nh, head_dim=nope + rope, v_head_dim=vd,
                ffn=ffn if not all(sparse) else 0, vocab=V, max_positions=c.int("max_position_embeddings",
                                                                                 default=1048576),
                gated_mlp=True, norm="rmsnorm", tied_embeddings=tied, embedding=tuple(emb("embed_tokens", V, h)),
                layers=groups(layers, [(mixers[t][1], True) for t in types]),
                head=tuple(nrm("norm", h) + ([] if tied else emb("lm_head", V, h, "head"))), n_experts=E, top_k=k,
                moe_ffn=moe_ffn, shared_ffn=shared, q_lora_rank=qr, kv_lora_rank=kvr, qk_rope_dim=rope,
                position="none", ssm=d)
