"""DeepSpeed ds_config JSON (deepspeed 0.19: runtime/config.py, runtime/zero/config.py,
runtime/tensor_parallel/config.py); validated in tests by DeepSpeedConfig itself."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.export.common import Export, _batches, _parts, _shard_split


def deepspeed(est: dict) -> Export:
    hw, tr, lay = _parts(est)
    gb, accum = _batches(hw, tr, lay)
    notes: list[str] = []
    cfg: dict[str, Any] = {
        "train_batch_size": gb,
        "train_micro_batch_size_per_gpu": lay["micro_batch"],
        "gradient_accumulation_steps": accum,
    }
    _precision(cfg, tr["precision"], lay, notes)
    cfg["zero_optimization"] = _zero_optimization(lay, notes)
    _model_parallel(cfg, lay, notes)
    if lay["recompute"] != "none":
        notes.append(f"recompute={lay['recompute']}: activation checkpointing is switched on in the model "
                     "code (model.gradient_checkpointing_enable() or deepspeed.checkpointing); "
                     + ("DeepSpeed has no per-op selective policy" if lay["recompute"].startswith("selective")
                        else f"checkpoint every {lay.get('recompute_every', 1)}-th layer" if
                        lay.get("recompute_every", 1) > 1 else "checkpoint every layer"))
    cfg["gradient_clipping"] = 1.0
    cfg["steps_per_print"] = 100
    text = json.dumps(cfg, indent=2) + "\n"
    return Export(target="deepspeed", config=cfg, text=text, filename="ds_config.json", notes=tuple(notes))


def _precision(cfg: dict[str, Any], prec: str, lay: dict, notes: list[str]) -> None:
    """The ``fp16`` / ``bf16`` sections (fp32 sets neither)."""
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


def _zero_optimization(lay: dict, notes: list[str]) -> dict[str, Any]:
    """The ``zero_optimization`` section: stage, overlap, CPU offload, hybrid-shard groups."""
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
    return zero


def _model_parallel(cfg: dict[str, Any], lay: dict, notes: list[str]) -> None:
    """Tensor (AutoTP), pipeline, sequence (Ulysses) and expert parallelism: config keys where
    DeepSpeed has them, notes on the model code where it does not."""
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
