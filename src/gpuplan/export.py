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

import json
import math
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from gpuplan.errors import GpuplanError

TARGETS = ("torchtitan", "deepspeed", "accelerate", "megatron", "torchrun")
RDZV_PORT = 29500  # torchrun's default master port (torch.distributed.run --master-port)


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    target: str
    config: Any            # dict (JSON/YAML/TOML targets) or list[str] (argument lists)
    text: str              # what to save: the file a user hands to the framework
    filename: str          # a conventional file name for it
    notes: tuple[str, ...] = field(default=())


def _parts(est: dict) -> tuple[dict, dict, dict]:
    sc = est.get("scenario")
    if not sc or "layout" not in sc:
        raise GpuplanError("export needs an Estimate with a normalized scenario (from evaluate or plan)")
    return sc["hardware"], sc["training"], sc["layout"]


def _batches(hw: dict, tr: dict, lay: dict) -> tuple[int, int]:
    """(global batch in sequences, gradient-accumulation steps = micro-batches per replica per step)."""
    gb = tr.get("global_batch") or lay["dp"] * lay["micro_batch"]
    per = lay["dp"] * lay["micro_batch"]
    if gb % per:
        raise GpuplanError(f"global batch {gb} is not a multiple of dp×micro_batch = {per}")
    return gb, gb // per


def _steps(tr: dict, gb: int) -> int | None:
    if tr.get("steps"):
        return int(tr["steps"])
    if tr.get("tokens"):
        return math.ceil(tr["tokens"] / (gb * tr["seq_len"]))
    return None


def _shard_split(lay: dict) -> tuple[int, int] | None:
    """(replicate, shard) degrees over dp for hybrid sharding; None when not hybrid.

    ``zero_group`` counts the ranks of the dp×cp grid that share one copy of the state; the
    frameworks below shard over cp on their own (FSDP's mesh is dp_shard × cp), so the dp part
    of the group is zero_group / cp."""
    g = lay.get("zero_group")
    if not g or lay["zero"] == 0:
        return None
    shard = g // lay["cp"] if lay["cp"] > 1 and g % lay["cp"] == 0 else g
    if lay["dp"] % shard:
        return None
    return lay["dp"] // shard, shard


# ---- DeepSpeed -------------------------------------------------------------------------------

