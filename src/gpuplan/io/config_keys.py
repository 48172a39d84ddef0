"""Keys of the frameworks' own config files that say how the data-parallel ranks shard (io/user_keys.py reads the
rest): Hugging Face accelerate's ``fsdp_sharding_strategy`` (a name, or its 1-5 code), Megatron-FSDP's
``data_parallel_sharding_strategy``, DeepSpeed's ``zero_optimization`` block, torchtitan's data-parallel shard and
replicate degrees, Megatron's ``recompute_method`` / ``recompute_num_layers`` — and keys a published table writes in
capitals (``TP``, ``PP``) or under another section than gpuplan's (``training.micro_batch_size``). Each is read as
gpuplan's field where the scenario leaves it open, listed under ``assumed``; what they cannot say is one error with
the fix."""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.io.schema import SECTIONS, homes
from gpuplan.io.words import Reading, switch_word

# accelerate's FSDP plugin numbers its strategies from 1 in the order of torch's ShardingStrategy
# (accelerate utils/constants.py FSDP_SHARDING_STRATEGY; utils/dataclasses.py FullyShardedDataParallelPlugin)
ACCELERATE_STRATEGIES = {1: "full_shard", 2: "shard_grad_op", 3: "no_shard", 4: "hybrid_shard", 5: "hybrid_shard_zero2"}
# Megatron-FSDP (megatron/core/distributed/fsdp, --data-parallel-sharding-strategy): what each shards
MEGATRON_FSDP = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
SHARDING_KEYS = ("fsdp_sharding_strategy", "sharding_strategy", "fsdp_sharding")  # accelerate; Composer; a table
SHARD_DEGREES = ("data_parallel_shard_degree", "dp_shard")
REPLICATE_DEGREES = ("data_parallel_replicate_degree", "dp_replicate")


def lower_keys(section: dict, name: str) -> dict:
    """A section's keys in lower case (a published table's ``TP``, ``PP``, ``ZeRO``) and as Megatron-LM's command line
    spells them (``--tensor-model-parallel-size``: dashes for underscores); one key in two spellings refused."""
    out: dict = {}
    for key, value in section.items():
        own = key.lower().lstrip("-").replace("-", "_") if isinstance(key, str) and key.strip("-") else key
        if own in out:
            raise GpuplanError(f"{name}.{own} is given twice ({own} in two spellings): give it once")
        out[own] = value
    return out


def moved_keys(sections: dict[str, dict | None]) -> list[Reading]:
    """Keys given under another section than the one gpuplan keeps them in (``training.micro_batch_size``: a layout
    key), moved to theirs under gpuplan's key, in place (a section not given is made); ``sections`` are already under
    gpuplan's keys (schema.own_keys). A key two other sections could hold stays (its section's check names it)."""
    reads: list[Reading] = []
    own = dict(SECTIONS)
    for name in list(sections):
        section = sections[name]
        if not isinstance(section, dict):
            continue
        for key in [k for k in section if isinstance(k, str) and k not in own[name]]:
            found = homes(key, name)
            if len(found) != 1 or not isinstance(sections[found[0][0]], dict | None):
                continue
            home, field = found[0]
            target = sections[home] = sections[home] if sections[home] is not None else {}
            if field in target:
                raise GpuplanError(f"{home}.{field} is given twice ({name}.{key} and {home}.{field}): give it once")
            target[field] = section.pop(key)
            reads.append((f"{home}.{field}", f"{name}.{key}: {target[field]}", target[field],
                          f"{key} is a {home} key: read under {home}"))
    return reads


