"""FLOPs of a training step, per layer, from the model's weight list.

A matmul of an (m×k) by (k×n) matrix costs 2·m·n·k FLOPs. Per token, a weight matrix of
``numel`` elements costs 2·numel in the forward pass and 4·numel in the backward pass
(input and weight gradients) — Kaplan et al. 2020 (arXiv:2001.08361) Sec. 2.1, which is
where 6·N per token comes from. Attention adds, per token and layer, 2·s·a·d for Q·Kᵀ and
2·s·a·d_v for the weighted sum of V (Narayanan et al. 2021, arXiv:2104.04473, Sec. 5.1).

Model FLOPs (for MFU) follow PaLM (Chowdhery et al. 2022, arXiv:2204.02311, App. B):
3 × forward, attention counted in full (no causal saving), no recomputation; the embedding
lookup is not a matmul and costs nothing, the LM head does. Executed FLOPs (for time) skip
the masked half of causal attention and add what recomputation repeats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuplan.model.recompute_modules import MLA_UP_PROJ, RECOMPUTED_WEIGHTS, modules_of
from gpuplan.model.ssm import scan_flops
from gpuplan.spec.model import LayerGroup, ModelSpec, Weight

MATMUL_GROUPS = ("attention", "mlp", "shared_expert")


def _matrix_flops(m: ModelSpec, w: Weight) -> float:
    """Forward FLOPs per token of one weight matrix's matmul (routed experts: top_k of them; 0 for a group no matmul
    of the block reads)."""
    if w.group in MATMUL_GROUPS or w.group == "router":
        return 2 * w.numel
    return 2 * (w.numel // w.count) * m.top_k if w.group == "expert" else 0.0


def layer_matmul_flops(m: ModelSpec, lg: LayerGroup) -> float:
    """Forward FLOPs per token of one layer's weight matmuls (routed experts: top_k of them)."""
    return sum(_matrix_flops(m, w) for w in lg.weights if w.is_matrix)


@lru_cache(maxsize=4096)
def recomputed_matmul_flops(m: ModelSpec, lg: LayerGroup, modules: frozenset[str]) -> float:
    """Forward matmul FLOPs per token that Megatron-Core's recomputed ``modules`` run again in one block of ``lg``
    (model/recompute_modules.py): MLA's up-projections, a dense MLP, a MoE layer's router and experts, its shared
    experts."""
    def again(w: Weight) -> bool:
        if "mla_up_proj" in modules and w.name.rsplit(".", 1)[-1] in MLA_UP_PROJ:
            return True
        return any(w.group in RECOMPUTED_WEIGHTS[mod] for mod in modules if mod in RECOMPUTED_WEIGHTS
                   and (mod != "mlp" or not lg.moe) and (mod != "moe" or lg.moe))

    return sum(_matrix_flops(m, w) for w in lg.weights if w.is_matrix and again(w))


