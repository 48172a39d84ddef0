"""Keys of a scenario as users write them that are not gpuplan's own, read as what they mean before the sections are
checked (io/scenario.py): a gradient-checkpointing switch (Hugging Face ``gradient_checkpointing``, torchtune
``enable_activation_checkpointing``) as ``layout.recompute``, ``fsdp: true`` as ZeRO-3, a FlashAttention switch as
``training.attention``, a network as
the fabric it names, gradient accumulation steps as the global batch they make, and the optimizer's
hyperparameters (learning rate, schedule, clipping, logging) — which change neither memory nor step time — set aside.
Each reading is listed under ``assumed`` (Scenario.read_as), never silent."""

from __future__ import annotations

import math
from typing import Any

from gpuplan.catalog.hardware import get_fabric
from gpuplan.errors import GpuplanError
from gpuplan.io.config_keys import (
    activation_checkpoint,
    config_stage,
    fsdp_config,
    lower_keys,
    moved_keys,
    recompute_method,
    recompute_modules,
    shard_degrees,
    sharding_word,
)
from gpuplan.io.fine_tune_keys import fine_tune_keys
from gpuplan.io.layout_words import layout_words
from gpuplan.io.moe_keys import moe_keys
from gpuplan.io.schema import KEY_ALIASES, own_keys
from gpuplan.io.titan_keys import take_titan_keys
from gpuplan.io.words import Reading, node_sharded, switch, switch_word
from gpuplan.spec.job import MAX_GLOBAL_BATCH
from gpuplan.units import parse_count

CHECKPOINTING = ("gradient_checkpointing", "activation_checkpointing", "enable_activation_checkpointing")
NETWORK = ("interconnect", "network", "inter_node_network", "inter_node", "intra_node")
NETWORK_AT = {"inter_node": "scale_out", "inter_node_network": "scale_out", "intra_node": "scale_up"}  # said where
ACCUMULATION = ("gradient_accumulation_steps", "grad_accum_steps", "accumulate_grad_batches", "grad_accum")
FLASH = ("flash_attention", "use_flash_attention", "use_flash_attn", "flash_attn")
EPOCHS = ("epochs", "num_train_epochs", "num_epochs", "max_epochs")
UNUSED = ("lr", "learning_rate", "min_lr", "weight_decay", "warmup_steps", "warmup_ratio", "warmup_iters",
          "lr_scheduler", "lr_scheduler_type", "lr_decay_style", "seed", "adam_beta1", "adam_beta2", "betas",
          "adam_epsilon", "adam_eps", "max_grad_norm", "clip_grad", "clip_grad_norm", "gradient_clipping",
          "logging_steps", "log_interval", "save_steps", "save_interval", "eval_steps", "eval_interval",
          "lora_alpha", "use_rslora")  # LoRA's scaling (alpha / r, rsLoRA's alpha / √r): the same multiply either way


def _fabric_kind(value: Any) -> str:
    """Where a network a run names sits, by the fabric catalogue's own kind (NVLink inside a node, InfiniBand
    between nodes); one it does not resolve alone ("InfiniBand": the GPU's own generation) is between nodes."""
    try:
        return get_fabric(value).kind if isinstance(value, str) else "scale_out"
    except GpuplanError:
        return "scale_out"



