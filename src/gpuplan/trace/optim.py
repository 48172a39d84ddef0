"""Mixed-precision optimizer with fp32 master weights (16-bit parameters and gradients).

What ZeRO's 16 B/param accounting describes (Rajbhandari et al. 2020, Sec. 3.1) and Megatron's
and DeepSpeed's optimizers do: the model holds 16-bit weights and gradients; the optimizer holds
an fp32 master copy and fp32 moments. The update runs over chunks of ``CHUNK`` elements, as a
fused multi-tensor kernel does, so its temporaries stay small instead of growing with the
largest tensor (a per-tensor eager update on a 262M-element embedding would add ~2 GiB).
"""

from __future__ import annotations

import torch

from gpuplan.errors import GpuplanError

CHUNK = 1 << 22  # elements updated per slice (16 MiB of fp32)
SUPPORTED = ("adamw", "adam", "sgd", "sgd-momentum")


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (tensor parallel); the tensor itself otherwise. The update is
    elementwise, so it runs on the local shards, as Megatron's optimizer does."""
    return getattr(t, "_local_tensor", t)


class MasterOptimizer(torch.optim.Optimizer):
    def __init__(self, params: list[torch.nn.Parameter], algo: str, lr: float = 1e-4, betas=(0.9, 0.95),  # noqa: ANN001
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.9) -> None:
        if algo not in SUPPORTED:
            raise GpuplanError(f"trace keeps fp32 master weights itself for {', '.join(SUPPORTED)}; for {algo} "
                               "use precision bf16-pure or fp32, or FSDP (layout zero 3)")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum})
        self.algo = algo

    def _state(self, p: torch.Tensor) -> dict:
        st = self.state[p]
        if not st:
            st["step"] = 0
            st["master"] = _local(p).detach().float()
            if self.algo in ("adamw", "adam"):
                st["exp_avg"] = torch.zeros_like(st["master"])
                st["exp_avg_sq"] = torch.zeros_like(st["master"])
            elif self.algo == "sgd-momentum":
                st["momentum_buffer"] = torch.zeros_like(st["master"])
        return st

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        """The update, chunk by chunk (each chunk's temporaries are freed before the next). On fake
        tensors nothing is computed and every full chunk allocates the same temporaries, so the
        first full chunk and the tail stand for all of them: the memory peak is the same and a
        405B model's 25,000 chunks do not take minutes."""
        for group in self.param_groups:
            lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self._state(p)
                st["step"] += 1
                t = st["step"]
                grad = p.grad
                if getattr(grad, "placements", None) != getattr(p, "placements", None):  # e.g. a replicated
                    grad = grad.redistribute(p.device_mesh, p.placements)  # embedding gradient: take our shard
                flat_p, flat_g, master = _local(p).view(-1), _local(grad).view(-1), st["master"].view(-1)
                for i in _chunk_starts(flat_p.numel(), _is_fake(flat_p)):
                    sl = slice(i, i + CHUNK)
                    g = flat_g[sl].float()
                    w = master[sl]
                    if self.algo in ("adamw", "adam"):
                        m, v = st["exp_avg"].view(-1)[sl], st["exp_avg_sq"].view(-1)[sl]
                        if group["weight_decay"] and self.algo == "adamw":
                            w.mul_(1 - lr * group["weight_decay"])
                        m.mul_(b1).add_(g, alpha=1 - b1)
                        v.mul_(b2).addcmul_(g, g, value=1 - b2)
                        denom = (v / (1 - b2**t)).sqrt_().add_(eps)
                        w.addcdiv_(m, denom, value=-lr / (1 - b1**t))
                    elif self.algo == "sgd-momentum":
                        buf = st["momentum_buffer"].view(-1)[sl]
                        buf.mul_(group["momentum"]).add_(g)
                        w.add_(buf, alpha=-lr)
                    else:
                        w.add_(g, alpha=-lr)
                    flat_p[sl].copy_(w)
        return None


def _chunk_starts(numel: int, fake: bool) -> range | list[int]:
    """Where the update's chunks start: every chunk on real tensors; on fake ones the first and the
    last (a shorter tail) — every full chunk in between allocates the same temporaries as the first."""
    if not fake:
        return range(0, numel, CHUNK)
    last = ((numel - 1) // CHUNK) * CHUNK if numel else 0
    return [0] if last == 0 else [0, last]


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or t.device.type == "meta"
