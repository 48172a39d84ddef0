"""Muon's optimizer state, measured on PyTorch's own ``torch.optim.Muon`` (with ``torch.optim.AdamW`` on what Muon
does not take) after one step, against ``state_bytes``: one fp32 momentum per block matrix, two fp32 moments for the
embedding, head and vectors (model/muon.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.optim, "Muon"):
    pytest.skip("torch.optim.Muon came with PyTorch 2.9", allow_module_level=True)

from gpuplan.catalog.models import load_model  # noqa: E402
from gpuplan.model.states import state_bytes  # noqa: E402
from gpuplan.trace.model import CausalLM  # noqa: E402

CONFIGS = [
    {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "intermediate_size": 768, "vocab_size": 3000, "tie_word_embeddings": False},
    {"model_type": "qwen3", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
     "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 512, "vocab_size": 5000,
     "tie_word_embeddings": True},
]


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's per-parameter state tensors (the 0-d step counters left out)."""
    return sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
               if torch.is_tensor(t) and t.dim() > 0)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_muon_state_matches_torch_optim_muon(cfg):
    spec = load_model(cfg)
    model = CausalLM(spec)  # fp32 parameters: the optimizer's view under mixed precision (fp32 master, grads)
    params = {id(p): p for p in model.parameters()}.values()  # a tied head counted once
    assert sum(p.numel() for p in params) == spec.params
    blocks = {id(p) for p in model.layers.parameters() if p.dim() == 2}
    muon = torch.optim.Muon([p for p in params if id(p) in blocks], lr=1e-3)
    adamw = torch.optim.AdamW([p for p in params if id(p) not in blocks], lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p)
    muon.step()
    adamw.step()
    measured = _state_bytes(muon) + _state_bytes(adamw)
    predicted = state_bytes("bf16", "muon", spec).states * spec.params
    assert predicted == pytest.approx(measured, rel=1e-12)
    # and the momentum alone: 4 B per block matrix element
    assert _state_bytes(muon) == 4 * sum(p.numel() for p in params if id(p) in blocks)