def deepspeed(est: dict) -> Export:
    hw, tr, lay = _parts(est)
    gb, accum = _batches(hw, tr, lay)
    notes: list[str] = []
    cfg: dict[str, Any] = {
        "train_batch_size": gb,
        "train_micro_batch_size_per_gpu": lay["micro_batch"],
        "gradient_accumulation_steps": accum,
    }
    prec = tr["precision"]
    if prec == "fp16":
        cfg["fp16"] = {"enabled": True}
    elif prec in ("bf16", "bf16-pure", "fp8"):
        cfg["bf16"] = {"enabled": True}
        if prec == "fp8":
            notes.append("fp8: DeepSpeed's config has no fp8 switch; FP8 matmuls come from the model code "
                         "(Transformer Engine); bf16 set for the rest")
        if prec == "bf16-pure" and lay["zero"] > 0:
            cfg["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
        elif prec == "bf16-pure":
            notes.append("bf16-pure: DeepSpeed's bf16 master weights and optimizer states need ZeRO ≥ 1; "
                         "with stage 0 it keeps fp32 master weights (more memory than planned)")
    zero: dict[str, Any] = {"stage": lay["zero"]}
    if lay["zero"] > 0:
        zero["overlap_comm"] = bool(lay.get("dp_overlap", True))
        zero["contiguous_gradients"] = True
    if lay["offload"] in ("optimizer", "params"):
        if lay["zero"] == 0:
            notes.append("offload needs ZeRO ≥ 1 in DeepSpeed: zero_optimization.stage set to 1")
            zero["stage"] = 1
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        notes.append("offload_optimizer runs the optimizer step on the CPU (DeepSpeedCPUAdam)")
    if lay["offload"] == "params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    split = _shard_split(lay)
    if split is not None:
        if lay["zero"] == 3:
            zero["zero_hpz_partition_size"] = split[1]
            notes.append(f"hybrid shard (groups of {split[1]}): DeepSpeed's nearest is ZeRO++ hpZ "
                         "(zero_hpz_partition_size): a secondary parameter copy sharded within the group, "
                         "primary shards over all ranks — a little more memory than HSDP")
        else:
            notes.append(f"hybrid shard (groups of {split[1]}) with ZeRO-{lay['zero']}: DeepSpeed shards "
                         "ZeRO-1/2 states over all data-parallel ranks; nothing to set")
    cfg["zero_optimization"] = zero
    if lay["tp"] > 1:
        cfg["tensor_parallel"] = {"autotp_size": lay["tp"]}
        notes.append(f"tp={lay['tp']}: DeepSpeed AutoTP training (tensor_parallel.autotp_size) works for "
                     "Hugging Face models with ZeRO ≤ 2; Megatron-style TP needs Megatron-DeepSpeed "
                     "(use --to megatron for its arguments)")
        if lay["zero"] == 3:
            notes.append("AutoTP training does not combine with ZeRO-3: use stage 2, or Megatron-DeepSpeed")
    if lay["pp"] > 1:
        cfg["pipeline"] = {"stages": "auto", "partition": "parameters"}
        notes.append(f"pp={lay['pp']}: set in code, deepspeed.pipe.PipelineModule(num_stages={lay['pp']}); "
                     "DeepSpeed pipelines run ZeRO ≤ 1 and their own 1F1B-style schedule"
                     + (f" ({lay['pp_schedule']} with {lay['virtual_stages']} virtual stages is not available)"
                        if lay["pp_schedule"] != "1f1b" else ""))
    if lay["cp"] > 1:
        cfg["sequence_parallel_size"] = lay["cp"]
        notes.append(f"cp={lay['cp']}: DeepSpeed-Ulysses sequence parallelism (all-to-all over heads), set up "
                     "in the model code; gpuplan's cp model is ring attention, so communication differs")
    if lay["ep"] > 1:
        notes.append(f"ep={lay['ep']}: set in code, deepspeed.moe.layer.MoE(ep_size={lay['ep']})")
    if lay["recompute"] != "none":
        notes.append(f"recompute={lay['recompute']}: activation checkpointing is switched on in the model "
                     "code (model.gradient_checkpointing_enable() or deepspeed.checkpointing); "
                     + ("DeepSpeed has no per-op selective policy" if lay["recompute"].startswith("selective")
                        else "checkpoint every layer"))
    cfg["gradient_clipping"] = 1.0
    cfg["steps_per_print"] = 100
    text = json.dumps(cfg, indent=2) + "\n"
    return Export(target="deepspeed", config=cfg, text=text, filename="ds_config.json", notes=tuple(notes))


# ---- accelerate ------------------------------------------------------------------------------

def accelerate(est: dict) -> Export:
    import yaml

    hw, tr, lay = _parts(est)
    notes: list[str] = []
    prec = {"bf16": "bf16", "bf16-pure": "bf16", "fp16": "fp16", "fp8": "bf16", "fp32": "no"}[tr["precision"]]
    if tr["precision"] == "fp8":
        notes.append("fp8: set mixed_precision: fp8 with an fp8_config (Transformer Engine or torchao) once the "
                     "model supports it; bf16 written here")
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": "MULTI_GPU",
        "downcast_bf16": "no", "machine_rank": 0, "main_training_function": "main", "mixed_precision": prec,
        "num_machines": hw["nodes"], "num_processes": hw["gpus"], "rdzv_backend": "static",
        "same_network": True, "use_cpu": False, "gpu_ids": "all",
    }
    if hw["nodes"] > 1:
        cfg["main_process_ip"] = "MASTER_ADDR"
        cfg["main_process_port"] = RDZV_PORT
        notes.append("multi-node: replace MASTER_ADDR and set machine_rank on each node (0 … num_machines-1)")
    if lay["pp"] > 1:
        notes.append(f"pp={lay['pp']}: accelerate's FSDP has no pipeline parallelism; the {lay['pp']} stages "
                     "are folded into data-parallel replicas here, which changes memory per GPU — re-plan with "
                     "--pp 1, or export to torchtitan or megatron")
    if lay["ep"] > 1:
        notes.append(f"ep={lay['ep']}: accelerate has no expert parallelism; experts are sharded with FSDP")
    if lay["offload"] == "optimizer":
        notes.append("offload=optimizer: FSDP offloads parameters, gradients and optimizer state together "
                     "(fsdp_offload_params); more PCIe traffic than the plan assumed")
    use_fsdp = lay["zero"] > 0 or lay["tp"] > 1 or lay["cp"] > 1 or lay["offload"] != "none"
    if use_fsdp:
        cfg["distributed_type"] = "FSDP"
        if lay["zero"] == 1:
            notes.append("zero=1: FSDP has no optimizer-only sharding; SHARD_GRAD_OP-style "
                         "(fsdp_reshard_after_forward: false, ≈ ZeRO-2) is the nearest")
        if lay["zero"] == 0:
            notes.append("zero=0 with tp/cp: accelerate's ND parallelism runs through FSDP2; parameters are "
                         "replicated over dp (dp_shard_size 1)")
        fsdp = {
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": lay["zero"] == 3,
            "fsdp_offload_params": lay["offload"] != "none",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": lay["recompute"] != "none",
        }
        if lay["recompute"].startswith("selective"):
            notes.append(f"recompute={lay['recompute']}: accelerate's switch is all-or-nothing per layer; "
                         "fsdp_activation_checkpointing (full) written — selective recompute needs model code")
        cfg["fsdp_config"] = fsdp
        split = _shard_split(lay)
        dp = lay["dp"] * lay["pp"]
        if lay["zero"] == 0:
            replicate, shard = dp, 1
        elif split is not None:
            replicate, shard = split[0] * lay["pp"], split[1]
        else:
            replicate, shard = lay["pp"], lay["dp"]
        if split is not None:
            notes.append(f"hybrid shard: FSDP2 HSDP with parallelism_config dp_replicate_size={replicate}, "
                         f"dp_shard_size={shard}")
        cfg["parallelism_config"] = {
            "parallelism_config_dp_replicate_size": replicate,
            "parallelism_config_dp_shard_size": shard,
            "parallelism_config_tp_size": lay["tp"],
            "parallelism_config_cp_size": lay["cp"],
        }
    elif lay["recompute"] != "none":
        notes.append(f"recompute={lay['recompute']}: with DDP, switch on activation checkpointing in the model "
                     "code (model.gradient_checkpointing_enable())")
    gb, accum = _batches(hw, tr, lay)
    notes.append(f"in the training script: per-device batch {lay['micro_batch']}, "
                 f"Accelerator(gradient_accumulation_steps={accum}) → {gb} sequences of {tr['seq_len']} per step")
    head = "".join(f"# {line}\n" for line in _header(est, "accelerate launch --config_file accelerate.yaml train.py"))
    text = head + yaml.safe_dump(cfg, sort_keys=True)
    return Export(target="accelerate", config=cfg, text=text, filename="accelerate.yaml", notes=tuple(notes))


