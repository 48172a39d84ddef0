"""One rank of a trial run, started by torchrun: ``python -m gpuplan.profile.worker CONFIG OUTDIR``.

Builds the scenario's model on the meta device, shards it with FSDP2 (``fully_shard`` per block
and at the root), materialises only the local shards, trains a few steps on synthetic tokens and
writes what it measured to OUTDIR/rank<k>.json. An out-of-memory error is a result, not a crash.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from gpuplan.profile.model import DecoderLM
from gpuplan.scenario import complete_layout, parse_scenario


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


class Checkpointed(torch.nn.Module):
    """Full activation recomputation of one block (torch.utils.checkpoint, non-reentrant)."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


def main(config_path: str, out_dir: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    cuda = cfg["device"] == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    out = Path(out_dir) / f"rank{rank}.json"
    result: dict = {"rank": rank, "world": world, "device": str(device)}
    try:
        sc = parse_scenario(cfg["scenario"])
        lay = complete_layout(sc)
        tr, m = sc.training, sc.model
        torch.manual_seed(0)
        with torch.device("meta"):
            net = DecoderLM(m)
        if lay.recompute == "full":
            net.layers = torch.nn.ModuleList(Checkpointed(b) for b in net.layers)
        mp = None
        if tr.precision in ("bf16", "fp16"):
            low = torch.bfloat16 if tr.precision == "bf16" else torch.float16
            mp = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
        kw = {"mp_policy": mp} if mp is not None else {}
        if world > 1 or lay.zero == 3:
            for block in net.layers:
                fully_shard(block, **kw)
            fully_shard(net, **kw)
        net.to_empty(device=device)
        with torch.no_grad():
            for p in net.parameters():
                p.normal_(0.0, 0.02)
        if tr.precision == "bf16-pure":
            net.to(torch.bfloat16)
        if tr.optimizer in ("adamw", "adam"):
            opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=cuda, foreach=None if cuda else False)
        else:
            opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9 if tr.optimizer == "sgd-momentum" else 0)
        b, s = lay.micro_batch, tr.seq_len
        accum = (tr.global_batch // (lay.dp * b)) if tr.global_batch else 1
        gen = torch.Generator(device="cpu").manual_seed(rank)

        def step() -> float:
            t0 = time.perf_counter()
            for _ in range(accum):
                tokens = torch.randint(0, m.vocab, (b, s + 1), generator=gen).to(device)
                logits = net(tokens[:, :-1])
                loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten()) / accum
                del logits
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            if cuda:
                torch.cuda.synchronize()
            return time.perf_counter() - t0

        for _ in range(cfg["warmup"]):
            step()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        times = [step() for _ in range(cfg["steps"])]
        result.update({
            "ok": True, "step_s": times, "tokens_per_step": accum * b * s * lay.dp,
            "param_bytes": _bytes(net.parameters()),
            "grad_bytes": _bytes(p.grad for p in net.parameters()),
            "optimizer_bytes": _state_bytes(opt),
            "peak_allocated": torch.cuda.max_memory_allocated() if cuda else None,
            "peak_reserved": torch.cuda.max_memory_reserved() if cuda else None,
            "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
            "device_total_memory": torch.cuda.get_device_properties(device).total_memory if cuda else None,
        })
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