def read_user_keys(raw: dict) -> tuple[dict, tuple[Reading, ...]]:
    """``raw`` with the keys above rewritten to gpuplan's, and how each was read."""
    # each section under gpuplan's own keys first (a framework's spelling, any case): what the readers below look for
    parts = {s: own_keys(lower_keys(raw[s], s), KEY_ALIASES[s], f"{s}.{{}}") if isinstance(raw.get(s), dict)
             else raw.get(s) for s in ("hardware", "training", "layout")}
    reads: list[Reading] = moved_keys(parts)
    hardware, training, layout = parts["hardware"], parts["training"], parts["layout"]
    layout, moved = _layout_blocks(training, layout)
    reads += moved
    stash: dict[str, Any] = {}
    if titan := take_titan_keys(training, layout):  # read with the GPU count (io/titan_keys.py)
        stash["_titan"] = titan
    training = _moe_arguments(training, layout, reads)
    if layout is None and isinstance(training, dict) and any(k in training for k in CHECKPOINTING):
        layout = {}
    if isinstance(layout, dict):
        if isinstance(layout.get("recompute"), bool):
            on = layout["recompute"]
            layout["recompute"] = "full" if on else "none"
            reads.append(("layout.recompute", str(on).lower(), layout["recompute"],
                          "recompute true: every block recomputed in backward (full)"))
        for key in [k for k in CHECKPOINTING if k in layout or (isinstance(training, dict) and k in training)]:
            part = layout if key in layout else training
            mode = part[key].strip().lower() if isinstance(part[key], str) else None
            if mode in ("full", "selective", "none") and layout.get("recompute") is None:  # a granularity, not a switch
                layout["recompute"] = mode
                reads.append(("layout.recompute", f"{key}: {part.pop(key)}", mode, f"{key} {mode}: recompute {mode}"))
                continue
            on = switch(part.pop(key), key)
            if layout.get("recompute") is None:
                layout["recompute"] = "full" if on else "none"
                reads.append(("layout.recompute", f"{key}: {str(on).lower()}", layout["recompute"],
                              f"{key} checkpoints every block, recomputed in backward: recompute "
                              f"{layout['recompute']}"))
        reads += activation_checkpoint(layout) + fsdp_config(layout)
        reads += layout_words(layout) + config_stage(layout) + shard_degrees(layout) + recompute_modules(layout)
        reads += recompute_method(layout)
        reads += _sharding_keys(layout, stash)
    if isinstance(hardware, dict):
        for key in [k for k in NETWORK if k in hardware]:
            value = hardware.pop(key)
            field = NETWORK_AT.get(key) or _fabric_kind(value)
            inside = field == "scale_up"
            if hardware.get(field) is None:
                hardware[field] = value
                reads.append((f"hardware.{field}", f"{key}: {value}", value,
                              f"the {key} {'inside a node' if inside else 'between nodes'}"))
    moving = [k for k in ACCUMULATION if isinstance(layout, dict) and k in layout]  # a table's batch columns
    for key in moving if training is None or isinstance(training, dict) else ():  # else: its own check refuses it
        training = training if isinstance(training, dict) else {}
        if (said := next((k for k in ACCUMULATION if k in training), None)) is not None:
            raise GpuplanError(f"the gradient accumulation is given twice (layout.{key} and training.{said}): give it "
                               "once")
        training[key] = layout.pop(key)
    if isinstance(training, dict):
        layout = {} if layout is None and any(k in training for k in ACCUMULATION) else layout  # may fix micro_batch
        reads += _training_keys(training, hardware, layout)
    out = {**raw, **{s: v for s, v in (("hardware", hardware), ("training", training), ("layout", layout))
                     if v is not None}, **stash}
    return out, tuple(reads)


def _moe_arguments(training: Any, layout: Any, reads: list[Reading]) -> Any:
    """``training`` with the dispatcher Megatron-Core's MoE arguments name (io/moe_keys.py) as its moe_dispatcher (a
    section not given is made); their readings added to ``reads``."""
    moe_reads, dispatcher = moe_keys(training, layout)
    reads += moe_reads
    if dispatcher is None:
        return training
    training = training if isinstance(training, dict) else {}
    if training.get("moe_dispatcher") not in (None, dispatcher):
        raise GpuplanError(f"training.moe_dispatcher {training['moe_dispatcher']!r} and the MoE arguments "
                           f"({dispatcher}) disagree: give one")
    training["moe_dispatcher"] = dispatcher
    return training


# a framework config's blocks that set the layout (DeepSpeed's zero_optimization, Megatron-FSDP's sharding strategy,
# Megatron's distributed optimizer, the Hugging Face Trainer's fsdp): given with its training settings, read as layout
LAYOUT_BLOCKS = ("zero_optimization", "data_parallel_sharding_strategy", "use_distributed_optimizer", "fsdp",
                 "fsdp_sharding_strategy", "fsdp_config")


