"""Each export target's own loader, for the tests: DeepSpeed's DeepSpeedConfig, accelerate's ClusterConfig
and launcher, torchtitan's ConfigManager (0.2.2, the last release that reads a TOML job config), torch's
torchrun parser. Megatron-LM's parser is not installable (see test_export.megatron_parser). Each ``load_*``
raises when the framework refuses the file and returns what it parsed; None when the package is missing."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any
from unittest import mock


def torchtitan_config() -> Any:
    """torchtitan.config (ConfigManager, JobConfig) without running ``torchtitan/__init__.py``: that
    imports the model zoo, whose MoE kernels need triton, which a CPU-only torch does not bring."""
    if "torchtitan.config" in sys.modules:
        return sys.modules["torchtitan.config"]
    spec = importlib.util.find_spec("torchtitan")
    if spec is None or not spec.submodule_search_locations:
        return None
    if importlib.util.find_spec("tyro") is None or importlib.util.find_spec("torch") is None:
        return None
    pkg = types.ModuleType("torchtitan")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules.setdefault("torchtitan", pkg)
    return importlib.import_module("torchtitan.config")


def _check_literals(obj: Any, where: str = "") -> None:
    """Every Literal-typed field of the parsed JobConfig holds one of its allowed values (tyro takes a TOML
    value as the default without checking it)."""
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            _check_literals(value, f"{where}{f.name}.")
            continue
        hint = hints.get(f.name)
        args = [a for a in typing.get_args(hint) if a is not type(None)] if hint is not None else []
        if typing.get_origin(hint) is typing.Literal or (args and typing.get_origin(args[0]) is typing.Literal):
            allowed = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else typing.get_args(args[0])
            if value is not None and value not in allowed:
                raise ValueError(f"{where}{f.name} = {value!r} is not one of {allowed}")


def load_torchtitan(text: str, tmp: Path) -> Any:
    cfg_mod = torchtitan_config()
    if cfg_mod is None:
        return None
    path = tmp / "job.toml"
    path.write_text(text)
    job = cfg_mod.ConfigManager().parse_args(["--job.config_file", str(path)])  # raises on an unknown key
    _check_literals(job)
    return job


def load_deepspeed(cfg: dict, dp_world: int) -> Any:
    if importlib.util.find_spec("deepspeed") is None:
        return None
    dsc = importlib.import_module("deepspeed.runtime.config")
    # DeepSpeedConfig reads the data-parallel world from torch.distributed: stand in for a process group
    with mock.patch.object(dsc.dist, "get_rank", lambda *a, **k: 0), \
            mock.patch.object(dsc.dist, "get_world_size", lambda *a, **k: dp_world):
        return dsc.DeepSpeedConfig(cfg)


def load_accelerate(text: str, tmp: Path) -> Any:
    if importlib.util.find_spec("accelerate") is None:
        return None
    config_args = importlib.import_module("accelerate.commands.config.config_args")
    launch = importlib.import_module("accelerate.commands.launch")
    path = tmp / "accelerate.yaml"
    path.write_text(text)
    cfg = config_args.ClusterConfig.from_yaml_file(str(path))  # raises on unknown top-level keys
    dests = {a.dest for a in launch.launch_command_parser()._actions}
    unknown = [k for k in list(cfg.fsdp_config) + list(cfg.parallelism_config) + list(cfg.dynamo_config or {})
               if k not in dests]
    if unknown:
        raise ValueError(f"`accelerate launch` has no argument {unknown}")
    return cfg


def load_torchrun(args: list[str]) -> Any:
    if importlib.util.find_spec("torch") is None:
        return None
    run = importlib.import_module("torch.distributed.run")
    return run.get_args_parser().parse_args(args[1:])
