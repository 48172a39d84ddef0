"""The scenario file (YAML or JSON) and its command-line flags → validated spec values.

Every key is checked: unknown keys, wrong types and impossible values are a GpuplanError
naming the key and the fix (DESIGN.md section 3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.hardware import make_hardware
from gpuplan.modelspec import ModelSpec
from gpuplan.spec import LORA_TARGETS_ALL, Hardware, Layout, Training, check_layout, check_layout_fields
from gpuplan.units import parse_bytes, parse_count, parse_money

TOP_KEYS = ("name", "model", "hardware", "training", "layout")
HARDWARE_KEYS = ("gpu", "gpus", "gpus_per_node", "scale_up", "scale_out", "price_per_gpu_hour", "power_limit_w",
                 "calibration", "host_memory")
TRAINING_KEYS = ("seq_len", "global_batch", "global_batch_tokens", "tokens", "steps", "precision", "optimizer",
                 "optimizer_impl", "method", "lora_rank", "lora_targets", "attention", "dropout",
                 "trace_calibration")
LAYOUT_KEYS = tuple(f.name for f in fields(Layout))
INT_KEYS = {"gpus", "gpus_per_node", "seq_len", "global_batch", "steps", "lora_rank", "dp", "tp", "pp", "cp",
            "ep", "zero", "zero_group", "micro_batch", "virtual_stages"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A parsed scenario: the model, the hardware, the job, and the layout fields the user fixed."""

    name: str | None
    model: ModelSpec
    hardware: Hardware
    training: Training
    layout: dict[str, Any] = field(default_factory=dict)  # partial: what the user fixed
    model_ref: Any = None  # the model reference as given (resolved path, mapping or name)

    def with_gpus(self, gpus: int) -> Scenario:
        return replace(self, hardware=replace(self.hardware, gpus=gpus))


