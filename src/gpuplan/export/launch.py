"""What every node of a scheduled job runs: the framework's launcher, joined to the head node's rendezvous
as the scheduler states it, and the config files that launcher reads.

A scheduler export (Slurm, Kubernetes, SkyPilot) wraps one framework export (``--via``). Each node runs
one launcher — torchrun, or ``accelerate launch`` (which runs torchrun) — and the launcher starts one
process per GPU. The rendezvous, in torch.distributed.run's (torch 2.13) own options:

  one node   ``--standalone``: a local store on a free port, nothing to agree on.
  c10d       ``--rdzv-backend c10d --rdzv-endpoint HEAD:PORT --rdzv-id ID``: every node runs the same line and
             torchrun numbers the nodes as they join (Slurm: one srun task per node).
  static     ``--node-rank R --master-addr HEAD --master-port PORT``: the scheduler numbers the nodes
             (SkyPilot's SKYPILOT_NODE_RANK; the PyTorchJob operator's PET_NODE_RANK, which torchrun reads
             itself: every torchrun option falls back to its PET_<NAME> variable, torch/distributed/argparse_util.py).

``accelerate launch`` takes the same three through its own flags (accelerate 1.15, commands/launch.py:
``--num_machines``, ``--num_processes``, ``--machine_rank``, ``--main_process_ip``, ``--main_process_port``,
``--rdzv_backend``), as accelerate's own Slurm example does (examples/slurm/submit_multinode.sh).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import FRAMEWORK_TARGETS, Export, _parts
from gpuplan.export.to_accelerate import accelerate
from gpuplan.export.to_deepspeed import deepspeed
from gpuplan.export.to_megatron import args_array, megatron_args
from gpuplan.export.to_torchrun import layout_note
from gpuplan.export.to_torchtitan import torchtitan

# the framework target a scenario's training.framework runs under (catalog/frameworks.json ids); the rest —
# generic, megatron-lm (the 2020-22 code, not Megatron-Core's arguments), torchtune — launch with torchrun
NATURAL_TARGET = {"torchtitan": "torchtitan", "deepspeed": "deepspeed", "pytorch-fsdp": "accelerate",
                  "hf-trainer": "accelerate", "megatron-core": "megatron"}
SCRIPT = "train.py"  # the user's training script, for the targets that do not ship one
HEREDOC_END = "GPUPLAN_EOF"


def natural_target(framework: str) -> str:
    return NATURAL_TARGET.get(framework, "torchrun")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendezvous:
    """How the nodes of one job meet, in shell expressions of the scheduler's variables."""
    nodes: int
    procs_per_node: int
    port: int
    head: str | None = None       # the head node's address (None on one node)
    node_rank: str | None = None  # this node's rank when the scheduler numbers the nodes, else c10d numbers them
    run_id: str = "gpuplan"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLaunch:
    """The shell lines every node runs: ``prelude`` (bash definitions), then ``command``; ``files`` are the
    configs the command reads (name, text), placed by the scheduler export under its config folder."""
    via: str
    command: str
    prelude: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


def word(arg: str) -> str:
    """One shell word: a value holding a scheduler variable ($NAME) in double quotes so the shell expands it,
    anything else quoted literally."""
    if "$" in arg:
        if any(c in arg for c in '"\\`'):
            raise GpuplanError(f"cannot quote {arg!r} for the shell")
        return f'"{arg}"'
    return shlex.quote(arg)


def line(argv: list[str]) -> str:
    return " ".join(word(a) for a in argv)


def torchrun_launcher(r: Rendezvous) -> list[str]:
    """torchrun with the rendezvous options of ``r`` (see the module's doc)."""
    if r.nodes == 1:
        return ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(r.procs_per_node)]
    a = ["torchrun", "--nnodes", str(r.nodes), "--nproc-per-node", str(r.procs_per_node)]
    if r.node_rank is None:
        return [*a, "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{r.head}:{r.port}", "--rdzv-id", r.run_id]
    return [*a, "--node-rank", r.node_rank, "--master-addr", str(r.head), "--master-port", str(r.port)]


def accelerate_launcher(r: Rendezvous, config: str) -> list[str]:
    """``accelerate launch`` with the config file and the rendezvous of ``r``."""
    a = ["accelerate", "launch", "--config_file", config]
    if r.nodes == 1:
        return a
    a += ["--num_machines", str(r.nodes), "--num_processes", str(r.nodes * r.procs_per_node),
          "--main_process_ip", str(r.head), "--main_process_port", str(r.port)]
    return [*a, "--rdzv_backend", "c10d"] if r.node_rank is None else [*a, "--machine_rank", r.node_rank]


def node_launch(est: dict, via: str, model: Any, r: Rendezvous, config_dir: str) -> NodeLaunch:
    """What each node runs for framework target ``via``; configs are read from ``config_dir``."""
    if via not in FRAMEWORK_TARGETS:
        raise GpuplanError(f"--via {via!r}: choose one of {', '.join(FRAMEWORK_TARGETS)}")
    _, _, lay = _parts(est)
    torchrun = torchrun_launcher(r)
    if via == "torchtitan":
        fw = torchtitan(est, model)
        cmd = line([*torchrun, "-m", "torchtitan.train", "--job.config_file", f"{config_dir}/{fw.filename}"])
        return _with_config(via, cmd, fw)
    if via == "deepspeed":  # the script parses DeepSpeed's own arguments (deepspeed.add_config_arguments)
        fw = deepspeed(est)
        cmd = line([*torchrun, SCRIPT, "--deepspeed", "--deepspeed_config", f"{config_dir}/{fw.filename}"])
        return _with_config(via, cmd, fw, f"{SCRIPT} parses DeepSpeed's arguments (deepspeed.add_config_arguments) "
                            "and calls deepspeed.initialize(args=...); torchrun sets the ranks DeepSpeed reads")
    if via == "accelerate":
        fw = accelerate(est, scheduled=True)
        return _with_config(via, line([*accelerate_launcher(r, f"{config_dir}/{fw.filename}"), SCRIPT]), fw)
    if via == "megatron":
        args, notes = megatron_args(est, model)
        cmd = line([*torchrun, "pretrain_gpt.py"]) + ' "${MEGATRON_ARGS[@]}"'
        return NodeLaunch(via=via, command=cmd, prelude=tuple(args_array(args)),
                          notes=(*notes, "pretrain_gpt.py also needs the data, tokenizer and learning-rate "
                                         "arguments: add them to MEGATRON_ARGS"))
    return NodeLaunch(via=via, command=line([*torchrun, SCRIPT]), notes=(layout_note(lay),))


def _with_config(via: str, command: str, fw: Export, *extra: str) -> NodeLaunch:
    return NodeLaunch(via=via, command=command, files=((fw.filename, fw.text),), notes=(*fw.notes, *extra))


def heredoc(path: str, text: str) -> list[str]:
    """Shell lines that write ``text`` to ``path`` verbatim (a quoted here-document: nothing expands)."""
    if any(ln == HEREDOC_END for ln in text.splitlines()):
        raise GpuplanError(f"the config holds the line {HEREDOC_END}: it cannot be embedded in a shell script")
    return [f"cat > {word(path)} <<'{HEREDOC_END}'", *text.rstrip("\n").splitlines(), HEREDOC_END]
