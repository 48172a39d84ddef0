"""What every scheduler export reads from the Estimate: the job's nodes and processes, its GPU and network,
the predicted time, a name every scheduler accepts; and the YAML writer for the manifests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from gpuplan.errors import GpuplanError
from gpuplan.export.common import _parts

DEVICES = ("gpu", "cpu")
Device = Literal["gpu", "cpu"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    name: str                 # lower-case letters, digits and '-': valid for Slurm, Kubernetes and SkyPilot
    nodes: int
    procs_per_node: int       # one process per GPU (per planned GPU on a CPU dry run)
    device: Device
    gpu_id: str               # catalogue id (an inline GPU: its base's id + "-custom")
    gpu_vendor: str
    inline_gpu: bool          # a scenario's own variant of a catalogue GPU
    fabric: str               # the scale-out fabric's id
    transport: str | None     # fabrics.json transport: infiniband | roce | tcp | None (not stated)
    link_gbit_per_s: float | None
    train_s: float | None     # predicted time to train, failures included; None without tokens or steps


def job_of(est: dict, device: str) -> Job:
    from gpuplan.catalog.hardware import fabric_row, get_fabric, get_gpu, inline_gpu

    if device not in DEVICES:
        raise GpuplanError(f"--device {device!r}: choose gpu or cpu")
    hw, _, _ = _parts(est)
    gpu = inline_gpu(hw["gpu"]) if isinstance(hw["gpu"], dict) else get_gpu(hw["gpu"])
    fab = fabric_row(get_fabric(hw["scale_out"], "scale_out").id)
    t = est.get("time") or {}
    return Job(name=job_name(est), nodes=hw["nodes"], procs_per_node=min(hw["gpus"], hw["gpus_per_node"]),
               device=device, gpu_id=gpu.id, gpu_vendor=gpu.vendor, inline_gpu=isinstance(hw["gpu"], dict),
               fabric=fab["id"], transport=fab.get("transport"), link_gbit_per_s=fab.get("link_gbit_per_s"),
               train_s=t.get("train_s_with_failures") or t.get("train_s"))


def job_name(est: dict) -> str:
    """gpuplan-<model>, lower case, runs of other characters as one '-', at most 40 characters (Kubernetes
    appends -worker-<n> to a PyTorchJob's name for its pods, and a pod name is at most 63)."""
    name = str(est.get("model", {}).get("name") or "model").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-")[:32].strip("-") or "model"
    return f"gpuplan-{slug}"


def yaml_text(docs: list[Any]) -> str:
    """YAML documents with multi-line strings (scripts, embedded configs) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> Any:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    Dumper.ignore_aliases = lambda self, data: True  # type: ignore[method-assign]  # a shared pod template, twice
    return yaml.dump_all(docs, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)
