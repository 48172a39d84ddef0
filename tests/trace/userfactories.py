"""User-style model factories for the `--module` tests (imported as tests.trace.userfactories)."""

from __future__ import annotations

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 512, h: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
                                    for _ in range(layers))
        self.head = nn.Linear(h, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


class Regressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def tiny_lm() -> nn.Module:
    return TinyLM()


def regressor() -> nn.Module:
    return Regressor()


def regressor_inputs(batch: int, seq_len: int) -> torch.Tensor:
    return torch.randn(batch, 32)


def broken() -> nn.Module:
    raise RuntimeError("checkpoint path missing")


def not_a_module() -> dict:
    return {"weights": 1}
