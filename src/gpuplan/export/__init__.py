"""A planned (or given) layout as the launch config of the framework that will run it.

Each target is a pure function of an Estimate (its normalized ``scenario``: hardware,
training, complete layout) and, where the target needs the architecture, the ``ModelSpec``.
Each returns an ``Export``: the config as data, the text to save, and ``notes`` — what the
target cannot express exactly and what was chosen instead. Nothing here launches anything.

Key and argument names, and the versions they were read from:
  DeepSpeed   ds_config JSON (deepspeed 0.19: runtime/config.py, runtime/zero/config.py,
              runtime/tensor_parallel/config.py); validated in tests by DeepSpeedConfig itself.
  accelerate  ``accelerate config`` YAML (accelerate 1.15: commands/config/config_args.py
              ClusterConfig, fsdp_config/parallelism_config keys of commands/launch.py).
  torchtitan  job-config TOML (torchtitan 0.2.2: config/job_config.py, JobConfig sections; 0.3 dropped TOML
              for Python config registries); validated in tests by torchtitan's own ConfigManager.
  Megatron-LM arguments of megatron/training/arguments.py (Megatron-Core 0.1x era; the parser is not on
              PyPI — megatron-core ships megatron/core only — so tests check its documented names).
  torchrun    torch.distributed.run (torch 2.13) flags.

The scheduler targets wrap one of those (``via``) and start it on the planned nodes (export/launch.py):
  Slurm       an sbatch script (sbatch/srun options of Slurm 22.05+); run to completion in tests on a one-node
              Slurm cluster.
  Kubernetes  a Kubeflow PyTorchJob (kubeflow.org/v1, training operator v1.9) and its ConfigMap; validated in
              tests against the operator's CRD schema.
  SkyPilot    a task YAML (skypilot 0.14); loaded in tests by sky.Task.from_yaml.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import FRAMEWORK_TARGETS, RDZV_PORT, SCHEDULER_TARGETS, TARGETS, Export
from gpuplan.export.launch import natural_target
from gpuplan.export.scheduled import job_of
from gpuplan.export.to_accelerate import accelerate
from gpuplan.export.to_deepspeed import deepspeed
from gpuplan.export.to_kubernetes import kubernetes
from gpuplan.export.to_megatron import megatron, megatron_args
from gpuplan.export.to_skypilot import skypilot
from gpuplan.export.to_slurm import slurm
from gpuplan.export.to_torchrun import torchrun, torchrun_args
from gpuplan.export.to_torchtitan import TITAN_MODELS, TITAN_SCHEDULES, to_toml, torchtitan
from gpuplan.report.spans import tight_line
from gpuplan.units import GiB

__all__ = ["FRAMEWORK_TARGETS", "RDZV_PORT", "SCHEDULER_TARGETS", "TARGETS", "TITAN_MODELS", "TITAN_SCHEDULES",
           "Export", "accelerate", "deepspeed", "export", "export_scenario", "kubernetes", "megatron", "megatron_args",
           "notes_text", "skypilot", "slurm", "to_toml", "torchrun", "torchrun_args", "torchtitan"]


def export(est: dict, target: str, model: Any = None, *, via: str | None = None, device: str = "gpu") -> Export:
    """The Estimate's layout as ``target``'s config (see TARGETS). A scheduler target (SCHEDULER_TARGETS)
    wraps the framework target ``via`` (default: the scenario's framework's own, else torchrun) and starts it
    on the planned nodes; ``device`` cpu makes that a CPU dry run (torchrun only). Formats with comments
    (YAML, TOML, shell) carry the notes in the text, after the header; JSON cannot."""
    pairs = _pairs_note(est)
    ex = _make(est, target, model, via, device)
    tr = (est.get("scenario") or {}).get("training") or {}
    if pairs:
        ex = replace(ex, notes=(*ex.notes, pairs))
    unsaid = [k for k in ("optimizer_in_backward", "activation_offloading") if tr.get(k)]
    if unsaid:  # torchtune's switches: none of the targets carries them
        ex = replace(ex, notes=(*ex.notes, f"{' and '.join(unsaid)} (torchtune's optimizer_in_bwd / "
                                           f"enable_activation_offloading) is not written: {target} has no such "
                                           "setting; the estimate assumed it"))
    if tr.get("cuda_graphs", "none") != "none":  # no target here carries the switch
        ex = replace(ex, notes=(*ex.notes, f"training.cuda_graphs ({tr['cuda_graphs']}) is not written: set it in "
                                           f"{target}'s own switches (Megatron: --cuda-graph-impl); the estimate "
                                           "assumed it"))
    mem = est.get("memory") or {}
    if mem and not mem.get("fits", True):
        over = (mem["total"] - mem["capacity"]) / GiB
        # a peak whose interval straddles the capacity may run: said as evaluate says it, not as out of memory
        said = f"this layout is {tight_line(mem)}" if mem.get("tight") else \
            (f"this layout does NOT fit: it needs {mem['total'] / GiB:.1f} GiB of {mem['capacity'] / GiB:.1f} GiB per "
             f"GPU ({over:+.1f} GiB)")
        ex = replace(ex, notes=(f"{said}; see `gpuplan fit` or `gpuplan plan`", *ex.notes))
    if ex.filename.endswith(".json") or not ex.notes:
        return ex
    lines = ex.text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return replace(ex, text="".join(lines[:n]) + notes_text(ex) + "".join(lines[n:]))


def _pairs_note(est: dict) -> str:
    """What an export of a preference run says: its batches are pairs (the answer's scenario counts them so:
    spec/scenario.py normalized), and the trainer brings the loss and the reference model; "" otherwise."""
    pref = ((est.get("scenario") or {}).get("training") or {}).get("preference")
    return (f"preference {pref}: the batch sizes are pairs, as the trainer counts them (TRL's "
            "per_device_train_batch_size; the step runs a chosen and a rejected sequence per pair); the preference "
            "loss and reference model are the trainer's (TRL's DPOTrainer), not written here") if pref else ""


def _make(est: dict, target: str, model: Any, via: str | None, device: str) -> Export:
    makers = {"deepspeed": lambda: deepspeed(est), "accelerate": lambda: accelerate(est),
              "torchtitan": lambda: torchtitan(est, model), "megatron": lambda: megatron(est, model),
              "torchrun": lambda: torchrun(est)}
    if target in makers:
        if via is not None or device != "gpu":
            raise GpuplanError(f"--via and --device apply to the scheduler targets ({', '.join(SCHEDULER_TARGETS)}), "
                               f"not to --to {target}")
        return makers[target]()
    if target not in SCHEDULER_TARGETS:
        raise GpuplanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    via = via or natural_target(est["scenario"]["training"].get("framework", "generic"))
    if via not in FRAMEWORK_TARGETS:
        raise GpuplanError(f"--via {via!r}: choose one of {', '.join(FRAMEWORK_TARGETS)}")
    job = job_of(est, device)
    if job.device == "cpu" and via != "torchrun":
        raise GpuplanError(f"--device cpu is a dry run of the launch with torchrun: {via} needs GPUs "
                           "(use --via torchrun with a script that runs on gloo)")
    schedulers = {"slurm": slurm, "kubernetes": kubernetes, "skypilot": skypilot}
    return schedulers[target](est, model, via, job)


def notes_text(ex: Export) -> str:
    return "".join(f"# note: {n}\n" for n in ex.notes)


# the training software each target runs (catalog/frameworks.json): its profile decides what can be exported
TARGET_FRAMEWORK = {"torchtitan": "torchtitan", "deepspeed": "deepspeed", "accelerate": "pytorch-fsdp",
                    "megatron": "megatron-core", "torchrun": "generic"}


def export_scenario(sc: Any, target: str, *, objective: str = "time", max_gpus: int | None = None,
                    via: str | None = None, device: str = "gpu") -> tuple[Export, str]:
    """Export the scenario's own layout when it fixes the parallel split (tp and pp; dp is derived),
    else the best layout ``plan`` finds for the target's framework (a scheduler target: the framework it
    wraps, ``via``). A layout the target's framework cannot run (catalog/frameworks.json), or a scheduler
    cannot state, is refused with its reason, never written. Returns the export and a line saying which
    it was."""
    from dataclasses import replace

    from gpuplan.api import evaluate, plan_scenario
    from gpuplan.catalog.refusals import why_not
    from gpuplan.model.completion import as_framework

    fw_target, what = _framework_target(sc, target, via)
    framework = TARGET_FRAMEWORK[fw_target]
    if sc.training.framework == "generic" and framework != "generic":  # plan and check as the target runs it
        sc = replace(sc, training=as_framework(sc, framework))
    elif sc.training.framework not in (framework, "generic") and framework != "generic":
        raise GpuplanError(f"the scenario's training.framework is {sc.training.framework}, but {what} "
                           f"writes a {framework} config: drop training.framework or export to its own target")

    if "tp" in sc.layout and "pp" in sc.layout:
        est = evaluate(sc).to_json()
        how = f"exporting the scenario's layout on {sc.hardware.gpus} GPUs"
    else:
        res = plan_scenario(sc, max_gpus=max_gpus, objective=objective).to_json()
        est = res["best"]
        if est is None:
            top = max(res["rejected"].items(), key=lambda kv: kv[1], default=None)
            why = f"; most were rejected because: {top[0]} ({top[1]:,})" if top else ""
            raise GpuplanError(f"nothing to export: no layout that {framework} can run fits{why} "
                               "(see `gpuplan plan --explain`)")
        open_fields = "/".join(k for k in ("tp", "pp") if k not in sc.layout)
        how = (f"layout open ({open_fields} not fixed): exporting the best of {res['searched']:,} planned "
               f"configurations by {objective}, {est['scenario']['hardware']['gpus']}× "
               f"{est['scenario']['hardware']['gpu']}")
    from gpuplan.spec import Training

    lay = est["scenario"]["layout"]
    tr = est["scenario"]["training"]
    training = replace(sc.training, method=tr["method"], precision=tr["precision"])
    refused = why_not(framework, lay, training) if isinstance(training, Training) else None
    if refused:
        raise GpuplanError(f"cannot export to {target if fw_target == target else f'{target} via {fw_target}'}: "
                           f"{refused}")
    if target in SCHEDULER_TARGETS:
        return export(est, target, sc.model, via=fw_target, device=device), f"{how}; {target} runs {fw_target}"
    return export(est, target, sc.model, via=via, device=device), how


def _framework_target(sc: Any, target: str, via: str | None) -> tuple[str, str]:
    """(the framework target that runs the job, how to name the choice in a message): ``target`` itself, or
    for a scheduler ``via`` or the scenario's framework's own target."""
    if target in TARGET_FRAMEWORK:
        if via is not None:
            raise GpuplanError(f"--via applies to the scheduler targets ({', '.join(SCHEDULER_TARGETS)}): "
                               f"--to {target} is the framework itself")
        return target, f"--to {target}"
    if target not in SCHEDULER_TARGETS:
        raise GpuplanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    fw = via or natural_target(sc.training.framework)
    if fw not in TARGET_FRAMEWORK:
        raise GpuplanError(f"--via {fw!r}: choose one of {', '.join(FRAMEWORK_TARGETS)}")
    return fw, f"--to {target} --via {fw}"
