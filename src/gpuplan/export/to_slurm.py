"""Slurm: an sbatch script that starts the framework on the planned nodes (options of sbatch(1) and srun(1),
Slurm 22.05 and later).

  #SBATCH --nodes=N --ntasks-per-node=1   one launcher per node (torchrun or accelerate launch), which starts
                                          the node's processes, one per GPU
  #SBATCH --gpus-per-node=G               the planned GPUs per node (select/cons_tres; --gres=gpu:G elsewhere)
  #SBATCH --exclusive                     whole nodes: the plan gives each node's network links to the job's GPUs
  #SBATCH --time=D-HH:MM:SS               the predicted time to train (failures included) × (1 + TIME_MARGIN)
                                          + STARTUP_S, rounded up to the minute
  HEAD_NODE                               the allocation's first node (scontrol show hostnames): torchrun's c10d
                                          rendezvous store; every node runs the same line and torchrun numbers them
  srun --kill-on-bad-exit=1               one node failing ends the step instead of leaving the others waiting
                                          in a collective; --cpus-per-task gives the launcher the node's CPUs (an
                                          srun step gets one CPU per task unless told)

Framework configs are written, by the script, under the submission folder (``gpuplan-<job id>/``), which every
node reads: Slurm clusters share it over a network file system.
"""

from __future__ import annotations

import math
from typing import Any

from gpuplan.export.common import RDZV_PORT, Export, _header
from gpuplan.export.launch import NodeLaunch, Rendezvous, heredoc, node_launch
from gpuplan.export.nccl import allocator_env, nccl_env, site_note
from gpuplan.export.scheduled import Job

TIME_MARGIN = 0.25  # gpuplan's cross-validated throughput error holds most published runs within ±25 % (validate)
STARTUP_S = 1800    # an allowance for start-up: image, model and data loading, first checkpoint (not predicted)
LONG_JOB_S = 86400  # above a day, say how to split the run if the partition's MaxTime is shorter
CONFIG_DIR = "$SLURM_SUBMIT_DIR/gpuplan-$SLURM_JOB_ID"


def slurm_time(seconds: float) -> str:
    """A --time value, D-HH:MM:SS, rounded up to the minute."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def time_limit(train_s: float | None) -> tuple[str | None, float | None]:
    """(the --time value, its seconds) for a predicted time; (None, None) when nothing was predicted."""
    if not train_s:
        return None, None
    limit = train_s * (1 + TIME_MARGIN) + STARTUP_S
    return slurm_time(limit), limit


def slurm(est: dict, model: Any, via: str, job: Job) -> Export:
    rdzv = Rendezvous(nodes=job.nodes, procs_per_node=job.procs_per_node, port=RDZV_PORT,
                      head="$HEAD_NODE" if job.nodes > 1 else None, run_id="$SLURM_JOB_ID")
    launch = node_launch(est, via, model, rdzv, "$CONFIG_DIR")
    directives, notes = _directives(job)
    env = nccl_env(job.transport, job.link_gbit_per_s, job.nodes) if job.device == "gpu" else ()
    if env:
        notes.append(site_note(job.transport, job.fabric))
    env += allocator_env(est, job.device)
    body = _body(job, launch, env)
    head = [f"# {ln}" for ln in _header(est, "sbatch gpuplan.sbatch")]
    text = "\n".join(["#!/bin/bash", *head, *(f"#SBATCH --{k}" + (f"={v}" if v is not None else "")
                                                for k, v in directives.items()), "", *body]) + "\n"
    config = {"sbatch": directives, "via": via, "env": {e.name: e.value for e in env}, "command": launch.command,
              "files": [name for name, _ in launch.files]}
    return Export(target="slurm", config=config, text=text, filename="gpuplan.sbatch",
                  notes=(*launch.notes, *notes))


def _directives(job: Job) -> tuple[dict[str, Any], list[str]]:
    """The #SBATCH options (None: a flag without a value) and the notes on them."""
    notes: list[str] = []
    d: dict[str, Any] = {"job-name": job.name, "nodes": job.nodes, "ntasks-per-node": 1}
    if job.device == "gpu":
        d["gpus-per-node"] = job.procs_per_node
    else:
        notes.append(f"--device cpu: a dry run of the launch on CPUs — no GPUs requested, {job.procs_per_node} "
                     "processes per node (the training script uses gloo)")
    d["exclusive"] = None
    limit, limit_s = time_limit(job.train_s)
    if limit is None:
        notes.append("no time limit written: the scenario gives no tokens or steps, so no time to train was "
                     "predicted (the partition's default limit applies)")
    else:
        d["time"] = limit
        if limit_s and limit_s > LONG_JOB_S:
            notes.append(f"--time={limit}: if the partition's MaxTime (scontrol show partition) is shorter, split "
                         "the run into jobs chained with sbatch --dependency=afterany:<job id> that resume from the "
                         "last checkpoint")
    d["output"] = "%x-%j.out"
    return d, notes


def _body(job: Job, launch: NodeLaunch, env: tuple) -> list[str]:
    """The commands after the #SBATCH block."""
    lines = ["set -euo pipefail"]
    if job.nodes > 1:
        lines += ["# rendezvous: the allocation's first node holds torchrun's c10d store",
                  # all the names, then the first by expansion: `| head -n 1` under pipefail ends the job with
                  # status 141 when scontrol, still writing, is killed by SIGPIPE
                  'NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST")', 'HEAD_NODE="${NODES%%$\'\\n\'*}"']
    for e in env:
        lines.append(e.shell())
    if launch.files:
        lines += [f'CONFIG_DIR="{CONFIG_DIR}"', 'mkdir -p "$CONFIG_DIR"']
        for name, text in launch.files:
            lines += heredoc(f"$CONFIG_DIR/{name}", text)
    lines += launch.prelude
    lines.append('srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --kill-on-bad-exit=1 '
                 + launch.command)
    return lines
