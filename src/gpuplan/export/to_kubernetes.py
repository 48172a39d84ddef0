"""Kubernetes: a Kubeflow PyTorchJob (kubeflow.org/v1, the training operator v1.9) and the ConfigMap it mounts.

The operator (kubeflow/training-operator v1.9.0, pkg/controller.v1/pytorch/envvar.go and master.go) starts
one pod per replica — Master (1) and Worker (nodes − 1) — and gives every container MASTER_ADDR (the
master pod's service), MASTER_PORT (the container port named ``pytorchjob-port``), PET_NODE_RANK (its node
rank: 0 for the master, 1 + index for a worker), PET_NNODES and PET_NPROC_PER_NODE (``spec.nprocPerNode``).
The container is named ``pytorch`` (the operator finds the port there). Each pod runs the launcher once
(``launch.sh`` from the ConfigMap): torchrun with the static rendezvous of those variables, or
``accelerate launch`` with the same. GPUs are the device plugins' extended resources: ``nvidia.com/gpu``
(NVIDIA k8s-device-plugin) and ``amd.com/gpu`` (ROCm k8s-device-plugin). ``/dev/shm`` is a memory-backed
emptyDir: container runtimes default to 64 MB, too small for NCCL's shared-memory transport and data loaders.
The manifest is checked in tests against the operator's published CRD schema (tests/data).
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import Export, _header
from gpuplan.export.launch import NodeLaunch, Rendezvous, node_launch
from gpuplan.export.nccl import allocator_env, nccl_env, site_note
from gpuplan.export.scheduled import Job, yaml_text

GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
PORT = 23456               # PyTorchJobDefaultPort (pkg/apis/kubeflow.org/v1/pytorch_types.go)
PORT_NAME = "pytorchjob-port"
CONTAINER = "pytorch"      # PyTorchJobDefaultContainerName
CONFIG_DIR = "/etc/gpuplan"
IMAGE = "REPLACE-WITH-YOUR-TRAINING-IMAGE"


def kubernetes(est: dict, model: Any, via: str, job: Job) -> Export:
    if job.device == "gpu" and job.gpu_vendor not in GPU_RESOURCE:
        raise GpuplanError(f"cannot export to kubernetes: {job.gpu_id} is a {job.gpu_vendor} GPU, and Kubernetes "
                           f"requests GPUs by the vendor's device-plugin resource; gpuplan knows "
                           f"{', '.join(GPU_RESOURCE.values())}")
    rdzv = Rendezvous(nodes=job.nodes, procs_per_node=job.procs_per_node, port=PORT,
                      head="$MASTER_ADDR" if job.nodes > 1 else None, node_rank="$PET_NODE_RANK")
    launch = node_launch(est, via, model, rdzv, CONFIG_DIR)
    env = nccl_env(job.transport, job.link_gbit_per_s, job.nodes) if job.device == "gpu" else ()
    notes = [f"image: {IMAGE} stands for an image with the training code and {via}'s software; set it"]
    if env:
        notes.append(site_note(job.transport, job.fabric) + "; RDMA adapters reach a pod through the cluster's "
                     "RDMA device plugin or host networking, which this manifest does not request")
    if job.device == "cpu":
        notes.append(f"--device cpu: a dry run of the launch on CPUs — no GPUs requested, {job.procs_per_node} "
                     "processes per pod (the training script uses gloo)")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": job.name},
                 "data": {"launch.sh": _launch_script(launch), **dict(launch.files)}}
    env += allocator_env(est, job.device)
    pytorchjob = _pytorchjob(job, [{"name": e.name, "value": e.value} for e in env])
    head = "".join(f"# {ln}\n" for ln in _header(est, "kubectl apply -f pytorchjob.yaml"))
    return Export(target="kubernetes", config={"configmap": configmap, "pytorchjob": pytorchjob},
                  text=head + yaml_text([configmap, pytorchjob]), filename="pytorchjob.yaml",
                  notes=(*launch.notes, *notes))


def _launch_script(launch: NodeLaunch) -> str:
    return "\n".join(["#!/bin/bash", "set -euo pipefail", *launch.prelude, f"exec {launch.command}"]) + "\n"


def _pytorchjob(job: Job, env: list[dict[str, str]]) -> dict[str, Any]:
    limits = {GPU_RESOURCE[job.gpu_vendor]: job.procs_per_node} if job.device == "gpu" else {}
    resources = {"limits": limits} if limits else {"requests": {"cpu": job.procs_per_node}}
    container = {"name": CONTAINER, "image": IMAGE, "command": ["bash", f"{CONFIG_DIR}/launch.sh"],
                 "ports": [{"name": PORT_NAME, "containerPort": PORT}], "resources": resources,
                 "volumeMounts": [{"name": "gpuplan", "mountPath": CONFIG_DIR, "readOnly": True},
                                  {"name": "dshm", "mountPath": "/dev/shm"}]}
    if env:
        container["env"] = env
    pod = {"spec": {"containers": [container],
                    "volumes": [{"name": "gpuplan", "configMap": {"name": job.name}},
                                {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod}}
    if job.nodes > 1:
        replicas["Worker"] = {"replicas": job.nodes - 1, "restartPolicy": "OnFailure", "template": pod}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job.name},
            "spec": {"nprocPerNode": str(job.procs_per_node), "pytorchReplicaSpecs": replicas}}
