"""torchtitan job-config TOML (torchtitan 0.2.2, the last release read from TOML: torchtitan/config/job_config.py,
JobConfig sections; checked in tests by its own ConfigManager)."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.export.common import Export, _batches, _header, _parts, _shard_split, _steps
from gpuplan.spec.job import FP4_RECIPES
from gpuplan.spec.layout import expert_tp_in

TITAN_MODELS = {"llama": "llama3", "mistral": "llama3", "qwen2": "llama3", "qwen3": "qwen3",
                "deepseek_v3": "deepseek_v3", "deepseek_v2": "deepseek_v3", "llama4": "llama4"}
TITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                   "zero-bubble": "ZBVZeroBubble"}


def torchtitan(est: dict, model: Any = None) -> Export:
    hw, tr, lay = _parts(est)
    gb, accum = _batches(hw, tr, lay)
    notes: list[str] = []
    cfg: dict[str, dict[str, Any]] = {
        "job": {"description": f"{est['model'].get('name', 'model')} — gpuplan export"},
        "model": _model_section(est, model, notes),
    }
    training: dict[str, Any] = {"seq_len": tr["seq_len"], "global_batch_size": gb,
                                "mixed_precision_param": "float32" if tr["precision"] == "fp32" else "bfloat16"}
    par: dict[str, Any] = {"tensor_parallel_degree": lay["tp"], "pipeline_parallel_degree": lay["pp"],
                           "context_parallel_degree": lay["cp"], "expert_parallel_degree": lay["ep"]}
    if lay["ep"] > 1:  # torchtitan's default is 1 (ep over tp too): written as the estimate's (spec Layout.expert_tp)
        par["expert_tensor_parallel_degree"] = expert_tp_in(lay)
    _batch_and_pipeline(training, par, lay, (gb, accum), model, notes)
    steps = _steps(tr, gb)
    if steps:
        training["steps"] = steps
    if lay["offload"] != "none":
        training["enable_cpu_offload"] = True
        if lay["offload"] == "optimizer":
            notes.append("offload=optimizer: torchtitan's FSDP CPU offload moves parameters, gradients and "
                         "optimizer state together")
    _data_parallel(par, lay, notes)
    _tensor_parallel(par, lay, notes)
    cfg["training"] = training
    cfg["parallelism"] = par
    cfg["activation_checkpoint"] = _activation_checkpoint(lay["recompute"], notes, lay.get("recompute_every", 1))
    cfg["optimizer"] = _optimizer(tr, notes)
    if tr.get("compile"):  # torchtitan 0.2 [compile]: components default ["model", "loss"]; "model": the loss eager
        cfg["compile"] = {"enable": True, "components": ["model"] if tr["compile"] == "model" else ["model", "loss"]}
    if tr.get("fp8_recipe") in FP4_RECIPES:
        notes.append(f"{tr['fp8_recipe']}: torchtitan's float8 converter has no 4-bit recipe — the config trains bf16")
    elif tr["precision"] == "fp8":  # torchtitan 0.2: converter "quantize.linear.float8", [quantize.linear.float8]
        cfg["model"]["converters"] = ["quantize.linear.float8"]
        # torchao's recipe names (Float8LinearRecipeName): tensorwise, rowwise, rowwise_with_gw_hp
        cfg["quantize"] = {"linear": {"float8": {"recipe_name": tr.get("fp8_recipe") or "tensorwise"}}}
    if tr.get("method", "full") != "full":
        notes.append(f"method={tr['method']}: torchtitan trains all weights; LoRA needs your own model code")
    text = "".join(f"# {line}\n" for line in _header(est, "torchrun ... -m torchtitan.train --job.config_file "
                                                      "job.toml")) + "\n" + to_toml(cfg)
    return Export(target="torchtitan", config=cfg, text=text, filename="job.toml", notes=tuple(notes))


def _model_section(est: dict, model: Any, notes: list[str]) -> dict[str, Any]:
    """[model]: torchtitan's model name for the model type, and a flavor guessed from the size."""
    mtype = getattr(model, "model_type", None)
    flavor = _flavor(est["model"].get("name") or "", est["model"]["params"])
    if mtype not in TITAN_MODELS:
        notes.append(f"model: torchtitan ships llama3/llama4/qwen3/deepseek_v3; check [model] name and flavor "
                     f"({mtype or 'unknown type'})")
    else:
        notes.append(f"model.flavor={flavor!r} guessed from the parameter count; use a flavor the model defines")
    return {"name": TITAN_MODELS.get(mtype or "", "llama3"), "flavor": flavor}


