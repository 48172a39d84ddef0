"""The traced step's own optimizers: fp32 master weights, and ZeRO-1/2 sharding over simulated ranks.

``ShardedOptimizer`` is what ZeRO's accounting describes (Rajbhandari et al. 2020, arXiv:1910.02054,
Sec. 3.1 and 5): the model holds 16-bit weights and gradients; the optimizer holds an fp32 master copy
and fp32 moments (``master=True``; without it, bf16-pure/fp32, the moments take the parameters' dtype
and the update writes the parameters directly). With ``shards`` = nd > 1 it runs as rank 0 of the
data-parallel group ``group`` (a fake process group: the collectives are issued, nothing moves):

* ZeRO-1 (``zero=1``, Megatron-LM's distributed optimizer, DeepSpeed stage 1): weights and gradients
  whole. The gradients live in a persistent buffer that accumulates over the micro-batches and is
  zeroed, not freed, between steps (Megatron's contiguous grad buffer, DDP's bucket views); the step
  all-reduces them in place, updates this rank's 1/nd of the master weights and moments, writes its
  slice of the 16-bit weights and all-gathers the weights in place.
* ZeRO-2 (``zero=2``, DeepSpeed stage 2): as ZeRO-1, but each parameter's gradient is reduce-scattered
  as soon as autograd has accumulated it (a post-accumulate-grad hook), added into this rank's
  persistent 1/nd gradient partition (DeepSpeed's ``grads_in_partition``) and freed.

Sharding is per parameter: each parameter's flattened (tensor-parallel local) tensor splits into nd
equal slices of ceil(n/nd), rank 0 holding the first (FSDP2's per-parameter rule; DeepSpeed and
Megatron split one flat buffer instead — the same bytes per rank to within nd elements per tensor).
The update runs over chunks of ``CHUNK`` elements, as a fused multi-tensor kernel does, so its
temporaries stay small instead of growing with the largest tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from gpuplan.errors import GpuplanError

CHUNK = 1 << 22  # elements updated per slice (16 MiB of fp32)
SUPPORTED = ("adamw", "adam", "sgd", "sgd-momentum")


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (tensor parallel); the tensor itself otherwise. The update is
    elementwise, so it runs on the local shards, as Megatron's optimizer does."""
    return getattr(t, "_local_tensor", t)


