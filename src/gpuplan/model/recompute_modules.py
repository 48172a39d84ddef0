"""Selective recomputation by module: Megatron-Core's ``recompute_modules`` (``--recompute-granularity selective
--recompute-modules ...``; megatron/core/transformer/transformer_config.py, TransformerConfig.recompute_modules).

Each module named is run again in backward instead of keeping what it produced (Megatron-Core checkpoints it —
``tensor_parallel.checkpoint`` or ``CheckpointWithoutOutput``, which frees the module's output once the next op has
used it and rebuilds it before that op's backward). What a block stops keeping (model/activations.py term names):

* ``core_attn`` (Megatron-Core's default list): the attention core's saved scores — nothing with a fused (flash)
  kernel, which keeps only its log-sum-exp (Korthikanti et al. 2022, Sec. 5: selective recomputation);
* ``layernorm``: the outputs of the input and pre-MLP norms, which the linears after them keep as their inputs
  (``qkv_input``, ``mlp_input``); the norms' inputs stay (the residual stream);
* ``mla_up_proj``: multi-latent attention's up-projected queries, keys and values (``q``, ``k``, ``v``), rebuilt
  from the latents it keeps;
* ``moe_act``: the experts' activation function — its output, the down projection's input; the experts keep their
  up/gate projections' outputs (what the activation reads);
* ``mlp``: a dense MLP block whole (its input and internals; MoE layers are the ``moe`` module's);
* ``moe``: a MoE layer whole — the router, the routed copies in and out, the experts' and shared experts' internals;
  its forward, expert exchange included, runs again in backward;
* ``shared_experts``: the shared experts' internals.

Backward rebuilds one module at a time: its bytes are alive again while its backward runs (the working set: the
largest module's in one block). Recomputed work: the module's forward — its matmuls at the block's matmul rate
(their share of the block's forward matmul FLOPs), its memory-bound kernels streamed (two norms: read and write the
hidden stream each; an activation function: read its two inputs, write its output).
"""

from __future__ import annotations

from gpuplan.spec.layout import BY_MODULE_PREFIX
from gpuplan.spec.model import LayerGroup, ModelSpec

# the activation terms a module stops keeping (model/activations.py layer_terms); moe_act's is part of a term
_TERMS: dict[str, tuple[str, ...]] = {
    "layernorm": ("qkv_input", "mlp_input"),
    "mla_up_proj": ("q", "k", "v"),
    "mlp": ("mlp_input", "mlp"),
    "moe": ("mlp_input", "router", "expert_dispatch", "expert_mlp", "shared_expert_mlp"),
    "shared_experts": ("shared_expert_mlp",),
}
# the weights whose forward matmuls a recomputed module runs again (LayerGroup weight groups and names; model/flops.py
# recomputed_matmul_flops counts them)
RECOMPUTED_WEIGHTS = {"mlp": ("mlp",), "moe": ("expert", "router", "shared_expert"),
                      "shared_experts": ("shared_expert",)}
MLA_UP_PROJ = ("q_b_proj", "kv_b_proj")


def modules_of(recompute: str) -> frozenset[str] | None:
    """The modules a selective recompute mode (``Layout.recompute_mode``) names — core_attn for plain selective —, or
    None for the other modes."""
    if recompute == "selective":
        return frozenset({"core_attn"})
    if recompute.startswith(BY_MODULE_PREFIX):
        return frozenset(recompute[len(BY_MODULE_PREFIX):].split("+"))
    return None


