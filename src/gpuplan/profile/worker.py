"""One rank of a trial run, started by torchrun: ``python -m gpuplan.profile.worker CONFIG OUTDIR``.

Builds the scenario's model (``gpuplan.trace.model.CausalLM``, the same construction as the
trace) on the meta device; with ``tp > 1`` splits it over a (dp, tp) device mesh with tensor
parallelism (Megatron-style: q/k/v/gate/up and the LM head column-wise, o/down row-wise, the
embedding vocab-parallel, norms replicated), wraps the blocks for full recompute when asked,
shards it with FSDP2 (``fully_shard`` per block and at the root, over the dp mesh), materialises
only the local shards, trains a few steps on synthetic tokens and writes what it measured to
OUTDIR/rank<k>.json (rank 0 also writes OUTDIR/progress, "done total", after every step). An
out-of-memory error is a result, not a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from gpuplan.io.scenario import parse_scenario
from gpuplan.profile.model_check import check_model
from gpuplan.spec.model import ModelSpec
from gpuplan.spec.scenario import complete_layout
from gpuplan.trace.build import Checkpointed
from gpuplan.trace.model import CausalLM, causal_lm_loss


def _bytes(tensors) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    return _bytes(v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor) and v.dim() > 0)


def tensor_parallel(net: CausalLM, tp_mesh) -> None:  # noqa: ANN001 - DeviceMesh
    """Megatron-style tensor parallelism without sequence parallelism (torchtitan's plan): each
    rank keeps a/tp query and kv/tp K/V heads; the norms stay whole (replicated) on every tp rank."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = tp_mesh.size()
    tied = net.lm_head.weight is net.embed_tokens.weight
    parallelize_module(net, tp_mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Replicate()),
    })
    if tied:
        net.lm_head.weight = net.embed_tokens.weight  # both split the vocabulary rows: still one tensor
    plan = {f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")}
    plan |= {"self_attn.o_proj": RowwiseParallel(), "mlp.gate_proj": ColwiseParallel(),
             "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for block in net.layers:
        parallelize_module(block, tp_mesh, plan)
        block.self_attn.a //= tp  # CausalLM's attention reads local heads from the shapes; the
        block.self_attn.kv //= tp  # eager path's GQA group count uses these


def build(m: ModelSpec, lay, precision: str, device: torch.device, world: int) -> tuple[torch.nn.Module, int]:  # noqa: ANN001
    """The parallelised, materialised model and this rank's data-parallel rank."""
    check_model(m, lay.tp)
    with torch.device("meta"):
        net = CausalLM(m)
    dp_rank = dist.get_rank()
    dp_mesh = None
    if lay.tp > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.type, (world // lay.tp, lay.tp), mesh_dim_names=("dp", "tp"))
        tensor_parallel(net, mesh["tp"])
        dp_mesh, dp_rank = mesh["dp"], mesh["dp"].get_local_rank()
    if lay.recompute == "full":
        net.layers = torch.nn.ModuleList(Checkpointed(b) for b in net.layers)
    mp = None
    if precision in ("bf16", "fp16"):
        low = torch.bfloat16 if precision == "bf16" else torch.float16
        mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    kw = {"mp_policy": mp} if mp is not None else {}
    if dp_mesh is not None:
        kw["mesh"] = dp_mesh
    if world > 1 or lay.zero == 3:
        for block in net.layers:
            fully_shard(block, **kw)
        fully_shard(net, **kw)
    net.to_empty(device=device)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
        half = m.head_dim // 2  # the rotary frequencies (a buffer, left uninitialised by to_empty)
        net.inv_freq.copy_(1.0 / 10000 ** (torch.arange(0, half, dtype=torch.float32, device=device) / half))
    if precision == "bf16-pure":
        net.to(torch.bfloat16)
    return net, dp_rank


def main(config_path: str, out_dir: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    cuda = cfg["device"] == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    init = os.environ.get("GPUPLAN_INIT_FILE")  # the single-node launcher: a file rendezvous, no TCP port
    if init:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{init}",
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    out = Path(out_dir) / f"rank{rank}.json"
    result: dict = {"rank": rank, "world": world, "device": str(device)}
    try:
        # rank 0 writes the progress file the launcher's progress line reads
        result.update(_trial(cfg, device, world, Path(out_dir) / "progress" if rank == 0 else None))
        code = 0
    except torch.OutOfMemoryError as err:
        result.update({"ok": False, "oom": True, "error": str(err).splitlines()[0]})
        code = 3
    except Exception as err:  # reported to the launcher, which prints one line
        result.update({"ok": False, "oom": False, "error": f"{type(err).__name__}: {err}"})
        code = 4
    out.write_text(json.dumps(result))
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    return code


def _trial(cfg: dict, device: torch.device, world: int, progress: Path | None) -> dict:
    """Build the scenario's model, train the warm-up and measured steps, and return what was measured."""
    cuda = device.type == "cuda"
    sc = parse_scenario(cfg["scenario"])
    lay = complete_layout(sc)
    tr, m = sc.training, sc.model
    torch.manual_seed(0)  # the same initial weights on every rank
    net, dp_rank = build(m, lay, tr.precision, device, world)
    if tr.optimizer in ("adamw", "adam"):
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=cuda, foreach=None if cuda else False)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9 if tr.optimizer == "sgd-momentum" else 0)
    b, s = lay.micro_batch, tr.seq_len
    accum = (tr.global_batch // (lay.dp * b)) if tr.global_batch else 1
    gen = torch.Generator(device="cpu").manual_seed(dp_rank)  # tp ranks of one replica: same tokens
    steps = _Steps(net=net, opt=opt, vocab=m.vocab, shape=(b, s), accum=accum, gen=gen, device=device,
                   progress=progress, total=cfg["warmup"] + cfg["steps"])
    for _ in range(cfg["warmup"]):
        steps.step()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = [steps.step() for _ in range(cfg["steps"])]
    return {
        "ok": True, "step_s": times, "tokens_per_step": accum * b * s * lay.dp,
        "param_bytes": _bytes(net.parameters()),
        "grad_bytes": _bytes(p.grad for p in net.parameters()),
        "optimizer_bytes": _state_bytes(opt),
        "peak_allocated": torch.cuda.max_memory_allocated() if cuda else None,
        "peak_reserved": torch.cuda.max_memory_reserved() if cuda else None,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "device_total_memory": torch.cuda.get_device_properties(device).total_memory if cuda else None,
    }


@dataclass(kw_only=True)
class _Steps:
    """Training steps on synthetic tokens: ``accum`` micro-batches of ``shape`` (batch, sequence),
    then the optimizer step; counts the steps done into ``progress`` (when given) after each."""
    net: torch.nn.Module
    opt: torch.optim.Optimizer
    vocab: int
    shape: tuple[int, int]
    accum: int
    gen: torch.Generator
    device: torch.device
    progress: Path | None
    total: int
    done: int = 0

    def step(self) -> float:
        """One optimizer step; its wall time in seconds (after a device synchronize)."""
        (b, s), accum = self.shape, self.accum
        t0 = time.perf_counter()
        for _ in range(accum):
            tokens = torch.randint(0, self.vocab, (b, s + 1), generator=self.gen).to(self.device)
            logits = self.net(tokens[:, :-1])
            loss = causal_lm_loss(logits, tokens[:, 1:]) / accum
            del logits
            loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=False)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        self.done += 1
        if self.progress is not None:  # read by the launcher's progress line; best effort
            try:
                self.progress.write_text(f"{self.done} {self.total}")
            except OSError:
                pass
        return elapsed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