def sharding_word(layout: dict) -> tuple[str, Any] | None:
    """The FSDP sharding a layout's config keys name, as (key, the ``fsdp`` value io/user_keys.py reads): accelerate's
    ``fsdp_sharding_strategy`` (its name or 1-5 code)."""
    for key in [k for k in SHARDING_KEYS if k in layout]:
        value = layout.pop(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if value not in ACCELERATE_STRATEGIES:
                raise GpuplanError(f"layout.{key} {value} is no FSDP sharding strategy: accelerate numbers them 1 "
                                   "(FULL_SHARD) to 5 (HYBRID_SHARD_ZERO2)")
            value = ACCELERATE_STRATEGIES[value]
        return key, value
    return None


def _block(layout: dict, key: str) -> dict[str, Any] | None:
    """A framework's block of the layout taken out (None where not given); a block that is no mapping is refused."""
    if key not in layout:
        return None
    block = layout.pop(key)
    if not isinstance(block, dict):
        raise GpuplanError(f"layout.{key} is a framework's block of settings: give it as a mapping")
    return block


def fsdp_config(layout: dict) -> list[Reading]:
    """The Hugging Face Trainer's and accelerate's ``fsdp_config`` block: its sharding strategy as ``layout.fsdp``
    (read as the stage), parameter offload, activation checkpointing (full recomputation) and FSDP2's
    ``reshard_after_forward: false`` (ZeRO-2), each where open; its wrapping and loading settings change neither
    memory nor time. Keys with or without the ``fsdp_`` prefix (accelerate writes it, the Trainer strips it)."""
    block = _block(layout, "fsdp_config")
    if block is None:
        return []
    cfg = {str(k).removeprefix("fsdp_"): v for k, v in block.items()}
    reads: list[Reading] = []
    if cfg.get("sharding_strategy") is not None and "fsdp" not in layout:
        layout["fsdp"] = str(cfg["sharding_strategy"])
    if switch_word(cfg.get("activation_checkpointing")):
        reads += _set(layout, "recompute", "full", "fsdp_config.activation_checkpointing: true",
                      "FSDP's activation checkpointing wraps every block: full recomputation")
    if switch_word(cfg.get("offload_params")):
        reads += _set(layout, "offload", "params", "fsdp_config.offload_params: true",
                      "FSDP's CPUOffload(offload_params=True): parameters, gradients and optimizer states on the CPU")
    if switch_word(cfg.get("reshard_after_forward")) is False:
        reads += _set(layout, "zero", 2, "fsdp_config.reshard_after_forward: false",
                      "FSDP2 keeping the parameters gathered from forward to backward: ZeRO-2")
    return reads


def activation_checkpoint(layout: dict) -> list[Reading]:
    """torchtitan's [activation_checkpoint] block (torchtitan/config/job_config.py ActivationCheckpoint): mode none,
    full, or selective with selective_ac_option "op" (per-op: selective-op) or a number k (every k-th block recomputed
    whole: full with recompute_every k), as ``layout.recompute``."""
    block = _block(layout, "activation_checkpoint")
    if block is None:
        return []
    mode, option = str(block.get("mode", "selective")).strip().lower(), str(block.get("selective_ac_option", "2"))
    said = f"activation_checkpoint.mode: {mode}" + (f", selective_ac_option: {option}" if mode == "selective" else "")
    if mode in ("none", "full"):
        return _set(layout, "recompute", mode, said, f"torchtitan's {mode} activation checkpointing")
    if mode == "selective" and option.strip().lower() == "op":
        return _set(layout, "recompute", "selective-op", said, "torchtitan's per-op selective checkpointing")
    if mode == "selective" and option.strip().isdigit() and int(option) >= 1:
        return _set(layout, "recompute", "full", said, "torchtitan's selective layer checkpointing: every "
                    f"{option}th block recomputed whole") + _set(layout, "recompute_every", int(option), said,
                                                                 "one block in k checkpointed")
    raise GpuplanError(f"layout.activation_checkpoint {said} is none of torchtitan's modes gpuplan models (none, full, "
                       "selective with op or a number k): give layout.recompute")


def config_stage(layout: dict) -> list[Reading]:
    """Megatron-FSDP's ``data_parallel_sharding_strategy`` and DeepSpeed's ``zero_optimization`` block (its stage, its
    optimizer or parameter offload to the CPU) as ``layout.zero`` / ``layout.offload`` where open."""
    reads: list[Reading] = []
    if "data_parallel_sharding_strategy" in layout:
        word = layout.pop("data_parallel_sharding_strategy")
        stage = MEGATRON_FSDP.get(str(word).strip().lower())
        if stage is None:
            raise GpuplanError(f"layout.data_parallel_sharding_strategy {word!r} is none of Megatron-FSDP's "
                               f"{', '.join(MEGATRON_FSDP)}")
        reads += _set(layout, "zero", stage, f"data_parallel_sharding_strategy: {word}",
                      f"Megatron-FSDP's {word} shards as ZeRO-{stage}")
    if "zero_optimization" in layout:
        block = layout.pop("zero_optimization")
        if not isinstance(block, dict) or "stage" not in block:
            raise GpuplanError("layout.zero_optimization is DeepSpeed's block: give it as a mapping with its stage, "
                               "e.g. {stage: 2}")
        reads += _set(layout, "zero", block["stage"], f"zero_optimization.stage: {block['stage']}",
                      f"DeepSpeed's ZeRO stage {block['stage']}")
        # DeepSpeed offloads parameters at stage 3 only (offload_param); the optimizer state from stage 1
        parts = (("offload_param", "params"),) * (block["stage"] == 3) + (("offload_optimizer", "optimizer"),)
        for part, off in parts:
            device = (block.get(part) or {}).get("device") if isinstance(block.get(part), dict) else None
            if device == "nvme":
                raise GpuplanError(f"layout.zero_optimization.{part} to NVMe (ZeRO-Infinity) is not modelled: give "
                                   f"the CPU (offload: {off}) for its host-memory bound")
            if device == "cpu":
                reads += _set(layout, "offload", off, f"zero_optimization.{part}.device: cpu",
                              f"DeepSpeed offloads the {off} to the CPU")
                break
    return reads


def shard_degrees(layout: dict) -> list[Reading]:
    """torchtitan's ``data_parallel_shard_degree`` (FSDP; a table's ``fsdp: 8``, its degree) and
    ``data_parallel_replicate_degree`` (DDP over the FSDP groups: HSDP) as dp = shard × replicate, ZeRO-3 over groups
    of the shard degree where it shards."""
    shard_key = next((k for k in SHARD_DEGREES if k in layout), None)
    fsdp = layout.get("fsdp")
    if shard_key is None and isinstance(fsdp, int) and not isinstance(fsdp, bool) and fsdp > 1:  # "FSDP 8": degree
        shard_key = "fsdp"
    rep_key = next((k for k in REPLICATE_DEGREES if k in layout), None)
    if shard_key is None and rep_key is None and "fsdp_reshard_after_forward" not in layout:
        return []
    shard = layout.pop(shard_key) if shard_key else -1
    replicate = layout.pop(rep_key) if rep_key else 1
    for key, value, least in ((shard_key, shard, -1), (rep_key, replicate, 1)):
        if key and (not isinstance(value, int) or isinstance(value, bool) or value == 0 or value < least):
            rest = " (or -1: the rest of the GPUs)" if least < 0 else " (torchtitan takes -1 for the shard degree only)"
            raise GpuplanError(f"layout.{key} must be a whole number ≥ 1{rest}, got {value!r}")
    said = ", ".join(f"{k}: {v}" for k, v in ((shard_key, shard), (rep_key, replicate)) if k)  # as given
    if shard == -1 and replicate > 1:
        raise GpuplanError(f"layout.{rep_key} {replicate} with the shard degree left to the rest of the GPUs: give "
                           f"data_parallel_shard_degree too (the FSDP group the replicas are made of)")
    reads: list[Reading] = []
    # torchtitan's fsdp_reshard_after_forward "never": parameters kept gathered from forward to backward (ZeRO-2)
    kept = str(layout.pop("fsdp_reshard_after_forward", "")).strip().lower() == "never"
    if shard != 1:
        reads += _set(layout, "zero", 2 if kept else 3, said, "torchtitan's data-parallel shard degree: FSDP2, "
                      + ("ZeRO-2 (fsdp_reshard_after_forward never)" if kept else "ZeRO-3"))
    else:  # every replica whole: DDP
        reads += _set(layout, "zero", 0, said, "a shard degree of 1: the replicas hold the model whole (DDP), ZeRO-0")
    if shard > 0:
        reads += _set(layout, "dp", shard * replicate, said, "data-parallel degree: shard × replicate")
        cp = layout.get("cp", 1) if isinstance(layout.get("cp", 1), int) else 1
        if shard > 1 and replicate > 1:  # FSDP2's mesh shards over dp_shard × cp (export/common.py _shard_split)
            reads += _set(layout, "zero_group", shard * cp, said, "HSDP: each replica sharded over its shard group "
                          "(× cp: FSDP2 shards over dp_shard × cp)")
    return reads


def recompute_modules(layout: dict) -> list[Reading]:
    """Megatron-Core's ``recompute_modules`` (a list, or its command line's words: ``moe_act layernorm``) as a tuple of
    names; given without a recompute mode it implies selective recomputation, the only mode that reads it."""
    value = layout.get("recompute_modules")
    if value is None:
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise GpuplanError(f"layout.recompute_modules must be a list of module names (e.g. [moe_act, layernorm]), "
                           f"got {value!r}")
    layout["recompute_modules"] = tuple(dict.fromkeys(v.strip().lower() for v in value if v.strip()))
    if not layout["recompute_modules"]:
        return []
    return _set(layout, "recompute", "selective", "recompute_modules", "recompute_modules name what selective "
                "recomputation recomputes (Megatron-Core --recompute-granularity selective)")


def recompute_method(layout: dict) -> list[Reading]:
    """Megatron's ``recompute_method`` / ``recompute_num_layers`` beside full recomputation: ``uniform`` recomputes
    every layer (from one checkpoint per ``recompute_num_layers`` layers), read as full; ``block`` recomputes only
    the first N layers of each stage, which gpuplan states as recompute_every — one error with the fix. A
    ``recompute_every`` k > 1 with the mode open is full recomputation of every k-th block."""
    every = layout.get("recompute_every")
    if isinstance(every, int) and every > 1 and layout.get("recompute", layout.get("recompute_granularity")) is None:
        # every k-th block recomputed whole: full recomputation of those blocks (torchtitan's selective_ac_option k)
        return _set(layout, "recompute", "full", f"recompute_every: {every}", "recompute_every recomputes every "
                    "k-th block in full: recompute full") + recompute_method(layout)
    method = layout.pop("recompute_method", None)
    layers = layout.pop("recompute_num_layers", None)
    if method is None and layers is None:
        return []
    word = str(method or "uniform").strip().lower()
    if word == "block":
        raise GpuplanError(f"layout.recompute_method block recomputes the first {layers} layers of each pipeline "
                           "stage and keeps the rest: give recompute: full with recompute_every: k, one layer in k "
                           "recomputed (layers per stage / recompute_num_layers)")
    if word != "uniform":
        raise GpuplanError(f"layout.recompute_method {method!r} is none of Megatron's uniform, block")
    said = f"recompute_method: uniform, recompute_num_layers: {layers}"
    granularity = layout.get("recompute", layout.get("recompute_granularity"))
    if granularity is None:  # Megatron reads the method only with --recompute-granularity full
        return [("layout.recompute_method", said, "not used", "Megatron's recompute_method applies only with "
                 "recompute_granularity full, which is not given (recompute stays open)")]
    if str(granularity).strip().lower() != "full":
        raise GpuplanError(f"layout.{said} applies to full recomputation (Megatron's --recompute-granularity full), "
                           f"not {granularity}: drop recompute_method or give recompute: full")
    reads: list[Reading] = []
    if isinstance(layers, int) and layers > 1:
        reads.append(("layout.recompute", f"recompute_num_layers: {layers}", "full", f"one checkpoint per {layers} "
                      "layers and a working set of as many is not modelled: counted as one per layer"))
    return reads


def _set(layout: dict, field: str, value: Any, said: str, why: str) -> list[Reading]:
    """``layout[field] = value`` where open (a given one that differs is refused), as a reading."""
    if layout.get(field) is not None:
        if layout[field] != value:
            raise GpuplanError(f"{said} means layout.{field} {value}, but layout.{field} is {layout[field]}: give it "
                               "once")
        return []
    layout[field] = value
    return [(f"layout.{field}", said, value, why)]
