"""Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/; PyTorch's ``torch.optim.Muon``): the
blocks' 2-D weight matrices are updated with the Newton–Schulz orthogonalisation of their momentum, everything
else (embedding, LM head, norms and biases) with AdamW — the split "Muon is Scalable for LLM Training" (Liu et
al. 2025, arXiv:2502.16982, Sec. 2) and Keller Jordan's reference use.

Memory: ``torch.optim.Muon`` keeps one momentum buffer per matrix (``zeros_like(p.grad)``, the gradient's dtype:
fp32 beside an fp32 master under mixed precision), AdamW two moments for the rest.
Time: each step orthogonalises every matrix with ``ns_steps`` = 5 quintic Newton–Schulz iterations in bf16
(torch/optim/_muon.py ``_zeropower_via_newtonschulz``): for X of m×n (m ≤ n, the matrix transposed when taller)
one iteration is X·Xᵀ (2m²n FLOPs), b·A + c·A·A (2m³) and a·X + B·X (2m²n): 5·(4m²n + 2m³) FLOPs per matrix, run
as GEMMs. A sharded optimizer (ZeRO ≥ 1) splits the matrices over its data-parallel ranks, as Moonlight's
distributed Muon does (Liu et al. 2025, Sec. 2.3); without sharding every rank orthogonalises all of them
(``torch.optim.Muon`` under DDP)."""

from __future__ import annotations

from functools import lru_cache

from gpuplan.spec.model import BLOCK_MATRIX_GROUPS, ModelSpec

NS_STEPS = 5  # torch.optim.Muon DEFAULT_NS_STEPS (Keller Jordan's muon.py)


def _ns_flops(out_f: int, in_f: int) -> float:
    """Newton–Schulz FLOPs of one out_f × in_f matrix per optimizer step."""
    m, n = min(out_f, in_f), max(out_f, in_f)
    return NS_STEPS * (4.0 * m * m * n + 2.0 * m ** 3)


@lru_cache(maxsize=256)
def muon_split(model: ModelSpec) -> tuple[float, float, float]:
    """(share of the parameters Muon updates — the blocks' matrices, the router's too; the rest AdamW's —,
    Newton–Schulz FLOPs per non-expert parameter, per routed-expert parameter), averaged over the whole model."""
    muon = flops_d = flops_e = 0.0
    for lg in model.layers:
        for w in lg.weights:
            if w.is_matrix and w.group in BLOCK_MATRIX_GROUPS:
                muon += lg.count * w.numel
                f = lg.count * w.count * _ns_flops(*w.shape)
                if w.group == "expert":
                    flops_e += f
                else:
                    flops_d += f
    expert = model.params_by_group().get("expert", 0)
    dense = model.params_formula - expert
    return muon / max(model.params_formula, 1), flops_d / max(dense, 1), flops_e / max(expert, 1)


def adapter_ns_flops_per_param(rank: int, hidden: int) -> float:
    """LoRA adapters under Muon: an r × h matrix (A) or h × r (B), r ≪ h: 5·(4r²h + 2r³) over r·h parameters."""
    return _ns_flops(rank, hidden) / (rank * hidden)
