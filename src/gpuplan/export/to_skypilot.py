"""SkyPilot: a task YAML (skypilot 0.14: ``sky launch gpuplan-task.yaml``) that starts the framework on the
planned nodes of whichever cloud or cluster SkyPilot finds them on.

``resources.accelerators`` is SkyPilot's name for the GPU and the count per node (``H100:8``), ``num_nodes``
the node count. ``run`` runs on every node with SkyPilot's variables (docs.skypilot.co, "Distributed
Multi-Node Jobs"): SKYPILOT_NODE_RANK (0 on the head) and SKYPILOT_NODE_IPS (one address per line, the head
first), so the launcher takes the static rendezvous: the first address, this node's rank. Framework configs
are written by ``run`` itself on every node (no shared file system is assumed). On an RDMA fabric,
``resources.network_tier: best`` asks for the cloud's high-performance network (InfiniBand/RDMA where offered;
SkyPilot then sets NCCL's variables itself), so gpuplan writes none there. Checked in tests by SkyPilot's own
parser (sky.Task.from_yaml).
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import RDZV_PORT, Export, _header
from gpuplan.export.launch import Rendezvous, heredoc, node_launch
from gpuplan.export.nccl import allocator_env, nccl_env, site_note
from gpuplan.export.scheduled import Job, yaml_text

# catalogue id -> SkyPilot's accelerator name (skypilot 0.14.1: sky/utils/gpu_names.py CANONICAL_GPU_NAMES and
# the cloud catalogues' names in sky/catalog/data_fetchers). SkyPilot names no form factor for H100 and
# A100-80GB: an SXM or a PCIe board may come; the notes say so.
ACCELERATORS = {
    "h100-sxm": "H100", "h100-pcie": "H100", "h100-nvl": "H100-NVL", "h200": "H200", "b200": "B200",
    "b300": "B300", "gb200": "GB200", "gb300": "GB300", "a100-80gb-sxm": "A100-80GB", "a100-80gb-pcie": "A100-80GB",
    "a100-40gb-sxm": "A100", "a100-40gb-pcie": "A100", "v100-32gb": "V100-32GB", "v100-16gb": "V100",
    "a10g": "A10G", "a10": "A10", "l4": "L4", "l40s": "L40S", "l40": "L40", "a40": "A40", "t4": "T4",
    "rtx-4090": "RTX4090", "rtx-3090": "RTX3090", "rtx-6000-ada": "RTX6000-Ada", "rtx-a6000": "A6000",
    "mi300x": "MI300X",
}
FORM_FACTOR_OPEN = {"h100-sxm", "h100-pcie", "a100-80gb-sxm", "a100-80gb-pcie"}
CONFIG_DIR = "gpuplan"


def skypilot(est: dict, model: Any, via: str, job: Job) -> Export:
    resources, notes = _resources(job)
    rdzv = Rendezvous(nodes=job.nodes, procs_per_node=job.procs_per_node, port=RDZV_PORT,
                      head="$MASTER_ADDR" if job.nodes > 1 else None, node_rank="$SKYPILOT_NODE_RANK")
    launch = node_launch(est, via, model, rdzv, CONFIG_DIR)
    run = ["set -euo pipefail"]
    if job.nodes > 1:
        # the first line by expansion, not `echo | head -n1`: under pipefail, echo killed by SIGPIPE when head exits
        # first ends the script with status 141
        run.append('MASTER_ADDR="${SKYPILOT_NODE_IPS%%$\'\\n\'*}"')
    if launch.files:
        run.append(f"mkdir -p {CONFIG_DIR}")
        for name, text in launch.files:
            run += heredoc(f"{CONFIG_DIR}/{name}", text)
    run += [*launch.prelude, launch.command]
    task: dict[str, Any] = {"name": job.name, "num_nodes": job.nodes, "resources": resources}
    rdma = job.transport in ("infiniband", "roce")
    env = nccl_env(job.transport, job.link_gbit_per_s, job.nodes) if job.device == "gpu" and not rdma else ()
    if env:
        notes.append(site_note(job.transport, job.fabric))
    env += allocator_env(est, job.device)
    if env:
        task["envs"] = {e.name: e.value for e in env}
    task["run"] = "\n".join(run) + "\n"
    head = "".join(f"# {ln}\n" for ln in _header(est, "sky launch gpuplan-task.yaml"))
    return Export(target="skypilot", config=task, text=head + yaml_text([task]), filename="gpuplan-task.yaml",
                  notes=(*launch.notes, *notes))


def _resources(job: Job) -> tuple[dict[str, Any], list[str]]:
    """``resources``: the accelerator and count per node (or CPUs for a dry run), and the network tier."""
    if job.device == "cpu":
        return {"cpus": f"{job.procs_per_node}+"}, [
            f"--device cpu: a dry run of the launch on CPUs — no GPUs requested, {job.procs_per_node} processes "
            "per node (the training script uses gloo)"]
    name = None if job.inline_gpu else ACCELERATORS.get(job.gpu_id)
    if name is None:
        what = "a scenario's own GPU variant" if job.inline_gpu else job.gpu_id
        raise GpuplanError(f"cannot export to skypilot: {what} has no SkyPilot accelerator name (gpuplan maps "
                           f"{', '.join(sorted(ACCELERATORS))}); SkyPilot asks clouds for GPUs by that name")
    notes = []
    if job.gpu_id in FORM_FACTOR_OPEN:
        notes.append(f"accelerators {name}: SkyPilot's name does not tell SXM from PCIe boards; pin an instance "
                     "type (resources.instance_type) if the plan's NVLink matters")
    resources: dict[str, Any] = {"accelerators": f"{name}:{job.procs_per_node}"}
    if job.nodes > 1 and job.transport in ("infiniband", "roce"):
        resources["network_tier"] = "best"
    return resources, notes
