"""The mixture-of-experts part of the Llama-shaped decoders (catalog/families.py ``llama_like``): which layers
route, how many experts, their sizes and every weight of the MoE block, per family as its ``transformers``
class builds it (defaults of the config class, noted in ``ModelSpec.assumed`` where they shape a weight)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.catalog.builder_parts import Cfg, gated, lin
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import Weight

__all__ = ["Moe", "fused_experts", "llama_moe", "moe_required"]


@dataclass(frozen=True, slots=True)
class Moe:
    """The mixture-of-experts part of a Llama-like model (all zero and no sparse layer when dense)."""
    experts: int
    top_k: int
    ffn: int
    shared: int
    sparse: list[bool]      # per layer: does it use ``mlp`` (the MoE block) instead of the dense MLP
    mlp: list[Weight]
    dense_ffn: int | None = None  # the dense layers' MLP width where it is not intermediate_size (Llama 4)


def moe_required(moe: str | None) -> tuple[str, ...]:
    """Config keys a family's MoE cannot do without (no transformers default that fits a real model)."""
    return {"mixtral": ("num_local_experts", "intermediate_size"),
            "qwen2_moe": ("num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
                          "intermediate_size"),
            "qwen3_moe": ("num_experts", "moe_intermediate_size"),
            "shared_routed": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
            }.get(moe or "", ("intermediate_size",))


def fused_experts(prefix: str, h: int, ffn: int, E: int, bias: bool = False) -> list[Weight]:
    """Experts stored as one gate_up projection and one down projection per expert (3-D parameters)."""
    return (lin(f"{prefix}.gate_up_proj", 2 * ffn, h, "expert", bias, count=E)
            + lin(f"{prefix}.down_proj", h, ffn, "expert", bias, count=E))


def llama_moe(c: Cfg, moe: str | None, h: int, L: int, ffn: int) -> Moe:
    """Experts, routing and the MoE MLP weights of the family's kind of MoE."""
    if not moe:
        return Moe(experts=0, top_k=0, ffn=0, shared=0, sparse=[False] * L, mlp=[])
    if moe in ("mixtral", "olmoe", "gpt_oss", "minimax"):
        return _every_layer(c, moe, h, L, ffn)
    if moe == "hunyuan":
        return _hunyuan(c, h, L, ffn)
    if moe == "llama4":
        return _llama4(c, h, L)
    if moe == "shared_routed":
        return _shared_routed(c, h, L)
    if moe == "afmoe":
        return _afmoe(c, h, L)
    if moe == "ernie":
        return _ernie(c, h, L)
    return _qwen(c, moe, h, L)


def _every_layer(c: Cfg, moe: str, h: int, L: int, ffn: int) -> Moe:
    """Every layer a top-k MoE: Mixtral (and Granite-MoE, PhiMoE; Granite-MoE-Shared adds a shared expert of
    shared_intermediate_size), OLMoE, gpt-oss, MiniMax-M2."""
    if moe == "mixtral":
        E, k = c.int("num_local_experts"), c.int("num_experts_per_tok", default=2)
        mlp = (lin("block_sparse_moe.gate", E, h, "router")
               + gated("block_sparse_moe.experts", h, ffn, "expert", count=E, names=("w1", "w3", "w2")))
    elif moe == "olmoe":
        flex = c.mt == "flex_olmo"  # FlexOlmoConfig: 7 experts, top-5
        E, k = c.int("num_experts", default=7 if flex else 64), c.int("num_experts_per_tok", default=5 if flex else 8)
        mlp = lin("mlp.gate", E, h, "router") + (fused_experts("mlp.experts", h, ffn, E) if flex else
                                                 gated("mlp.experts", h, ffn, "expert", count=E))
    elif moe == "minimax":
        E, k = c.int("num_local_experts", default=256), c.int("num_experts_per_tok", default=8)
        mlp = lin("mlp.gate", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
    else:  # gpt-oss: a router with a bias, experts with biases on both projections (GptOssExperts)
        E, k = c.int("num_local_experts", default=128), c.int("num_experts_per_tok", default=4)
        mlp = lin("mlp.router", E, h, "router", True) + fused_experts("mlp.experts", h, ffn, E, bias=True)
    shared = c.int("shared_intermediate_size", default=0, minimum=0) if c.mt == "granitemoeshared" else 0
    if shared:  # GraniteMoeSharedMLP: a gated shared expert beside the routed ones (input_linear holds gate and up)
        mlp += (lin("shared_mlp.input_linear", 2 * shared, h, "shared_expert")
                + lin("shared_mlp.output_linear", h, shared, "shared_expert"))
    return Moe(experts=E, top_k=k, ffn=ffn, shared=shared, sparse=[True] * L, mlp=mlp)


def _per_layer_int(c: Cfg, key: str, L: int, default: int) -> int:
    """A config value that may be one integer or one per layer (HunYuanMoEV1Config's moe_topk, num_experts): the
    same for every layer, as the released models give it; layers that differ are refused."""
    v = c.raw(key)
    if not isinstance(v, list):
        return c.int(key, default=default)
    if len(v) != L or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v):
        raise GpuplanError(f"{c.source}: {key} must be one positive integer or one per layer ({L}): fix the value")
    if len(set(v)) > 1:
        raise GpuplanError(f"{c.source}: {key} differs between layers ({sorted(set(v))}); gpuplan models one value "
                           "for every MoE layer: give the most common one")
    return v[0]