# ---- torchtitan ------------------------------------------------------------------------------

TITAN_MODELS = {"llama": "llama3", "mistral": "llama3", "qwen2": "llama3", "qwen3": "qwen3",
                "deepseek_v3": "deepseek_v3", "deepseek_v2": "deepseek_v3", "llama4": "llama4"}
TITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                   "zero-bubble": "ZBVZeroBubble"}


def torchtitan(est: dict, model: Any = None) -> Export:
    hw, tr, lay = _parts(est)
    gb, accum = _batches(hw, tr, lay)
    notes: list[str] = []
    mtype = getattr(model, "model_type", None)
    flavor = _flavor(est["model"].get("name") or "", est["model"]["params"])
    cfg: dict[str, dict[str, Any]] = {
        "job": {"description": f"{est['model'].get('name', 'model')} — gpuplan export"},
        "model": {"name": TITAN_MODELS.get(mtype or "", "llama3"), "flavor": flavor},
    }
    if mtype not in TITAN_MODELS:
        notes.append(f"model: torchtitan ships llama3/llama4/qwen3/deepseek_v3; check [model] name and flavor "
                     f"({mtype or 'unknown type'})")
    else:
        notes.append(f"model.flavor={flavor!r} guessed from the parameter count; use a flavor the model defines")
    training: dict[str, Any] = {"seq_len": tr["seq_len"], "global_batch_size": gb,
                                "mixed_precision_param": "float32" if tr["precision"] == "fp32" else "bfloat16"}
    par: dict[str, Any] = {"tensor_parallel_degree": lay["tp"], "pipeline_parallel_degree": lay["pp"],
                           "context_parallel_degree": lay["cp"], "expert_parallel_degree": lay["ep"]}
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
    steps = _steps(tr, gb)
    if steps:
        training["steps"] = steps
    if lay["offload"] != "none":
        training["enable_cpu_offload"] = True
        if lay["offload"] == "optimizer":
            notes.append("offload=optimizer: torchtitan's FSDP CPU offload moves parameters, gradients and "
                         "optimizer state together")
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
    if lay["tp"] > 1 and not lay.get("sequence_parallel", True):
        notes.append("torchtitan always uses sequence parallelism with tensor parallelism")
    rec = lay["recompute"]
    ac: dict[str, Any] = {"mode": {"none": "none", "full": "full"}.get(rec, "selective")}
    if rec.startswith("selective"):
        ac["selective_ac_option"] = "op"
        if rec == "selective":
            notes.append("recompute=selective (Megatron: attention core only) → torchtitan per-op SAC "
                         "(selective_ac_option op), its nearest policy")
    cfg["training"] = training
    cfg["parallelism"] = par
    cfg["activation_checkpoint"] = ac
    cfg["optimizer"] = {"name": "AdamW", "implementation": tr.get("optimizer_impl", "fused")}
    if tr["optimizer"] not in ("adamw", "adam"):
        notes.append(f"optimizer={tr['optimizer']}: torchtitan builds torch.optim optimizers by name; set "
                     "optimizer.name to the class you use")
        cfg["optimizer"]["name"] = {"sgd": "SGD", "sgd-momentum": "SGD", "adafactor": "Adafactor"}.get(
            tr["optimizer"], "AdamW")
    if tr["precision"] == "fp8":
        cfg["model"]["converters"] = ["float8"]
        cfg["float8"] = {"recipe_name": "rowwise"}
    if tr.get("method", "full") != "full":
        notes.append(f"method={tr['method']}: torchtitan trains all weights; LoRA needs your own model code")
    text = "".join(f"# {line}\n" for line in _header(est, "torchrun ... -m torchtitan.train --job.config_file "
                                                      "job.toml")) + "\n" + to_toml(cfg)
    return Export(target="torchtitan", config=cfg, text=text, filename="job.toml", notes=tuple(notes))


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
    """Sections of scalars and lists of scalars (all torchtitan needs), as TOML."""
    out = []
    for section, keys in cfg.items():
        out.append(f"[{section}]")
        for k, v in keys.items():
            out.append(f"{k} = {_toml_value(v)}")
        out.append("")
    return "\n".join(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)  # a JSON string is a valid TOML basic string