def _batch_and_pipeline(training: dict[str, Any], par: dict[str, Any], lay: dict, batches: tuple[int, int],
                        model: Any, notes: list[str]) -> None:
    """local_batch_size, and with pp > 1 the pipeline micro-batch, schedule and layers per stage.
    ``batches`` is (global batch, gradient-accumulation steps)."""
    gb, accum = batches
    if lay["pp"] > 1:
        # one pipeline step consumes the replica's whole share of the batch in micro-batches
        training["local_batch_size"] = gb // lay["dp"]
        par["pipeline_parallel_microbatch_size"] = lay["micro_batch"]
        par["pipeline_parallel_schedule"] = TITAN_SCHEDULES[lay["pp_schedule"]]
        chunks = lay["pp"] * (2 if lay["pp_schedule"] == "zero-bubble" else lay["virtual_stages"])
        n_layers = getattr(model, "n_layers", None)
        if chunks > lay["pp"] and n_layers:
            if n_layers % chunks:
                notes.append(f"{n_layers} layers do not split evenly into {chunks} stages: set split points")
            else:
                par["pipeline_parallel_layers_per_stage"] = n_layers // chunks
        if lay["pp_schedule"] == "zero-bubble":
            notes.append("zero-bubble: torchtitan's ZBVZeroBubble runs two (V-shaped) stages per rank")
    else:
        training["local_batch_size"] = lay["micro_batch"]
        if accum > 1:
            notes.append(f"gradient accumulation: global_batch_size {gb} = local_batch_size {lay['micro_batch']} "
                         f"× dp {lay['dp']} × {accum} steps")


def _data_parallel(par: dict[str, Any], lay: dict, notes: list[str]) -> None:
    """dp as FSDP2 replicate × shard degrees, and ZeRO-1/2/3 as its reshard-after-forward policy."""
    split = _shard_split(lay)
    if lay["zero"] == 0:
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = lay["dp"], 1
    elif split is not None:
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = split
    else:
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = 1, lay["dp"]
    if lay["zero"] in (1, 2):
        par["fsdp_reshard_after_forward"] = "never"
        notes.append(f"zero={lay['zero']}: torchtitan shards with FSDP2; reshard_after_forward=never keeps "
                     "parameters gathered between forward and backward (≈ ZeRO-2)"
                     + ("; FSDP has no optimizer-only sharding" if lay["zero"] == 1 else ""))
    elif lay["zero"] == 3:
        par["fsdp_reshard_after_forward"] = "default"


def _tensor_parallel(par: dict[str, Any], lay: dict, notes: list[str]) -> None:
    """Sequence parallelism (always on with tp in torchtitan) and async tensor parallelism."""
    if lay["tp"] > 1 and not lay.get("sequence_parallel", True):
        notes.append("torchtitan always uses sequence parallelism with tensor parallelism")
    if lay["tp"] > 1 and lay.get("tp_overlap"):
        par["enable_async_tensor_parallel"] = True
        notes.append("async tensor parallelism needs torch.compile (compile.enable) in torchtitan")


def _activation_checkpoint(rec: str, notes: list[str], every: int = 1) -> dict[str, Any]:
    """[activation_checkpoint]: none, full, per-op selective, or every k-th block (selective layer AC,
    ``selective_ac_option = "k"``)."""
    if rec == "full" and every > 1:
        return {"mode": "selective", "selective_ac_option": str(every)}
    ac: dict[str, Any] = {"mode": {"none": "none", "full": "full"}.get(rec, "selective")}
    if rec.startswith("selective"):
        ac["selective_ac_option"] = "op"
        if rec == "selective":
            notes.append("recompute=selective (Megatron: attention core only) → torchtitan per-op SAC "
                         "(selective_ac_option op), its nearest policy")
    return ac


def _optimizer(tr: dict, notes: list[str]) -> dict[str, Any]:
    """[optimizer]: AdamW unless the plan used another torch.optim optimizer."""
    impl = tr.get("optimizer_impl", "fused")
    if impl == "paged":  # bitsandbytes' paged optimizers are no torch.optim implementation
        notes.append("optimizer_impl=paged: torchtitan runs torch.optim (no paged optimizer); written as fused")
    opt = {"name": "AdamW", "implementation": "fused" if impl == "paged" else impl}
    if tr["optimizer"] not in ("adamw", "adam"):
        notes.append(f"optimizer={tr['optimizer']}: torchtitan builds torch.optim optimizers by name; set "
                     "optimizer.name to the class you use")
        opt["name"] = {"sgd": "SGD", "sgd-momentum": "SGD", "adafactor": "Adafactor"}.get(
            tr["optimizer"], "AdamW")
    return opt


def _flavor(name: str, params: float) -> str:
    """torchtitan names flavors by size ("8B", "70B", "405B"): the size in the model's name, else
    the parameter count rounded."""
    import re

    m = re.search(r"(\d+(?:\.\d+)?)[bB]\b", name.split("/")[-1])
    if m:
        return f"{m.group(1)}B"
    b = params / 1e9
    return f"{b:.0f}B" if b >= 1 else f"{params / 1e6:.0f}M"


def to_toml(cfg: dict[str, dict[str, Any]]) -> str:
    """Sections of scalars, lists of scalars and nested sections (``[quantize.linear.float8]``), as TOML."""
    out: list[str] = []
    for section, keys in cfg.items():
        _toml_table(section, keys, out)
    return "\n".join(out)


def _toml_table(name: str, keys: dict[str, Any], out: list[str]) -> None:
    scalars = {k: v for k, v in keys.items() if not isinstance(v, dict)}
    if scalars or not keys:
        out.append(f"[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in scalars.items()]
        out.append("")
    for k, v in keys.items():
        if isinstance(v, dict):
            _toml_table(f"{name}.{k}", v, out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)  # a JSON string is a valid TOML basic string