def _layout_blocks(training: Any, layout: Any) -> tuple[Any, list[Reading]]:
    """``layout`` with the layout blocks a training section holds moved into it (a section not given is made), and
    the readings; a block in both is refused."""
    if not isinstance(training, dict) or not isinstance(layout, dict | None):
        return layout, []
    reads: list[Reading] = []
    for key in [k for k in LAYOUT_BLOCKS if k in training]:
        layout = {} if layout is None else layout
        if key in layout:
            raise GpuplanError(f"{key} is given twice (training.{key} and layout.{key}): give it once")
        layout[key] = training.pop(key)
        reads.append((f"layout.{key}", f"training.{key}", "layout", f"{key} sets the layout: read under layout"))
    return layout, reads


def _sharding_keys(layout: dict, stash: dict[str, Any]) -> list[Reading]:
    """``layout.fsdp`` (or accelerate's ``fsdp_sharding_strategy``) and Megatron's ``use_distributed_optimizer`` as the
    ZeRO stage; a HYBRID_SHARD word is left in ``stash`` for io/scenario.py, which reads its group with the node."""
    from gpuplan.catalog.stacks import sharding_words

    reads: list[Reading] = []
    for key in [k for k in ("zero", "zero_group") if node_sharded(layout.get(k))]:  # read with the node's GPUs
        stash["_sharding_word"] = (f"layout.{key}", layout.pop(key))
    said = sharding_word(layout)  # accelerate's fsdp_sharding_strategy: what layout.fsdp says
    if said is not None:
        if "fsdp" in layout:
            raise GpuplanError(f"layout.fsdp and layout.{said[0]} both name the sharding: give it once")
        layout["fsdp"] = said[1]
    if "fsdp" in layout:
        value = layout.pop("fsdp")
        if isinstance(value, str) and sharding_words(value).hybrid:  # its group is the node's: read with the node
            stash["_sharding_word"] = (f"layout.{said[0] if said else 'fsdp'}", value)
        else:
            reads += _fsdp(layout, value)
    if "use_distributed_optimizer" in layout:  # Megatron-LM's --use-distributed-optimizer
        if switch(layout.pop("use_distributed_optimizer"), "layout.use_distributed_optimizer") \
                and layout.get("zero") is None:
            layout["zero"] = 1
            reads.append(("layout.zero", "use_distributed_optimizer: true", 1, "Megatron's distributed optimizer "
                          "shards the optimizer states (and fp32 master weights) over the data-parallel ranks: "
                          "ZeRO-1"))
    return reads


def _training_keys(training: dict, hardware: Any, layout: Any) -> list[Reading]:
    """The training section's keys read (``read_user_keys``): FlashAttention switches, hyperparameters and epochs set
    aside, accumulation steps as the global batch."""
    reads: list[Reading] = []
    if training.get("precision") is False:  # YAML's unquoted `mixed_precision: no` (accelerate's word): no mixed one
        training["precision"] = "no"
    for key in [k for k in UNUSED if k in training]:
        reads.append((f"training.{key}", f"{key}: {training.pop(key)}", "not used",
                      "a hyperparameter or logging setting: it changes neither memory nor step time"))
    for key in [k for k in FLASH if k in training]:
        on = switch(training.pop(key), f"training.{key}")
        if training.get("attention") is None:
            training["attention"] = "flash" if on else "eager"
            reads.append(("training.attention", f"{key}: {str(on).lower()}", training["attention"],
                          "a fused attention kernel (FlashAttention) on: flash" if on else
                          "no fused attention kernel: the scores materialised (eager)"))
    for key in [k for k in EPOCHS if k in training]:
        reads.append((f"training.{key}", f"{key}: {training.pop(key)}", "not used",
                      "epochs count passes over a dataset whose size in tokens the scenario does not give: give "
                      "training.tokens (epochs × the dataset's tokens) for a time to train"))
    accumulation = [k for k in ACCUMULATION if k in training]
    if accumulation:
        reads.append(_accumulated(training, accumulation[0], hardware, layout))
    return reads + fine_tune_keys(training)


