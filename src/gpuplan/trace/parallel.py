"""The parallel layout of a traced step, simulated in this one process as rank 0: a fake process
group and its (dp × tp) device meshes, Megatron-style tensor parallelism with ``parallelize_module``
(torchtitan's plan), and FSDP2 ``fully_shard`` over the shard group."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from gpuplan.errors import GpuplanError
from gpuplan.trace.build import blocks_of


def init_fake_pg(dp: int, tp: int) -> dict[str, Any]:
    """A fake process group of dp × tp ranks (this process is rank 0) and its device meshes:
    ``dp`` (the FSDP shard group) and ``tp``, sliced from one 2-D mesh before fake mode starts."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=dp * tp)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    return {"dp": mesh["dp"], "tp": mesh["tp"]}


@contextmanager
def mesh_outside_fake() -> Any:
    """DeviceMesh lays out its ranks with real integer tensors (``nonzero``, ``eq``), which
    FakeTensorMode rejects when FSDP2 or DTensor touch a mesh inside the mode: run the mesh's
    constructor and its ``mesh`` property outside fake mode while the trace runs."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    fget, init = DeviceMesh.mesh.fget, DeviceMesh.__init__

    def mesh(self: Any) -> Any:
        with unset_fake_temporarily():
            return fget(self)

    def init_real(self: Any, *a: Any, **k: Any) -> None:
        with unset_fake_temporarily():
            init(self, *a, **k)

    DeviceMesh.mesh, DeviceMesh.__init__ = property(mesh), init_real  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        DeviceMesh.mesh, DeviceMesh.__init__ = property(fget), init  # type: ignore[method-assign, assignment]


COLWISE = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROWWISE = ("o_proj", "down_proj")


def tied_head(model: nn.Module) -> bool:
    emb, head = getattr(model, "embed_tokens", None), getattr(model, "lm_head", None)
    return emb is not None and head is not None and head.weight is emb.weight


def check_tp_names(model: nn.Module, tp: int) -> list[str]:
    """Tensor parallelism shards the Linear layers by their Llama names; say what cannot be sharded."""
    blocks = blocks_of(model)
    found = {n.rsplit(".", 1)[-1] for b in blocks for n, m in b.named_modules() if isinstance(m, nn.Linear)}
    if not found & set(COLWISE + ROWWISE):
        raise GpuplanError(f"layout.tp={tp}: trace shards Linear layers named {', '.join(COLWISE + ROWWISE)} "
                           "(Llama names) in the blocks; this model has none: set tp: 1")
    for b in blocks:
        for n, m in b.named_modules():
            if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in COLWISE and m.out_features % tp:
                raise GpuplanError(f"layout.tp={tp} does not divide {n}'s {m.out_features} outputs: "
                                   "use a tp that divides it")
    return []


def tensor_parallel(model: nn.Module, mesh: Any, sp: bool, tied: bool | None, notes: list[str]) -> Any:
    """Megatron-style tensor parallelism with PyTorch's ``parallelize_module`` (torchtitan's plan).
    Returns the context the step runs in (``loss_parallel`` when the LM head is vocab-parallel)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        loss_parallel,
        parallelize_module,
    )

    tp = mesh.size()
    seq = Shard(1) if sp else Replicate()
    top: dict[str, Any] = {}
    emb, head, norm = (getattr(model, n, None) for n in ("embed_tokens", "lm_head", "norm"))
    vocab_parallel = isinstance(emb, nn.Embedding) and emb.num_embeddings % tp == 0
    if vocab_parallel:
        top["embed_tokens"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    elif emb is not None:
        notes.append("tensor parallel: the embedding is replicated (no nn.Embedding named embed_tokens with a "
                     "vocabulary divisible by tp); the formula counts it vocab-parallel")
    head_parallel = isinstance(head, nn.Linear) and head.out_features % tp == 0
    if head_parallel:
        top["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False)
    elif head is not None:
        notes.append("tensor parallel: the LM head is replicated (no nn.Linear named lm_head with a vocabulary "
                     "divisible by tp); the formula counts it and the logits vocab-parallel")
    if sp and isinstance(norm, nn.Module):
        top["norm"] = SequenceParallel()
    if top:
        parallelize_module(model, mesh, top)
    if tied and vocab_parallel and head_parallel:  # both shard the vocabulary dimension: keep them one parameter
        model.lm_head.weight = model.embed_tokens.weight
    for block in blocks_of(model):
        plan: dict[str, Any] = {}
        for name, mod in block.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(mod, nn.Linear) and leaf in COLWISE:
                plan[name] = ColwiseParallel()
            elif isinstance(mod, nn.Linear) and leaf in ROWWISE:
                plan[name] = RowwiseParallel(output_layouts=seq)
            elif sp and leaf in ("input_layernorm", "post_attention_layernorm"):
                plan[name] = SequenceParallel()
            elif sp and leaf in ("self_attn", "mlp"):  # gather the sequence before the column-parallel linears
                n_in = 3 if leaf == "self_attn" else 1
                plan[name] = PrepareModuleInput(input_layouts=(Shard(1),) + (None,) * (n_in - 1),
                                                desired_input_layouts=(Replicate(),) + (None,) * (n_in - 1))
        parallelize_module(block, mesh, plan)
    return loss_parallel if head_parallel else nullcontext


def shard_fsdp2(model: nn.Module, mesh: Any, zero: int, param_dtype: torch.dtype | None, notes: list[str]) -> None:
    """FSDP2: ``fully_shard`` each block, then the root (torchtitan's order)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else \
        MixedPrecisionPolicy()
    blocks = blocks_of(model)
    if not blocks:
        notes.append("no nn.ModuleList of blocks: FSDP wraps the whole model as one unit")
    for b in blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=zero == 3)