# ---- Megatron-LM -----------------------------------------------------------------------------

def megatron_args(est: dict, model: Any = None) -> tuple[list[str], list[str]]:
    hw, tr, lay = _parts(est)
    gb, _ = _batches(hw, tr, lay)
    notes: list[str] = []
    a = ["--tensor-model-parallel-size", str(lay["tp"]), "--pipeline-model-parallel-size", str(lay["pp"]),
         "--context-parallel-size", str(lay["cp"])]
    if lay["ep"] > 1:
        a += ["--expert-model-parallel-size", str(lay["ep"])]
    if lay["pp_schedule"] == "interleaved" and lay["virtual_stages"] > 1:
        n_layers = getattr(model, "n_layers", None)
        if n_layers and n_layers % (lay["pp"] * lay["virtual_stages"]) == 0:
            a += ["--num-layers-per-virtual-pipeline-stage", str(n_layers // (lay["pp"] * lay["virtual_stages"]))]
        else:
            notes.append(f"interleaved ×{lay['virtual_stages']}: set --num-layers-per-virtual-pipeline-stage "
                         "to layers / (pp × virtual stages)")
    elif lay["pp_schedule"] in ("zero-bubble", "gpipe") and lay["pp"] > 1:
        notes.append(f"pp_schedule={lay['pp_schedule']}: Megatron-LM runs 1F1B (or interleaved); "
                     "the plan's bubble assumed the other schedule")
    if lay.get("sequence_parallel") and lay["tp"] > 1:
        a.append("--sequence-parallel")
    a += ["--micro-batch-size", str(lay["micro_batch"]), "--global-batch-size", str(gb),
          "--seq-length", str(tr["seq_len"])]
    max_pos = max(tr["seq_len"], getattr(model, "max_positions", 0) or 0)
    a += ["--max-position-embeddings", str(max_pos)]
    steps = _steps(tr, gb)
    if steps:
        a += ["--train-iters", str(steps)]
    prec = tr["precision"]
    if prec == "fp16":
        a.append("--fp16")
    elif prec in ("bf16", "bf16-pure", "fp8"):
        a.append("--bf16")
        if prec == "fp8":
            a += ["--fp8-format", "hybrid"]
        if prec == "bf16-pure":
            notes.append("bf16-pure: Megatron keeps fp32 main weights; --use-precision-aware-optimizer with "
                         "bf16 optimizer dtypes comes closest")
    zero = lay["zero"]
    if zero in (1, 2):
        a.append("--use-distributed-optimizer")
        if zero == 2:
            notes.append("zero=2: Megatron's distributed optimizer shards optimizer state and fp32 main "
                         "gradients (reduce-scatter); the bf16 gradient buffer stays whole")
    elif zero == 3:
        if lay["pp"] == 1:
            a.append("--use-torch-fsdp2")
        else:
            a.append("--use-distributed-optimizer")
            notes.append("zero=3 with pp > 1: Megatron's FSDP does not run with pipeline parallelism; "
                         "the distributed optimizer (ZeRO-1/2) written instead — parameters are not sharded")
    split = _shard_split(lay)
    if split is not None and zero in (1, 2):
        a += ["--num-distributed-optimizer-instances", str(split[0])]
    elif split is not None:
        notes.append(f"hybrid shard groups of {split[1]}: not expressible with --use-torch-fsdp2")
    if zero > 0 and lay.get("dp_overlap", True):
        a += ["--overlap-grad-reduce", "--overlap-param-gather"]
    rec = lay["recompute"]
    if rec == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif rec.startswith("selective"):
        a += ["--recompute-granularity", "selective"]
        if rec == "selective-op":
            notes.append("recompute=selective-op (torchtitan per-op SAC) → Megatron selective (core attention "
                         "recomputed): similar memory, a little less recompute")
    if lay["offload"] == "optimizer":
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    elif lay["offload"] == "params":
        notes.append("offload=params: Megatron-LM does not offload parameters; only the optimizer "
                     "(--optimizer-cpu-offload) — the plan needs more GPU memory under Megatron")
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    if tr["optimizer"] in ("sgd", "sgd-momentum"):
        a += ["--optimizer", "sgd"]
    elif tr["optimizer"] in ("adamw", "adam"):
        a += ["--optimizer", "adam"]
    else:
        notes.append(f"optimizer={tr['optimizer']}: Megatron-LM offers adam and sgd")
    if model is not None:
        a += _megatron_model(model, notes)
    else:
        notes.append("model architecture flags (--num-layers, --hidden-size, ...) left out: no model spec given")
    if tr.get("method", "full") != "full":
        notes.append(f"method={tr['method']}: Megatron-LM pretrains all weights; LoRA needs NeMo/Megatron-Bridge")
    return a, notes


def _megatron_model(m: Any, notes: list[str]) -> list[str]:
    a = ["--num-layers", str(m.n_layers), "--hidden-size", str(m.hidden), "--num-attention-heads", str(m.n_heads)]
    if m.ffn:
        a += ["--ffn-hidden-size", str(m.ffn)]
    if m.n_kv_heads != m.n_heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv_heads)]
    if m.head_dim and m.head_dim * m.n_heads != m.hidden:
        a += ["--kv-channels", str(m.head_dim)]
    if m.gated_mlp:
        a.append("--swiglu")
    layer_weights = [w for lg in m.layers for w in lg.weights]
    if not any(w.bias and w.group in ("attention", "mlp", "expert", "shared_expert") for w in layer_weights):
        a.append("--disable-bias-linear")
    learned = any(w.group == "position" for w in m.embedding)
    a += ["--position-embedding-type", "learned_absolute" if learned else "rope"]
    a += ["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"]
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if m.moe:
        a += ["--num-experts", str(m.n_experts), "--moe-router-topk", str(m.top_k)]
        if m.moe_ffn:
            a += ["--moe-ffn-hidden-size", str(m.moe_ffn)]
    if m.kv_lora_rank:
        notes.append("multi-head latent attention: add --multi-latent-attention and its ranks")
    notes.append(f"--vocab-size is taken from the tokenizer in Megatron-LM (model has {m.vocab})")
    return a