def _fsdp(layout: dict, value: Any) -> list[Reading]:
    """``fsdp: true`` as ZeRO-3; a sharding strategy as Hugging Face Trainer and PyTorch FSDP write it ("full_shard
    auto_wrap", "SHARD_GRAD_OP", "hybrid_shard", "no_shard", with "offload") as its stage and offload."""
    from gpuplan.catalog.stacks import sharding_words

    if isinstance(value, str) and switch_word(value) is None:
        said = sharding_words(value)
        if said.stage is None:
            raise GpuplanError(f"layout.fsdp {value!r} names no sharding strategy: give true/false or one of "
                               "full_shard, shard_grad_op, hybrid_shard, no_shard")
        out: list[Reading] = []
        if layout.get("zero") not in (None, said.stage):
            raise GpuplanError(f"layout.fsdp {value!r} shards as ZeRO-{said.stage}, but layout.zero is "
                               f"{layout['zero']}: give the stage once")
        if layout.get("zero") is None:
            layout["zero"] = said.stage
            out.append(("layout.zero", f"fsdp: {value}", said.stage, f"FSDP's {value} shards as ZeRO-{said.stage}"))
        if said.offload is not None and layout.get("offload") is None:  # CPUOffload(offload_params=True): all states
            layout["offload"] = "params" if said.stage == 3 else said.offload
            out.append(("layout.offload", f"fsdp: {value}", layout["offload"],
                        f"FSDP's {value} keeps the sharded parameters, gradients and optimizer states on the CPU"))
        return out
    # a table's 0/1 column (Megatron Bridge's and NeMo's performance tables: FSDP 0 or 1) is the switch; a shard
    # degree is 2 or more (config_keys.py), one of 1 would shard nothing
    on = bool(value) if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1) else \
        switch(value, "layout.fsdp")
    if on and layout.get("zero") not in (None, 3):
        raise GpuplanError(f"layout.fsdp: true shards fully (ZeRO-3), but layout.zero is {layout['zero']}: give the "
                           "stage once")
    if on and layout.get("zero") is None:
        layout["zero"] = 3
        return [("layout.zero", "fsdp: 1" if value == 1 and value is not True else "fsdp: true", 3,
                 "FSDP's full shard shards parameters, gradients and optimizer states: ZeRO-3")]
    return []


def _accumulated(training: dict, key: str, hardware: Any, layout: Any) -> Reading:
    """The global batch that ``key`` accumulation steps make: data-parallel replicas × micro-batch × steps."""
    steps = parse_count(training.pop(key), f"training.{key}")
    if steps != int(steps) or steps < 1:
        raise GpuplanError(f"training.{key} must be a whole number of micro-batches per step, got {steps}")
    # the sections are under gpuplan's keys already (read_user_keys: schema.own_keys, moved_keys)
    lay, hw, tr = (part if isinstance(part, dict) else {} for part in (layout, hardware, training))
    mb, dp, gpus = lay.get("micro_batch"), lay.get("dp"), hw.get("gpus")
    if dp is None and isinstance(gpus, int):
        split = math.prod(int(lay.get(k) or 1) for k in ("tp", "pp", "cp"))
        dp = gpus // split if gpus % split == 0 else None
    if tr.get("global_batch") is not None:
        return _accumulated_with_batch(tr, lay, key, int(steps), dp)
    if not isinstance(mb, int) or not isinstance(dp, int):
        raise GpuplanError(f"training.{key} makes the global batch only with the micro-batch and the data-parallel "
                           "degree: give layout.micro_batch and hardware.gpus (or layout.dp), or give "
                           "training.global_batch")
    training["global_batch"] = dp * mb * int(steps)
    return ("training.global_batch", f"{key}: {int(steps)}", training["global_batch"],
            f"{int(steps)} accumulation steps × micro-batch {mb} × {dp} data-parallel replicas")