def _check_keys(section: dict, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(section, dict):
        raise GpuplanError(f"{where} must be a mapping of keys, got {type(section).__name__}")
    for key in section:
        if key not in allowed:
            raise GpuplanError(f"unknown key {where}.{key}: valid keys are {', '.join(allowed)}")


MAX_WHOLE = 2**53  # beyond this a float no longer holds every whole number (and no GPU count or length is)


def _int(value: Any, key: str) -> int:
    num = parse_count(value, key)
    if abs(num) >= MAX_WHOLE:
        raise GpuplanError(f"{key} = {value!r} is too large: give a realistic size")
    if num != int(num):
        raise GpuplanError(f"{key} must be a whole number, got {value!r}")
    return int(num)


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
        return value.lower() in ("true", "yes", "on")
    raise GpuplanError(f"{key} must be true or false, got {value!r}")


def read_file(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise GpuplanError(f"scenario file {str(p)!r} not found: give the path to a .yaml or .json file")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        if p.suffix.lower() == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{p}: malformed JSON at line {err.lineno}: {err.msg}") from None
    except Exception as err:  # yaml.YAMLError and friends
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise GpuplanError(f"{p}: malformed YAML{where}: {getattr(err, 'problem', err)}") from None


def merge_flags(raw: dict, flags: dict[str, Any]) -> dict:
    """Flags (``{"hardware.gpu": "h100", ...}``) override the file's values."""
    if not isinstance(raw, dict):
        raise GpuplanError(f"a scenario must be a mapping with keys model, hardware, training, layout, "
                           f"got {type(raw).__name__}")
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in flags.items():
        if value is None:
            continue
        if "." in dotted:
            sec, key = dotted.split(".", 1)
            section = out.setdefault(sec, {})
            if not isinstance(section, dict):
                raise GpuplanError(f"{sec} must be a mapping in the scenario file")
            section[key] = value
        else:
            out[dotted] = value
    return out


def parse_scenario(raw: Any, base_dir: Path | None = None) -> Scenario:
    """One scenario mapping → Scenario (model loaded, hardware resolved, job validated)."""
    from gpuplan.models import load_model

    if not isinstance(raw, dict):
        raise GpuplanError("a scenario must be a mapping with keys model, hardware, training, layout")
    _check_keys(raw, TOP_KEYS, "scenario")
    if "model" not in raw:
        raise GpuplanError("scenario has no model: add `model: llama-3.1-8b` (or --model NAME)")
    model_ref = raw["model"]
    if isinstance(model_ref, str) and model_ref.lstrip().startswith("{"):  # inline mapping given as a flag
        import yaml

        try:
            model_ref = yaml.safe_load(model_ref)
        except yaml.YAMLError:
            raise GpuplanError(f"model {model_ref!r} looks like a mapping but does not parse: "
                               "write it as {params: 7e9} or {model_type: llama, ...}") from None
    if isinstance(model_ref, str) and base_dir is not None and (base_dir / model_ref).exists():
        model_ref = str(base_dir / model_ref)
    model = load_model(model_ref)

    hw_raw = raw.get("hardware") or {}
    _check_keys(hw_raw, HARDWARE_KEYS, "hardware")
    if "gpu" not in hw_raw:
        raise GpuplanError("scenario has no hardware.gpu: add `hardware: {gpu: h100-sxm}` (or --gpu NAME); "
                           "`gpuplan gpus` lists the catalogue")
    hardware = make_hardware(
        str(hw_raw["gpu"]),
        gpus=_int(hw_raw.get("gpus", 1), "hardware.gpus"),
        gpus_per_node=_int(hw_raw["gpus_per_node"], "hardware.gpus_per_node") if "gpus_per_node" in hw_raw else None,
        scale_up=hw_raw.get("scale_up"), scale_out=hw_raw.get("scale_out"),
        price_per_gpu_hour=parse_money(hw_raw["price_per_gpu_hour"], "hardware.price_per_gpu_hour")
        if hw_raw.get("price_per_gpu_hour") is not None else None,
        power_limit_w=parse_count(hw_raw["power_limit_w"], "hardware.power_limit_w")
        if hw_raw.get("power_limit_w") is not None else None,
    )
    if hw_raw.get("host_memory") is not None:
        host = parse_bytes(hw_raw["host_memory"], "hardware.host_memory")
        if not host > 0:
            raise GpuplanError("hardware.host_memory must be positive, e.g. 2TiB per node, "
                               f"got {hw_raw['host_memory']!r}")
        hardware = replace(hardware, host_memory_bytes=host)
    if hw_raw.get("calibration"):  # factors fitted by `gpuplan calibrate` on the user's own runs
        from gpuplan.profile.store import Store

        ref = str(hw_raw["calibration"])
        store = Store(None if ref in ("default", "true", "yes") else ref)
        factors = store.calibration(hardware.gpu.id)
        store.close()
        if factors is None:
            raise GpuplanError(f"hardware.calibration: the store {store.path} has no calibration for "
                               f"{hardware.gpu.id}: run `gpuplan profile` on it, then `gpuplan calibrate`")
        hardware = replace(hardware, memory_factor=factors[0], compute_factor=factors[1])

    tr_raw = dict(raw.get("training") or {})
    _check_keys(tr_raw, TRAINING_KEYS, "training")
    kw: dict[str, Any] = {}
    for key, value in tr_raw.items():
        if key in INT_KEYS:
            kw[key] = _int(value, f"training.{key}")
        elif key == "tokens":
            kw[key] = parse_count(value, "training.tokens")
        elif key == "dropout":
            kw[key] = float(parse_count(value, "training.dropout"))
        elif key == "lora_targets":
            if value in ("all", "all-linear"):
                value = LORA_TARGETS_ALL
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",")]
            kw[key] = tuple(value)
        elif key == "trace_calibration":  # activation ratio stored by `gpuplan trace --calibrate`
            if value:
                from gpuplan.trace.calibration import activation_factor

                kw["activation_factor"] = activation_factor(str(value), model.model_type)
        elif key != "global_batch_tokens":
            kw[key] = str(value).lower()
    seq_len = kw.get("seq_len", 4096)
    if "global_batch_tokens" in tr_raw:
        if "global_batch" in tr_raw:
            raise GpuplanError("give training.global_batch or training.global_batch_tokens, not both")
        gbt = parse_count(tr_raw["global_batch_tokens"], "training.global_batch_tokens")
        if gbt % seq_len:
            raise GpuplanError(f"training.global_batch_tokens={gbt:.0f} is not a multiple of seq_len={seq_len}")
        kw["global_batch"] = int(gbt // seq_len)
    training = Training(**kw)

    lay_raw = raw.get("layout") or {}
    _check_keys(lay_raw, LAYOUT_KEYS, "layout")
    layout: dict[str, Any] = {}
    for key, value in lay_raw.items():
        if key in INT_KEYS:
            if value is not None:  # a null degree is left open, like an absent one
                layout[key] = _int(value, f"layout.{key}")
        elif key in ("sequence_parallel", "dp_overlap", "tp_overlap"):
            layout[key] = _bool(value, f"layout.{key}")
        else:
            layout[key] = str(value).lower()
    check_layout_fields(layout)
    name = raw.get("name")
    return Scenario(name=str(name) if name is not None else None, model=model, hardware=hardware,
                    training=training, layout=layout, model_ref=model_ref)


def complete_layout(sc: Scenario, **overrides: Any) -> Layout:
    """The user's layout fields, the search's choices (``overrides``) and documented defaults:
    dp = gpus / (tp·pp·cp), zero 0, micro_batch 1, recompute none, sequence_parallel when tp > 1."""
    fixed = {**sc.layout, **overrides}
    tp, pp, cp = fixed.get("tp", 1), fixed.get("pp", 1), fixed.get("cp", 1)
    gpus = sc.hardware.gpus
    if "dp" not in fixed or fixed["dp"] is None:
        if gpus % (tp * pp * cp):
            raise GpuplanError(f"tp×pp×cp = {tp}×{pp}×{cp} = {tp * pp * cp} does not divide hardware.gpus = {gpus}: "
                               "choose degrees whose product divides the GPU count")
        fixed["dp"] = gpus // (tp * pp * cp)
    fixed.setdefault("sequence_parallel", tp > 1)
    if fixed.get("virtual_stages", 1) > 1:
        fixed.setdefault("pp_schedule", "interleaved")
    layout = Layout(**fixed)
    check_layout(sc.model, sc.hardware, sc.training, layout)
    return layout


def normalized(sc: Scenario, layout: Layout) -> dict:
    """The scenario as evaluated: every field explicit, in the file's own units."""
    hw, tr = sc.hardware, sc.training
    return {
        "name": sc.name,
        "model": sc.model.name,
        "hardware": {"gpu": hw.gpu.id, "gpus": hw.gpus, "gpus_per_node": hw.gpus_per_node, "nodes": hw.nodes,
                     "scale_up": hw.scale_up.id, "scale_out": hw.scale_out.id if hw.scale_out else None,
                     "price_per_gpu_hour": hw.price_per_gpu_hour, "power_limit_w": hw.power_limit_w,
                     "memory_factor": hw.memory_factor, "compute_factor": hw.compute_factor},
        "training": {"seq_len": tr.seq_len, "global_batch": tr.global_batch, "tokens": tr.tokens,
                     "steps": tr.steps, "precision": tr.precision, "optimizer": tr.optimizer,
                     "optimizer_impl": tr.optimizer_impl,
                     "method": tr.method, "lora_rank": tr.lora_rank if tr.method != "full" else None,
                     "attention": tr.attention, "dropout": tr.dropout},
        "layout": {f.name: getattr(layout, f.name) for f in fields(Layout)},
    }