def megatron(est: dict, model: Any = None) -> Export:
    args, notes = megatron_args(est, model)
    hw = est["scenario"]["hardware"]
    launcher = " ".join(torchrun_args(est)[0])
    lines = [f"# {line}" for line in _header(est, "bash megatron_args.sh")]
    lines.append("MEGATRON_ARGS=(")
    i = 0
    while i < len(args):  # one flag and its value per line
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"  {args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            lines.append(f"  {args[i]}")
            i += 1
    lines.append(")")
    lines.append(f"{launcher} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\"  # + data, tokenizer, lr ({hw['gpus']} GPUs)")
    return Export(target="megatron", config=args, text="\n".join(lines) + "\n", filename="megatron_args.sh",
                  notes=tuple(notes))


# ---- torchrun --------------------------------------------------------------------------------

def torchrun_args(est: dict, script: str | None = None) -> tuple[list[str], list[str]]:
    hw, _, _ = _parts(est)
    per_node = min(hw["gpus"], hw["gpus_per_node"])
    notes: list[str] = []
    if hw["nodes"] == 1:
        a = ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(per_node)]
    else:
        a = ["torchrun", "--nnodes", str(hw["nodes"]), "--nproc-per-node", str(per_node),
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"$MASTER_ADDR:{RDZV_PORT}", "--rdzv-id", "gpuplan"]
        notes.append(f"run the same command on each of the {hw['nodes']} nodes; MASTER_ADDR is one node's address")
    if script:
        a.append(script)
    return a, notes