def _accumulated_with_batch(tr: dict, lay: dict, key: str, steps: int, dp: Any) -> Reading:
    """Steps beside a given global batch: they agree with it (dp × micro-batch × steps), or fix an open micro-batch."""
    gb, mb = parse_count(tr["global_batch"], "training.global_batch"), lay.get("micro_batch")
    if isinstance(dp, int) and mb is None and gb % (dp * steps) == 0:
        lay["micro_batch"] = int(gb // (dp * steps))
        return ("layout.micro_batch", f"{key}: {steps}", lay["micro_batch"],
                f"global batch {gb:,.0f} over {dp} data-parallel replicas in {steps} accumulation steps")
    if isinstance(dp, int) and isinstance(mb, int) and dp * mb * steps == gb:
        return (f"training.{key}", f"{key}: {steps}", "not used", f"{steps} steps × micro-batch {mb} × {dp} "
                "data-parallel replicas: the global batch given")
    raise GpuplanError(f"training.{key} ({steps}) and training.global_batch ({gb:,.0f}) are both given and do not "
                       f"agree with micro-batch {mb or 'open'} × dp {dp or 'open'} × steps: give one of them")


TABLE_SEQ = ("seq_len", "seq", "seq_length")  # a model table's training length (not its positions)


def table_seq(model_ref: Any, training: dict) -> tuple[dict, tuple[Reading, ...]]:
    """The training section with a model given by its dimensions' sequence length where it gives none (a paper's
    model table: "seq_len: 2048" is the length the run trained at), and how it was read."""
    if "seq_len" in training or not isinstance(model_ref, dict) or "model_type" in model_ref:
        return training, ()
    key = next((k for k in TABLE_SEQ if model_ref.get(k) is not None), None)
    if key is None:
        return training, ()
    value = model_ref[key]
    return {**training, "seq_len": value}, (("training.seq_len", f"model.{key}: {value}", value,
                                             "the sequence length the model's table states"),)


def same_batch(sequences: int, tokens: Any, seq_len: int) -> None:
    """A global batch given both ways must agree: sequences × seq_len within 5 % of the tokens (a table's "4M" for
    2,048 × 2,048 = 4,194,304); then the sequences are read."""
    n = parse_count(tokens, "training.global_batch_tokens")
    if abs(sequences * seq_len - n) > 0.05 * n:
        raise GpuplanError(f"training.global_batch {sequences:,} × seq_len {seq_len:,} = {sequences * seq_len:,} "
                           f"tokens, but training.global_batch_tokens is {n:,.0f}: give one of them (or the seq_len "
                           "they agree at)")


def batch_from_tokens(value: Any, seq_len: int) -> tuple[int, Reading | None]:
    """Sequences per step from ``training.global_batch_tokens``, and how a count that is not a whole number of
    sequences was read: within 5 % of a power-of-two number of sequences, that number (papers' "4M tokens" at 4,096
    is 1,024 × 4,096 = 4,194,304: Llama 2, arXiv:2307.09288, Table 1); else, within 2 %, the count with the most
    factors of two (it divides the most data-parallel degrees); further off, an error with a suggestion."""
    key = "training.global_batch_tokens"
    gbt = parse_count(value, key)
    if not gbt > 0:
        raise GpuplanError(f"{key} must be positive, e.g. 4,194,304, got {value!r}")
    if gbt > MAX_GLOBAL_BATCH * seq_len:
        raise GpuplanError(f"{key} = {value!r} is more than {MAX_GLOBAL_BATCH:,} sequences of seq_len={seq_len}: "
                           "give tokens per optimizer step, e.g. 4,194,304")
    if gbt != int(gbt):
        raise GpuplanError(f"{key} must be a whole number of tokens, got {value!r}")
    exact = gbt / seq_len
    if exact == int(exact):
        return int(exact), None
    pow2 = 2 ** max(0, round(math.log2(max(exact, 1))))
    multiples = (round(exact / 2**j) * 2**j for j in range(pow2.bit_length(), -1, -1))
    near = next((m for m in multiples if m and abs(m / exact - 1) <= 0.02), None)
    seqs = pow2 if abs(pow2 / exact - 1) <= 0.05 else near
    if seqs is None:
        raise GpuplanError(f"{key}={gbt:,.0f} is not a multiple of seq_len={seq_len}: use e.g. {pow2 * seq_len:,} "
                           f"({pow2:,} sequences)")
    return seqs, (key, f"{gbt:,.0f} tokens", seqs * seq_len,
                  f"{gbt:,.0f} tokens is not a whole number of {seq_len}-token sequences: read as {seqs:,} sequences "
                  f"({seqs * seq_len:,} tokens{', the power of two it rounds' if seqs == pow2 else ''})")