def _every_other_mm_flops(m: ModelSpec, lg: LayerGroup) -> float:
    """Forward FLOPs per token of the 2nd, 4th, ... matmul of a block (recomputed by op SAC)."""
    mats = [w for w in lg.weights if w.is_matrix and w.group in (*MATMUL_GROUPS, "expert")]
    return sum(2 * (w.numel // w.count) * (m.top_k if w.group == "expert" else w.count)
               for i, w in enumerate(mats) if i % 2 == 1)


def attended_keys(m: ModelSpec, seq_len: int) -> float:
    """Keys a query attends to, averaged over the sequence and the layers, causal mask applied.

    A full causal layer: s/2. A sliding-window layer of window w < s (Mistral, Gemma 2/3, StarCoder2):
    query i sees min(i, w) keys, on average w − w²/(2s) (FlashAttention computes only the blocks inside
    the band: ``window_size``, Dao, flash-attention 2.3 release notes); at s ≤ w the window changes nothing."""
    s, w = seq_len, m.sliding_window
    if not m.window_layers or s <= w:
        return s / 2
    windowed, n = m.windowed_layers, m.attention_layers
    return ((n - windowed) * s / 2 + windowed * (w - w * w / (2 * s))) / n


def attention_flops(m: ModelSpec, seq_len: int, causal_saving: bool) -> float:
    """Forward FLOPs per token of one attention layer's core (Q·Kᵀ and P·V) at context ``seq_len``,
    averaged over the attention layers. Without the causal saving (PaLM's model-FLOPs convention) twice what runs:
    2·s·a·(d + d_v) for full attention, as before windows were read."""
    executed = 2 * attended_keys(m, seq_len) * m.n_heads * (m.head_dim + m.v_head_dim)
    return executed if causal_saving else 2 * executed


def head_flops(m: ModelSpec) -> float:
    """Forward FLOPs per token of the LM head (the logits matmul, tied or not)."""
    return 2 * m.hidden * m.vocab


@dataclass(frozen=True, slots=True)
class FlopsPerToken:
    model: float          # PaLM convention: 3 × forward, full attention, no recompute (MFU)
    hardware: float       # model + what recomputation repeats, same convention (HFU; Megatron's count)
    executed: float       # what the GPUs run: causal attention halved, plus recomputation
    six_n: float          # 6·N with N the active parameters (Kaplan et al. 2020)
    forward_layers: float  # forward matmul FLOPs of all layers (no attention core), per token
    forward_attention: float  # forward attention-core FLOPs of all layers, executed, per token


@lru_cache(maxsize=4096)
def flops_per_token(m: ModelSpec, seq_len: int, recompute: str, frozen_base: bool = False,
                    adapter_params: float = 0.0, full_share: float = 1.0) -> FlopsPerToken:
    """``frozen_base``: LoRA/QLoRA — the base weights get no weight gradient, so their matmuls cost
    2 × forward (forward and input gradient), not 3 ×; the adapters' ``adapter_params`` cost 6 per
    token like any trained weight (Hu et al. 2021, LoRA, Sec. 4.2: no gradients for the frozen
    weights). The model FLOPs of a fine-tune are what it must compute, so its MFU is never above
    what the GPU's matmuls reach."""
    # an exact count from safetensors headers or a given {params: N} rescales the shapes' FLOPs too
    k = m.params / m.params_formula if m.params_formula else 1.0
    layers = k * sum(lg.count * layer_matmul_flops(m, lg) for lg in m.layers)
    att_full = m.attention_layers * attention_flops(m, seq_len, causal_saving=False) if m.attention_layers else 0.0
    att_exec = att_full / 2
    # a hybrid's recurrent layers: their chunked scans, counted as they run (no causal saving to undo)
    scans = sum(lg.count * scan_flops(m, lg.scan) for lg in m.layers if lg.scan)
    att_full, att_exec = att_full + scans, att_exec + scans
    head = k * head_flops(m)
    passes = 2 if frozen_base else 3  # forward + input gradient (+ weight gradient when trained)
    adapters = 6 * adapter_params
    # a fine-tune's model FLOPs are what it computes: causal attention counted as executed (PaLM's
    # full-attention count, kept for pre-training where published MFUs use it, would let a
    # fine-tune's MFU pass the GPU's matmul share at long sequences)
    att_model = att_exec if frozen_base else att_full
    model = passes * (layers + head) + 3 * att_model + adapters
    executed = passes * (layers + head) + 3 * att_exec + adapters
    extra = extra_exec = 0.0
    if recompute == "full":        # the forward pass of every (k-th: ``full_share``) layer runs twice
        extra, extra_exec = full_share * (layers + att_model), full_share * (layers + att_exec)
    elif recompute == "selective":  # the attention core's forward runs twice (Korthikanti et al.)
        extra, extra_exec = att_model, att_exec
    elif recompute == "selective-op":  # torchtitan op SAC: every other matmul runs twice
        extra = extra_exec = k * sum(lg.count * _every_other_mm_flops(m, lg) for lg in m.layers)
    elif recompute.startswith("selective:"):  # Megatron-Core's recompute_modules: the modules' forward matmuls twice
        modules = modules_of(recompute) or frozenset()
        extra = extra_exec = k * sum(lg.count * recomputed_matmul_flops(m, lg, modules) for lg in m.layers)
        if "core_attn" in modules:
            extra, extra_exec = extra + att_model, extra_exec + att_exec
    return FlopsPerToken(model=model, hardware=model + extra, executed=executed + extra_exec,
                         six_n=6 * m.params_active, forward_layers=layers, forward_attention=att_exec)


def megatron_flops_per_iteration(B: int, s: int, l: int, h: int, V: int) -> float:
    """Narayanan et al. 2021 (arXiv:2104.04473) Sec. 5.1: FLOPs of one iteration of a GPT model
    with full activation recomputation, 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def expert_imbalance(tokens: float, top_k: int, ep: int) -> float:
    """The busiest expert-parallel rank's load over the mean, for a router balanced in expectation:
    each rank receives a Binomial(ep·tokens·top_k, 1/ep) share of the routed tokens (mean
    μ = tokens·top_k, variance μ(1 − 1/ep)) and the largest of ep such shares exceeds the mean by
    about √(2 ln ep) standard deviations (the Gaussian extreme-value bound). A floor: a router's
    systematic preferences add to it and are not modelled."""
    mean = tokens * top_k
    if ep <= 1 or mean <= 0:
        return 1.0
    return 1.0 + math.sqrt(2 * math.log(ep) * (1 - 1 / ep) / mean)
