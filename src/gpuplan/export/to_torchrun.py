"""A ``torchrun`` line: torch.distributed.run (torch 2.13) flags."""

from __future__ import annotations

import shlex

from gpuplan.export.common import RDZV_PORT, Export, _header, _parts
from gpuplan.export.nccl import allocator_env


def torchrun_args(est: dict, script: str | None = None) -> tuple[list[str], list[str]]:
    """torchrun's arguments run by hand on every node (a scheduler export states its own rendezvous:
    export/launch.py)."""
    hw, _, _ = _parts(est)
    per_node = min(hw["gpus"], hw["gpus_per_node"])
    notes: list[str] = []
    if hw["nodes"] == 1:
        a = ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(per_node)]
    else:
        a = ["torchrun", "--nnodes", str(hw["nodes"]), "--nproc-per-node", str(per_node),
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$MASTER_ADDR:{RDZV_PORT}", "--rdzv-id", "gpuplan"]
        notes.append(f"run the same command on each of the {hw['nodes']} nodes; MASTER_ADDR is one node's address")
    if script:
        a.append(script)
    return a, notes


def torchrun(est: dict, script: str = "train.py") -> Export:
    args, notes = torchrun_args(est, script)
    lay = est["scenario"]["layout"]
    head = "".join(f"# {line}\n" for line in _header(est, None))
    env = "".join(e.shell() + "\n" for e in allocator_env(est, "gpu"))
    text = head + env + " ".join(a if a.startswith("$") else shlex.quote(a) for a in args) + "\n"
    notes.append(layout_note(lay))
    return Export(target="torchrun", config=args, text=text, filename="launch.sh", notes=tuple(notes))



def layout_note(lay: dict) -> str:
    """What a bare torchrun line leaves to the training script."""
    return (f"the training script sets the layout itself (dp={lay['dp']} tp={lay['tp']} pp={lay['pp']} "
            f"cp={lay['cp']}); --to torchtitan/megatron/accelerate/deepspeed write it for you")