def torchrun(est: dict, script: str = "train.py") -> Export:
    args, notes = torchrun_args(est, script)
    lay = est["scenario"]["layout"]
    head = "".join(f"# {line}\n" for line in _header(est, None))
    text = head + " ".join(a if a.startswith("$") else shlex.quote(a) for a in args) + "\n"
    notes.append(f"the training script sets the layout itself (dp={lay['dp']} tp={lay['tp']} pp={lay['pp']} "
                 f"cp={lay['cp']}); --to torchtitan/megatron/accelerate/deepspeed write it for you")
    return Export(target="torchrun", config=args, text=text, filename="launch.sh", notes=tuple(notes))


# ---- common ----------------------------------------------------------------------------------

def _header(est: dict, run: str | None) -> list[str]:
    from gpuplan.report import layout_str

    sc = est["scenario"]
    hw = sc["hardware"]
    lines = [f"gpuplan export: {est['model'].get('name', sc.get('model'))} on {hw['gpus']}× {hw['gpu']} "
             f"({hw['nodes']} node{'s' if hw['nodes'] > 1 else ''})",
             f"layout: {layout_str(sc['layout'])}"]
    t = est.get("time") or {}
    if t.get("tokens_per_s_per_gpu"):
        lines.append(f"predicted: {t['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, MFU {t['mfu']:.0%}, "
                     f"{est['memory']['total'] / 2**30:.1f} GiB per GPU")
    if run:
        lines.append(f"run: {run}")
    return lines


def export(est: dict, target: str, model: Any = None) -> Export:
    """The Estimate's layout as ``target``'s config (see TARGETS). Formats with comments
    (YAML, TOML, shell) carry the notes in the text, after the header; JSON cannot."""
    makers = {"deepspeed": lambda: deepspeed(est), "accelerate": lambda: accelerate(est),
              "torchtitan": lambda: torchtitan(est, model), "megatron": lambda: megatron(est, model),
              "torchrun": lambda: torchrun(est)}
    if target not in makers:
        raise GpuplanError(f"--to {target!r}: choose one of {', '.join(TARGETS)}")
    ex = makers[target]()
    if ex.filename.endswith(".json") or not ex.notes:
        return ex
    lines = ex.text.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    return replace(ex, text="".join(lines[:n]) + notes_text(ex) + "".join(lines[n:]))


def notes_text(ex: Export) -> str:
    return "".join(f"# note: {n}\n" for n in ex.notes)


def export_scenario(sc: Any, target: str, *, objective: str = "time", max_gpus: int = 16384) -> tuple[Export, str]:
    """Export the scenario's own layout when it fixes the parallel split (tp and pp; dp is derived),
    else the best layout ``plan`` finds. Returns the export and a line saying which it was."""
    from gpuplan.estimate import evaluate

    if "tp" in sc.layout and "pp" in sc.layout:
        est = evaluate(sc)
        how = f"exporting the scenario's layout on {sc.hardware.gpus} GPUs"
    else:
        from gpuplan.planner import plan

        res = plan(sc, max_gpus=max_gpus, objective=objective)
        est = res["best"]
        if est is None:
            raise GpuplanError("nothing to export: no layout fits (see `gpuplan plan --explain`)")
        how = (f"layout open (tp/pp not fixed): exporting the best of {res['searched']:,} planned configurations "
               f"by {objective}, {est['scenario']['hardware']['gpus']}× {est['scenario']['hardware']['gpu']}")
    return export(est, target, sc.model), how