def _slice_len(numel: int, shards: int) -> int:
    return -(-numel // shards)


class ShardedOptimizer(torch.optim.Optimizer):
    def __init__(self, params: list[torch.nn.Parameter], algo: str, *, shards: int = 1, zero: int = 0,
                 master: bool = True, group: Any = None, lr: float = 1e-4, betas=(0.9, 0.95),  # noqa: ANN001
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.9) -> None:
        if algo not in SUPPORTED:
            raise GpuplanError(f"trace keeps fp32 master weights and ZeRO-1/2 shards itself for "
                               f"{', '.join(SUPPORTED)}; for {algo} use precision bf16-pure or fp32 without ZeRO 1/2, "
                               "or FSDP (layout zero 3)")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum})
        self.algo, self.shards, self.zero, self.master, self.group = algo, shards, zero, master, group
        self.grad_shards: dict[torch.Tensor, torch.Tensor] = {}  # ZeRO-2: this rank's gradient partitions
        sharded = shards > 1 and zero in (1, 2)
        for p in self._params():
            if sharded and zero == 1:  # the persistent gradient buffer
                p.grad = torch.zeros_like(p)
            elif sharded:
                self.grad_shards[p] = torch.zeros(_slice_len(_local(p).numel(), shards), dtype=p.dtype,
                                                  device=_local(p).device)
                p.register_post_accumulate_grad_hook(self._reduce_scatter)
        self.persistent_grads = sharded and zero == 1

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def _state(self, p: torch.Tensor) -> dict:
        st = self.state[p]
        if not st:
            st["step"] = 0
            flat = _local(p).detach().view(-1)[: _slice_len(_local(p).numel(), self.shards)]
            moment_dtype = torch.float32 if self.master else p.dtype
            if self.master:
                st["master"] = flat.float()
            if self.algo in ("adamw", "adam"):
                st["exp_avg"] = torch.zeros_like(flat, dtype=moment_dtype)
                st["exp_avg_sq"] = torch.zeros_like(flat, dtype=moment_dtype)
            elif self.algo == "sgd-momentum":
                st["momentum_buffer"] = torch.zeros_like(flat, dtype=moment_dtype)
        return st

    # ---- collectives (a fake process group: issued for their buffers, nothing moves) -------------
    def _padded(self, flat: torch.Tensor) -> torch.Tensor:
        full = _slice_len(flat.numel(), self.shards) * self.shards
        if full == flat.numel():
            return flat
        out = flat.new_zeros(full)
        out[: flat.numel()].copy_(flat)
        return out

    @torch.no_grad()
    def _reduce_scatter(self, p: torch.Tensor) -> None:
        """ZeRO-2: this micro-batch's gradient of ``p`` → rank 0's partition; the whole gradient is freed."""
        import torch.distributed as dist

        grad = _local(p.grad).reshape(-1)
        part = self.grad_shards[p]
        out = torch.empty_like(part)
        dist.reduce_scatter_single(out, self._padded(grad), group=self.group)
        part.add_(out)
        p.grad = None

    def _all_gather(self, flat_p: torch.Tensor) -> None:
        """Every rank's updated slice → the whole 16-bit weight, in place where the slices tile it."""
        import torch.distributed as dist

        c = _slice_len(flat_p.numel(), self.shards)
        if c * self.shards == flat_p.numel():
            dist.all_gather_single(flat_p, flat_p[:c], group=self.group)
        else:
            full = torch.empty(c * self.shards, dtype=flat_p.dtype, device=flat_p.device)
            dist.all_gather_single(full, flat_p[:c], group=self.group)
            flat_p.copy_(full[: flat_p.numel()])

    def _grad_slice(self, p: torch.Tensor) -> torch.Tensor | None:
        if p in self.grad_shards:
            return self.grad_shards[p]
        if p.grad is None:
            return None
        grad = p.grad
        if getattr(grad, "placements", None) != getattr(p, "placements", None):  # e.g. a replicated
            grad = grad.redistribute(p.device_mesh, p.placements)  # embedding gradient: take our shard
        flat = _local(grad).view(-1)
        if self.shards > 1:
            import torch.distributed as dist

            dist.all_reduce(flat, group=self.group)  # ZeRO-1: DDP's all-reduce, in place
        return flat[: _slice_len(flat.numel(), self.shards)]

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        """The update of this rank's slices, chunk by chunk (each chunk's temporaries are freed before
        the next), then the weights' all-gather. On fake tensors nothing is computed and every full
        chunk allocates the same temporaries, so the first full chunk and the tail stand for all of
        them: the memory peak is the same and a 405B model's 25,000 chunks do not take minutes."""
        for group in self.param_groups:
            for p in group["params"]:
                flat_g = self._grad_slice(p)
                if flat_g is None:
                    continue
                st = self._state(p)
                st["step"] += 1
                flat_p = _local(p).view(-1)
                mine = flat_p[: flat_g.numel()]  # rank 0's slice of the 16-bit weight
                target = st["master"] if self.master else mine
                for i in _chunk_starts(flat_g.numel(), _is_fake(flat_p)):
                    sl = slice(i, i + CHUNK)
                    self._update(group, st, sl, flat_g[sl], target[sl])
                    if self.master:
                        mine[sl].copy_(target[sl])
                if self.shards > 1:
                    self._all_gather(flat_p)
        return None

    def _update(self, group: dict, st: dict, sl: slice, g16: torch.Tensor, w: torch.Tensor) -> None:
        lr, (b1, b2), eps, t = group["lr"], group["betas"], group["eps"], st["step"]
        g = g16.float() if self.master else g16
        if self.algo in ("adamw", "adam"):
            m, v = st["exp_avg"][sl], st["exp_avg_sq"][sl]
            if group["weight_decay"] and self.algo == "adamw":
                w.mul_(1 - lr * group["weight_decay"])
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2**t)).sqrt_().add_(eps)
            w.addcdiv_(m, denom, value=-lr / (1 - b1**t))
        elif self.algo == "sgd-momentum":
            buf = st["momentum_buffer"][sl]
            buf.mul_(group["momentum"]).add_(g)
            w.add_(buf, alpha=-lr)
        else:
            w.add_(g, alpha=-lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """ZeRO-1 zeroes its persistent gradient buffer, ZeRO-2 its partitions; otherwise torch's rule."""
        if self.persistent_grads:
            for p in self._params():
                if p.grad is not None:
                    p.grad.zero_()
            return
        for part in self.grad_shards.values():
            part.zero_()
        super().zero_grad(set_to_none=set_to_none)


def MasterOptimizer(params: list[torch.nn.Parameter], algo: str) -> ShardedOptimizer:
    """16-bit parameters with an fp32 master copy kept by the optimizer, one rank (no sharding)."""
    return ShardedOptimizer(params, algo)


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