def _hunyuan(c: Cfg, h: int, L: int, ffn: int) -> Moe:
    """Hunyuan MoE (HunYuanMoEV1Config, transformers' HunYuanMoEV1Moe): every layer routes moe_topk of num_experts
    experts of intermediate_size (MixtralExperts: fused gate_up, down) through a bias-free router (gate.wg) and
    adds one shared MLP of intermediate_size; the config's moe_intermediate_size and num_shared_expert lists are
    not read by that class."""
    E, k = _per_layer_int(c, "num_experts", L, 1), _per_layer_int(c, "moe_topk", L, 1)
    mlp = (lin("mlp.gate.wg", E, h, "router") + fused_experts("mlp.experts", h, ffn, E)
           + gated("mlp.shared_mlp", h, ffn, "shared_expert"))
    return Moe(experts=E, top_k=k, ffn=ffn, shared=ffn, sparse=[True] * L, mlp=mlp)


def _llama4(c: Cfg, h: int, L: int) -> Moe:
    """Llama 4 (Llama4TextConfig): routed experts and one shared expert of intermediate_size on the layers of
    moe_layers (default every interleave_moe_layer_step-th), the others a dense MLP of intermediate_size_mlp."""
    E, k = c.int("num_local_experts", default=16), c.int("num_experts_per_tok", default=1)
    ffn, dense = c.int("intermediate_size", default=8192), c.int("intermediate_size_mlp", default=16384)
    step = c.int("interleave_moe_layer_step", default=1)
    listed = c.raw("moe_layers")
    if listed is not None and (not isinstance(listed, list) or not all(isinstance(i, int) for i in listed)):
        raise GpuplanError(f"{c.source}: moe_layers must be a list of layer indices")
    layers = set(listed) if listed is not None else set(range(step - 1, L, step))
    mlp = (fused_experts("feed_forward.experts", h, ffn, E) + lin("feed_forward.router", E, h, "router")
           + gated("feed_forward.shared_expert", h, ffn, "shared_expert"))
    return Moe(experts=E, top_k=k, ffn=ffn, shared=ffn, sparse=[i in layers for i in range(L)], mlp=mlp,
               dense_ffn=dense)


# the config classes' defaults: (dense layers before the first MoE one, shared experts)
_SHARED_ROUTED_DEFAULTS = {"glm4_moe": (1, 1), "sarvam_moe": (1, 1), "exaone_moe": (1, 1), "hy_v3": (1, 1),
                           "mellum": (0, 0), "beam": (3, 0)}


def _shared_routed(c: Cfg, h: int, L: int) -> Moe:
    """DeepSeek-V3's MoE on a plain attention block (GLM-4.5 glm4_moe, dots.llm1 dots1): routed experts and
    n_shared_experts shared ones of moe_intermediate_size from layer first_k_dense_replace on; the router's
    score-correction bias is a buffer, not a parameter, in these classes."""
    E, k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    ffn = c.int("moe_intermediate_size")
    dense0, shared0 = _SHARED_ROUTED_DEFAULTS.get(c.mt, (0, 1))
    n_shared = c.int("n_shared_experts", default=shared0, minimum=0, note=shared0 > 0)
    first = c.int("first_k_dense_replace", default=dense0, minimum=0)
    sparse = [i >= first for i in range(L)]
    kinds = c.raw("mlp_layer_types")  # EXAONE MoE: "dense" / "sparse" per layer, before first_k_dense_replace
    if kinds is not None:
        if not isinstance(kinds, list) or len(kinds) != L or any(k not in ("dense", "sparse") for k in kinds):
            raise GpuplanError(f"{c.source}: mlp_layer_types must give dense or sparse for each of the {L} layers")
        sparse = [k == "sparse" for k in kinds]
    mlp = fused_experts("mlp.experts", h, ffn, E) + lin("mlp.gate", E, h, "router")
    # the shared experts' width: n_shared_experts x moe_intermediate_size; Kolibri's own key (the other classes
    # ignore a stray one)
    shared = c.int("shared_expert_intermediate_size", default=ffn * n_shared, minimum=0, note=False) \
        if c.mt == "kolibri1" else ffn * n_shared
    if shared:
        mlp += gated("mlp.shared_experts", h, shared, "shared_expert")
    return Moe(experts=E, top_k=k, ffn=ffn, shared=shared, sparse=sparse, mlp=mlp)


