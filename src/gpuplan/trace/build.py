"""Build what a traced step needs without real storage: the model (meta → fake), its parallel
layout over a fake process group, the optimizer, and the inputs.

The model is constructed on the ``meta`` device (no memory), cast there, and every parameter
and buffer is then replaced by an uninitialised FakeTensor (``torch.empty`` under
``FakeTensorMode``); tied weights stay tied. Nothing real is allocated in proportion to the
model, so a 405B trace needs no more RAM than a 1B one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from gpuplan.errors import GpuplanError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "bf16-pure": torch.bfloat16, "fp32": torch.float32}
MIXED = ("bf16", "fp16")


def load_factory(ref: str, what: str) -> Callable:
    """``package.module:function`` → the callable, or one GpuplanError line."""
    mod_name, sep, attr = ref.partition(":")
    if not sep or not mod_name or not attr:
        raise GpuplanError(f"{what} {ref!r} must look like package.module:function")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's module
        raise GpuplanError(f"{what} {ref!r}: cannot import {mod_name} ({type(err).__name__}: {err})") from None
    obj: Any = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GpuplanError(f"{what} {ref!r}: {mod_name} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise GpuplanError(f"{what} {ref!r} is not callable")
    return obj


def build_on_meta(factory: Callable[[], Any], dtype: torch.dtype, source: str) -> nn.Module:
    """Call ``factory`` with ``meta`` as the default device and cast floating tensors to ``dtype``."""
    try:
        with torch.device("meta"):
            model = factory()
    except GpuplanError:
        raise
    except Exception as err:  # noqa: BLE001 - the user's factory
        raise GpuplanError(f"{source} raised {type(err).__name__}: {err}") from None
    if not isinstance(model, nn.Module):
        raise GpuplanError(f"{source} returned {type(model).__name__}, not a torch.nn.Module")
    real = [n for n, p in model.named_parameters() if p.device.type != "meta"]
    if real:
        raise GpuplanError(f"{source} put parameter {real[0]} on {model.get_parameter(real[0]).device}: "
                           "create parameters without an explicit device so trace can build them on meta")
    return model.to(dtype) if dtype is not None else model


def materialize(model: nn.Module, device: torch.device) -> None:
    """Replace every meta parameter and buffer by an uninitialised fake (call under FakeTensorMode)."""
    memo: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device),
                                           requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device=device)
            mod._buffers[name] = memo[id(b)]


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks: the children of the largest ``nn.ModuleList`` (``model.layers`` here)."""
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        return []
    return list(max(lists, key=len))


class Checkpointed(nn.Module):
    """Activation checkpointing of one block (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, block: nn.Module, context_fn: Callable | None = None) -> None:
        super().__init__()
        self.block = block
        self.context_fn = context_fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint, noop_context_fn

        return checkpoint(self.block, *args, use_reentrant=False, context_fn=self.context_fn or noop_context_fn,
                          **kwargs)


def _op_sac_context() -> Any:
    """torchtitan's per-op selective checkpointing: keep every other matmul's output and the
    attention kernels' outputs; recompute everything else."""
    from functools import partial

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default}

    def policy(meta: dict, ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func == aten.mm.default:
            meta[key] = meta.get(key, 0) + 1
        keep = func in save or (func == aten.mm.default and meta[key] % 2 == 1)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return lambda: create_selective_checkpoint_contexts(partial(policy, {}))


def apply_recompute(model: nn.Module, recompute: str) -> list[str]:
    """Wrap each block for ``full`` or ``selective-op`` recompute; ``selective`` drops only the
    eager attention core. Returns notes."""
    if recompute == "none":
        return []
    if recompute == "selective":
        eager = [m for m in model.modules() if hasattr(m, "checkpoint_core")]
        for m in eager:
            m.checkpoint_core = True
        if not eager:
            return ["recompute selective: only the attention core is recomputed; with flash attention "
                    "there is nothing to drop (nothing checkpointed)"]
        return []
    parent = next((m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == len(blocks_of(model))),
                  None)
    if parent is None:
        return [f"recompute {recompute}: no nn.ModuleList of blocks found; nothing checkpointed"]
    ctx = _op_sac_context() if recompute == "selective-op" else None
    for i, block in enumerate(list(parent)):
        parent[i] = Checkpointed(block, ctx)
    return []


def make_inputs(model: nn.Module, mb: int, seq_len: int, input_factory: Callable | None,
                vocab: int | None) -> tuple[tuple, dict, torch.Tensor | None]:
    """(args, kwargs, labels): token ids for a causal LM, or what the input factory returns."""
    if input_factory is not None:
        try:
            got = input_factory(mb, seq_len)
        except Exception as err:  # noqa: BLE001 - the user's factory
            raise GpuplanError(f"the input factory raised {type(err).__name__}: {err}") from None
        if isinstance(got, dict):
            return (), got, None
        if isinstance(got, torch.Tensor):
            return (got,), {}, None
        if isinstance(got, tuple | list):
            return tuple(got), {}, None
        raise GpuplanError(f"the input factory returned {type(got).__name__}: return a tensor, a tuple of "
                           "positional arguments or a dict of keyword arguments for forward()")
    if vocab is None:
        emb = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
        if emb is None:
            raise GpuplanError("the model has no nn.Embedding, so trace cannot make token ids for it: "
                               "give --input-factory package.module:function(batch, seq_len)")
        vocab = emb.num_embeddings
    ids = torch.randint(0, vocab, (mb, seq_len))
    return (ids,), {}, torch.randint(0, vocab, (mb, seq_len))


def _optimizer_class(name: str) -> tuple[type, dict]:
    opt = torch.optim
    table: dict[str, tuple[type, dict]] = {
        "adamw": (opt.AdamW, {"lr": 1e-4}), "adam": (opt.Adam, {"lr": 1e-4}),
        "sgd": (opt.SGD, {"lr": 1e-2}), "sgd-momentum": (opt.SGD, {"lr": 1e-2, "momentum": 0.9}),
    }
    if hasattr(opt, "Adafactor"):
        table["adafactor"] = (opt.Adafactor, {"lr": 1e-2})
    if name not in table:
        raise GpuplanError(f"trace runs torch's own optimizers ({', '.join(table)}); {name} is not in torch: "
                           "choose one of them for the trace")
    return table[name]


def make_optimizer(params: list[nn.Parameter], name: str, impl: str, master_fp32: bool, *, zero: int = 0,
                   shards: int = 1, group: Any = None) -> torch.optim.Optimizer:
    """The training optimizer. ``master_fp32``: 16-bit parameters with an fp32 master copy kept by
    the optimizer (mixed precision without FSDP; Megatron/DeepSpeed style); ``zero`` 1 or 2 with
    ``shards`` > 1: its state (and with 2 the gradients) sharded over the data-parallel ``group``,
    this process being rank 0 — see ``gpuplan.trace.optim.ShardedOptimizer``."""
    sharded = zero in (1, 2) and shards > 1
    if master_fp32 or sharded:
        from gpuplan.trace.optim import ShardedOptimizer

        return ShardedOptimizer(params, name, shards=shards if sharded else 1, zero=zero if sharded else 0,
                                master=master_fp32, group=group)
    cls, kw = _optimizer_class(name)
    if cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD):
        kw = {**kw, "fused": True} if impl in ("fused", "paged") else {**kw, "foreach": True}
    return cls(params, **kw)
