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
  torchtitan  job-config TOML (torchtitan/config/job_config.py, JobConfig sections).
  Megatron-LM arguments of megatron/training/arguments.py (Megatron-Core 0.1x era).
  torchrun    torch.distributed.run (torch 2.13) flags.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import RDZV_PORT, TARGETS, Export
from gpuplan.export.to_accelerate import accelerate
from gpuplan.export.to_deepspeed import deepspeed
from gpuplan.export.to_megatron import megatron, megatron_args
from gpuplan.export.to_torchrun import torchrun, torchrun_args
from gpuplan.export.to_torchtitan import TITAN_MODELS, TITAN_SCHEDULES, to_toml, torchtitan
from gpuplan.units import GiB

__all__ = ["RDZV_PORT", "TARGETS", "TITAN_MODELS", "TITAN_SCHEDULES", "Export", "accelerate", "deepspeed",
           "export", "export_scenario", "megatron", "megatron_args", "notes_text", "to_toml", "torchrun",
           "torchrun_args", "torchtitan"]


def export(est: dict, target: str, model: Any = None) -> Export:
    """The Estimate's layout as ``target``'s config (see TARGETS). Formats with comments
    (YAML, TOML, shell) carry the notes in the text, after the header; JSON cannot."""
    makers = {"deepspeed": lambda: deepspeed(est), "accelerate": lambda: accelerate(est),
              "torchtitan": lambda: torchtitan(est, model), "megatron": lambda: megatron(est, model),
              "torchrun": lambda: torchrun(est)}
    if target not in makers:
        raise GpuplanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    ex = makers[target]()
    mem = est.get("memory") or {}
    if mem and not mem.get("fits", True):
        over = (mem["total"] - mem["capacity"]) / GiB
        ex = replace(ex, notes=(f"this layout does NOT fit: it needs {mem['total'] / GiB:.1f} GiB of "
                                f"{mem['capacity'] / GiB:.1f} GiB per GPU ({over:+.1f} GiB); see `gpuplan fit` "
                                "or `gpuplan plan`", *ex.notes))
    if ex.filename.endswith(".json") or not ex.notes:
        return ex
    lines = ex.text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return replace(ex, text="".join(lines[:n]) + notes_text(ex) + "".join(lines[n:]))


def notes_text(ex: Export) -> str:
    return "".join(f"# note: {n}\n" for n in ex.notes)


# the training software each target runs (catalog/frameworks.json): its profile decides what can be exported
TARGET_FRAMEWORK = {"torchtitan": "torchtitan", "deepspeed": "deepspeed", "accelerate": "pytorch-fsdp",
                    "megatron": "megatron-core", "torchrun": "generic"}


def export_scenario(sc: Any, target: str, *, objective: str = "time",
                    max_gpus: int | None = None) -> tuple[Export, str]:
    """Export the scenario's own layout when it fixes the parallel split (tp and pp; dp is derived),
    else the best layout ``plan`` finds for the target's framework. A layout the target's framework
    cannot run (catalog/frameworks.json) is refused with its reason, never written. Returns the
    export and a line saying which it was."""
    from dataclasses import replace

    from gpuplan.api import evaluate, plan_scenario
    from gpuplan.catalog.frameworks import why_not

    framework = TARGET_FRAMEWORK.get(target)
    if framework is None:
        raise GpuplanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    if sc.training.framework == "generic" and framework != "generic":  # plan and check as the target runs it
        sc = replace(sc, training=replace(sc.training, framework=framework))
    elif sc.training.framework not in (framework, "generic") and framework != "generic":
        raise GpuplanError(f"the scenario's training.framework is {sc.training.framework}, but --to {target} "
                           f"writes a {framework} config: drop training.framework or export to its own target")

    if "tp" in sc.layout and "pp" in sc.layout:
        est = evaluate(sc).to_json()
        how = f"exporting the scenario's layout on {sc.hardware.gpus} GPUs"
    else:
        res = plan_scenario(sc, max_gpus=max_gpus, objective=objective).to_json()
        est = res["best"]
        if est is None:
            raise GpuplanError("nothing to export: no layout fits (see `gpuplan plan --explain`)")
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
        raise GpuplanError(f"cannot export to {target}: {refused}")
    return export(est, target, sc.model), how