def dropped(terms: dict[str, float], modules: frozenset[str], flash: bool, moe_act_kept: float) -> tuple[float, float]:
    """(bytes a block no longer keeps, the largest module's bytes — rebuilt one module at a time in backward) of a
    block whose saved activations are ``terms``; ``moe_act_kept``: what its experts keep of ``expert_mlp`` with their
    activation recomputed."""
    gone: set[str] = set()
    largest = 0.0
    for module in modules:
        if module == "core_attn":
            names: tuple[str, ...] = () if flash else ("attn_core",)
        elif module == "mlp" and "mlp" not in terms:  # a MoE layer: its MLP is the moe module's
            names = ()
        elif module == "moe" and "expert_mlp" not in terms:
            names = ()
        else:
            names = _TERMS.get(module, ())
        # the two norms are checkpointed one by one; every other module's outputs are rebuilt together
        sizes = [terms.get(n, 0.0) for n in names]
        own = max(sizes, default=0.0) if module == "layernorm" else sum(sizes)
        if module == "moe_act" and "expert_mlp" in terms:
            own = max(0.0, terms["expert_mlp"] - moe_act_kept)
        largest = max(largest, own)
        gone |= set(names)
    total = sum(terms.get(n, 0.0) for n in gone)
    if "moe_act" in modules and "expert_mlp" in terms and "expert_mlp" not in gone:
        total += max(0.0, terms["expert_mlp"] - moe_act_kept)
    return total, largest


def recomputed_stream_bytes(m: ModelSpec, lg: LayerGroup, modules: frozenset[str], tp: int, sp: bool,
                            elem: float) -> tuple[float, int]:
    """(bytes per token, kernels) of the memory-bound work the named modules run again in one block of ``lg``: the
    two norms (read and write the hidden stream, a tp shard of it under sequence parallelism), an activation function
    (read its two inputs, write its output; one input and one output ungated), a whole MoE layer's shared experts."""
    h = m.hidden * (1 / tp if sp else 1.0)
    per, kernels = 0.0, 0
    io = 3 if m.gated_mlp else 2
    if "layernorm" in modules:
        per, kernels = per + 2 * 2 * h * elem, kernels + 2
    if lg.moe and ("moe_act" in modules or "moe" in modules):
        per, kernels = per + io * m.top_k * m.moe_ffn / tp * elem, kernels + 1
    if lg.moe and "moe" in modules and m.shared_ffn:  # (its dispatcher's copies: model/compute.py _dispatch_copies)
        per += io * m.shared_ffn / tp * elem
    if lg.moe and "shared_experts" in modules and "moe" not in modules and m.shared_ffn:
        per, kernels = per + io * m.shared_ffn / tp * elem, kernels + 1
    if lg.mlp and not lg.moe and "mlp" in modules:
        per, kernels = per + io * m.ffn / tp * elem, kernels + 1
    return per, kernels


# the stacks that recompute by module (frameworks.json profiles): Megatron-Core, and what runs on it (NeMo 2,
# Megatron-Bridge: catalog/stacks.json)
BY_MODULE = frozenset({"megatron-core"})


def unsupported_modules(framework: str, layout: dict) -> str | None:
    """Why ``framework`` cannot recompute the modules a scenario's layout names, or None."""
    modules = tuple(layout.get("recompute_modules") or ())
    if framework in BY_MODULE or not set(modules) - {"core_attn"}:
        return None
    return (f"layout.recompute_modules ({', '.join(modules)}) is Megatron-Core's selective recomputation by module "
            f"(--recompute-modules); {framework} has no such switch: drop recompute_modules and give recompute "
            "selective, selective-op or full, or name framework: megatron-core")


def module_sets(framework: str, model: ModelSpec) -> list[tuple[str, ...]]:
    """The module lists Megatron-Core recomputes a MoE model by, narrow to broad, as Megatron Bridge's guidance orders
    them (docs/training/activation-recomputation.md at commit 34ddd53b: "grouped MoE often starts with moe_act or
    layernorm plus moe_act", "MLA often benefits from mla_up_proj"; its DeepSeek-V3 performance recipes add the dense
    mlp) — none for another stack or a dense model. The whole moe layer, which replays the expert exchange and cannot
    run beside expert-parallel overlap, is not among them."""
    if framework not in BY_MODULE or not model.n_experts:
        return []
    sets = [("moe_act",), ("layernorm", "moe_act")]
    if model.kv_lora_rank:
        sets.append((*sets[-1], "mla_up_proj"))
    if any(lg.mlp and not lg.moe for lg in model.layers):  # dense MLP layers beside the MoE ones (DeepSeek's first 3)
        sets.append((*sets[-1], "mlp"))
    return sets
