"""``accelerate config`` YAML (accelerate 1.15: commands/config/config_args.py ClusterConfig,
fsdp_config/parallelism_config keys of commands/launch.py)."""

from __future__ import annotations

from typing import Any

from gpuplan.export.common import RDZV_PORT, Export, _batches, _header, _parts, _shard_split


def accelerate(est: dict, scheduled: bool = False) -> Export:
    """The config; ``scheduled``: a scheduler export starts it on every node and passes the rendezvous
    on the command line (export/launch.py), so the file leaves it out."""
    import yaml

    hw, tr, lay = _parts(est)
    notes: list[str] = []
    cfg = _cluster(hw, _mixed_precision(tr, notes), notes, scheduled)
    _unsupported(lay, notes)
    use_fsdp = lay["zero"] > 0 or lay["tp"] > 1 or lay["cp"] > 1 or lay["offload"] != "none"
    if use_fsdp:
        cfg["distributed_type"] = "FSDP"
        cfg["fsdp_config"] = _fsdp_config(lay, notes)
        cfg["parallelism_config"] = _parallelism_config(lay, notes)
    elif lay["recompute"] != "none":
        notes.append(f"recompute={lay['recompute']}: with DDP, switch on activation checkpointing in the model "
                     "code (model.gradient_checkpointing_enable())")
    if tr.get("compile"):  # accelerate compiles the whole model (a Hugging Face model's loss is inside its forward)
        cfg["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
        if tr["compile"] == "model":
            notes.append("compile=model: accelerate compiles the model's whole forward, with the loss where the model "
                         "computes it; keep the loss outside the model to leave it eager")
    if tr.get("kernels") == "liger":
        notes.append("kernels=liger: in the training script, TrainingArguments(use_liger_kernel=True) or liger_kernel."
                     "transformers' apply_liger_kernel_to_<model>() before the model is built")
    gb, accum = _batches(hw, tr, lay)
    notes.append(f"in the training script: per-device batch {lay['micro_batch']}, "
                 f"Accelerator(gradient_accumulation_steps={accum}) → {gb} sequences of {tr['seq_len']} per step")
    head = "".join(f"# {line}\n" for line in _header(est, "accelerate launch --config_file accelerate.yaml train.py"))
    text = head + yaml.safe_dump(cfg, sort_keys=True)
    return Export(target="accelerate", config=cfg, text=text, filename="accelerate.yaml", notes=tuple(notes))


def _mixed_precision(tr: dict, notes: list[str]) -> str:
    """accelerate's ``mixed_precision`` value for the planned precision (fp8 is written as bf16)."""
    prec = {"bf16": "bf16", "bf16-pure": "bf16", "fp16": "fp16", "fp8": "bf16", "fp32": "no"}[tr["precision"]]
    if tr["precision"] == "fp8":
        notes.append("fp8: set mixed_precision: fp8 with an fp8_config (Transformer Engine or torchao) once the "
                     "model supports it; bf16 written here")
    return prec


def _cluster(hw: dict, prec: str, notes: list[str], scheduled: bool = False) -> dict[str, Any]:
    """The ClusterConfig keys every config has: machines, processes, rendezvous (DDP by default)."""
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": "MULTI_GPU",
        "downcast_bf16": "no", "machine_rank": 0, "main_training_function": "main", "mixed_precision": prec,
        "num_machines": hw["nodes"], "num_processes": hw["gpus"], "rdzv_backend": "static",
        "same_network": True, "use_cpu": False, "gpu_ids": "all",
    }
    if hw["nodes"] > 1 and not scheduled:
        cfg["main_process_ip"] = "MASTER_ADDR"
        cfg["main_process_port"] = RDZV_PORT
        notes.append("multi-node: replace MASTER_ADDR and set machine_rank on each node (0 … num_machines-1)")
    return cfg


def _unsupported(lay: dict, notes: list[str]) -> None:
    """Notes on the parts of the layout accelerate cannot express (pp, ep, optimizer-only offload)."""
    if lay["pp"] > 1:
        notes.append(f"pp={lay['pp']}: accelerate's FSDP has no pipeline parallelism; the {lay['pp']} stages "
                     "are folded into data-parallel replicas here, which changes memory per GPU — re-plan with "
                     "--pp 1, or export to torchtitan or megatron")
    if lay["ep"] > 1:
        notes.append(f"ep={lay['ep']}: accelerate has no expert parallelism; experts are sharded with FSDP")
    if lay["offload"] == "optimizer":
        notes.append("offload=optimizer: FSDP offloads parameters, gradients and optimizer state together "
                     "(fsdp_offload_params); more PCIe traffic than the plan assumed")


def _fsdp_config(lay: dict, notes: list[str]) -> dict[str, Any]:
    """The ``fsdp_config`` block (FSDP2): resharding, offload, wrapping, activation checkpointing."""
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
    if lay["recompute"].startswith("selective") or lay.get("recompute_every", 1) > 1:
        notes.append(f"recompute={lay['recompute']}: accelerate's switch is all-or-nothing per layer; "
                     "fsdp_activation_checkpointing (every layer) written — selective or every-k-th recompute "
                     "needs model code")
    return fsdp


def _parallelism_config(lay: dict, notes: list[str]) -> dict[str, int]:
    """The ``parallelism_config`` block: dp replicate × shard (pp stages folded into replicas), tp, cp."""
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
    return {
        "parallelism_config_dp_replicate_size": replicate,
        "parallelism_config_dp_shard_size": shard,
        "parallelism_config_tp_size": lay["tp"],
        "parallelism_config_cp_size": lay["cp"],
    }