def _afmoe(c: Cfg, h: int, L: int) -> Moe:
    """AFMoE (AfmoeConfig): after num_dense_layers dense layers, num_experts routed experts (fused gate/up) of
    moe_intermediate_size, top-k, with the router's expert bias a parameter, and num_shared_experts shared ones."""
    E, k = c.int("num_experts", default=64), c.int("num_experts_per_tok", default=6)
    ffn, n_shared = c.int("moe_intermediate_size", default=1408), c.int("num_shared_experts", default=2, minimum=0)
    first = c.int("num_dense_layers", default=1, minimum=0)
    mlp = (lin("mlp.router.gate", E, h, "router") + [Weight(name="mlp.expert_bias", shape=(E,), group="router",
                                                            bias=True)] + fused_experts("mlp.experts", h, ffn, E))
    if n_shared:
        mlp += gated("mlp.shared_experts", h, ffn * n_shared, "shared_expert")
    return Moe(experts=E, top_k=k, ffn=ffn, shared=ffn * n_shared, sparse=[i >= first for i in range(L)], mlp=mlp)


def _ernie(c: Cfg, h: int, L: int) -> Moe:
    """ERNIE 4.5 MoE (Ernie4_5_MoeSparseMoeBlock): an fp32 router with its score-correction bias (a parameter
    there, moe_statics), bias-free fused experts and moe_num_shared_experts shared ones (use_bias), on every
    moe_layer_interval-th layer from moe_layer_start_index to moe_layer_end_index (-1: the last)."""
    E, k = c.int("moe_num_experts", default=64), c.int("moe_k", default=6)
    ffn, n_shared = c.int("moe_intermediate_size", default=1536), c.int("moe_num_shared_experts", default=2, minimum=0)
    start, step = c.int("moe_layer_start_index", default=1, minimum=0), c.int("moe_layer_interval", default=1)
    end = c.raw("moe_layer_end_index", default=-1)
    if not isinstance(end, int) or isinstance(end, bool) or end < -1:
        raise GpuplanError(f"{c.source}: moe_layer_end_index must be a layer index or -1 (the last layer)")
    end = L - 1 if end == -1 else end
    mlp = (lin("mlp.gate", E, h, "router") + [Weight(name="mlp.gate.moe_statics.e_score_correction_bias",
                                                     shape=(E,), group="router", bias=True)]
           + fused_experts("mlp.experts", h, ffn, E))
    if n_shared:
        mlp += gated("mlp.shared_experts", h, ffn * n_shared, "shared_expert", c.flag("use_bias", default=False))
    return Moe(experts=E, top_k=k, ffn=ffn, shared=ffn * n_shared, mlp=mlp,
               sparse=[(i + 1) % step == 0 and start <= i <= end for i in range(L)])


def _qwen(c: Cfg, moe: str, h: int, L: int) -> Moe:
    """Qwen2-MoE / Qwen3-MoE: experts on every decoder_sparse_step-th layer not in mlp_only_layers; Qwen2-MoE
    adds a gated shared expert."""
    E, moe_ffn = c.int("num_experts"), c.int("moe_intermediate_size")
    k = c.int("num_experts_per_tok")
    step = c.int("decoder_sparse_step", default=1, note=False)
    only = c.raw("mlp_only_layers", default=[])
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise GpuplanError(f"{c.source}: mlp_only_layers must be a list of layer indices")
    sparse = [i not in only and (i + 1) % step == 0 for i in range(L)]
    mlp = lin("mlp.gate", E, h, "router") + gated("mlp.experts", h, moe_ffn, "expert", count=E)
    shared = 0
    if moe == "qwen2_moe" or c.mt == "flint":  # Flint: Qwen2-MoE's shared expert without its sigmoid gate
        shared = c.int("shared_expert_intermediate_size", default=0, minimum=0) if c.mt == "flint" else \
            c.int("shared_expert_intermediate_size")
        mlp += gated("mlp.shared_expert", h, shared, "shared_expert") if shared else []
        mlp += lin("mlp.shared_expert_gate", 1, h, "router") if c.mt != "flint" else []
    return Moe(experts=E, top_k=k, ffn=moe_ffn, shared=shared, sparse=sparse, mlp=mlp)
