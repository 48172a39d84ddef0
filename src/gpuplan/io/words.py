"""The user's words for the training software, its precision, optimizer and attention kernel, read as the values
they mean (catalog/stacks.py, stacks.json: hf-trainer → pytorch-fsdp, torchtune's bf16 → bf16-pure,
paged_adamw_8bit → adamw-8bit, FlashAttention-2 → flash), and the precision a GPU without bf16 tensor cores
trains in when the input leaves it open or names no 16-bit format — each read once, here."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gpuplan.errors import GpuplanError, described
from gpuplan.spec import PRECISIONS
from gpuplan.spec.model import ALL_LINEAR
from gpuplan.units import IN_TOKENS

Reading = tuple[str, str, Any, str]  # field, the word given, the value it stands for, the cited rule


def _framework_words(kw: dict[str, Any], layout: dict[str, Any]) -> list[Reading]:
    """``training.framework`` read as its profile, and what a stack's own launcher sets beside it (the allocator's
    expandable segments, where the stack differs from its profile) and the adapter method its description names
    where ``training.method`` is open; at ZeRO-1 (``layout``) a Hugging Face Trainer stack runs DeepSpeed's engine."""
    from gpuplan.catalog.method_words import method_in, preference_in, read_method
    from gpuplan.catalog.stacks import stack_allocator
    from gpuplan.catalog.trainer_engine import read_stack

    word = kw["framework"]
    kw["framework"], r = read_stack(word, layout)
    out = [r] if r is not None else []
    method = method_in(word) if isinstance(word, str) else None
    given = kw.get("method")
    if method is not None and given is None:  # "Axolotl QLoRA": the method it names, where left open
        kw["method"] = method
        out.append(("training.method", word, method, f"framework {word} names the method {method}"))
    elif method is not None and isinstance(given, str) and read_method(given)[0] != method:  # the given one is kept
        out.append(("training.method", word, given, f"framework {word} names the method {method}; training.method "
                    f"{given} is given and kept"))
    if (pref := preference_in(word) if isinstance(word, str) else None) and "preference" not in kw:  # "TRL DPO"
        kw["preference"] = pref
        out.append(("training.preference", word, pref, f"framework {word} names the preference loss {pref}"))
    allocator = stack_allocator(word) if isinstance(word, str) else None
    if allocator is not None and "expandable_segments" not in kw:
        kw["expandable_segments"] = allocator[0]
        out.append(("training.expandable_segments", word, allocator[0], f"{word}'s launcher: {allocator[1]}"))
    return out


def read_words(kw: dict[str, Any], no_bf16: str | None = None, layout: Any = None) -> tuple[Reading, ...]:
    """Read ``kw``'s words in place (their readings returned). An open precision takes the framework's documented
    default (frameworks.json defaults.precision) when it is one of gpuplan's. On a GPU without bf16 tensor cores
    (``no_bf16``, its id: V100, T4) 16-bit mixed precision is fp16: an open precision whose default would be bf16 — what
    training there runs — and a word for 16-bit mixed precision that names no format ("mixed", "mixed
    precision"), said so."""
    from gpuplan.catalog.frameworks import default_fp8_recipe, get_framework
    from gpuplan.catalog.method_words import read_attention, read_method_word
    from gpuplan.catalog.stacks import precision_flag, precision_recipe, read_optimizer, read_precision

    read: list[Any] = []
    if isinstance(kw.get("attention"), str):
        kw["attention"], r = read_attention(kw["attention"])
        read.append(r)
    if isinstance(kw.get("optimizer"), str):
        kw["optimizer"], fixed, r = read_optimizer(kw["optimizer"])
        for field, value in fixed.items():  # its kernel, a step in the backward: unless given
            kw.setdefault(field, value)
        read.append(r)
    stack_read = _framework_words(kw, layout or {}) if "framework" in kw else []
    ranks: list[Reading] = []
    if isinstance(kw.get("method"), str):  # "LoRA (r=64)", "QDoRA": the rank, DoRA it names too
        r, ranks = read_method_word(kw)
        read.append(r)
    framework = kw.get("framework", "generic")
    out = [(r.field, r.given, r.value, r.rule) for r in read if r is not None] + stack_read + ranks
    word = kw.get("precision")
    if no_bf16 and isinstance(word, str) and precision_flag(word, "sixteen_bit"):
        kw["precision"] = "fp16"
        out.append(("training.precision", word, "fp16", f"precision {word} read as fp16: 16-bit mixed precision on "
                    f"{no_bf16}, which has no bf16 tensor cores, is fp16 with loss scaling over fp32 master weights"))
    elif word is not None:
        kw["precision"], r = read_precision(word, framework)
        out += [(r.field, r.given, r.value, r.rule)] if r is not None else []
        kw["tf32"] = kw.get("tf32", False) or (isinstance(word, str) and precision_flag(word, "tf32"))
        recipe = precision_recipe(word, framework) if isinstance(word, str) else None
        if recipe is not None and "fp8_recipe" not in kw:  # the recipe the word names (TE FP8: delayed scaling)
            kw["fp8_recipe"] = recipe
            out.append(("training.fp8_recipe", word, recipe, f"precision {word} names the fp8 recipe {recipe}"))
        elif recipe is None and kw["precision"] == "fp8" and "fp8_recipe" not in kw and _blockwise(word):
            kw["fp8_recipe"] = default_fp8_recipe(framework)
            out.append(("training.fp8_recipe", word, kw["fp8_recipe"], BLOCKWISE))
    elif kw.get("fp8_recipe") is not None:  # a recipe that scales fp8 matmuls: the run trains in fp8
        kw["precision"] = "fp8"
        out.append(("training.precision", f"fp8_recipe: {kw['fp8_recipe']}", "fp8",
                    "an fp8 recipe given with the precision open: the matmuls it scales run in fp8"))
    else:
        default = get_framework(framework).defaults.get("precision")
        if no_bf16 and (default is None or default.value in ("bf16", "bf16-pure")):
            kw["precision"] = "fp16"
        elif default is not None and default.value in PRECISIONS:
            kw["precision"] = default.value
    return tuple(out)


# a recipe the words name that no model here costs: said, the framework's default recipe costed in its place
BLOCKWISE = ("block-scaled FP8 (Megatron-Core --fp8-recipe blockwise, Transformer Engine Float8BlockScaling, "
             "DeepSeek-V3's 1×128 activation and 128×128 weight scales) is not modelled: the framework's default fp8 "
             "recipe is costed in its place; name fp8_recipe to choose another")


def _blockwise(word: Any) -> bool:
    """Whether a precision word names block-scaled FP8 ("FP8 blockwise", "fp8 (1x128 block scaling)")."""
    return isinstance(word, str) and re.search(r"block[-_\s]?(wise|scal)|\b1x128\b|128x128", word.lower()) is not None


# a shard group given as the node ("zero_group: node", "intra-node"): the node's GPUs over tp × cp
NODE_GROUP = re.compile(r"(per[-_ ]?|intra[-_ ]?|within[-_ ]?(a[-_ ])?|one[-_ ])?node([-_ ]?(local|wide|level))?")


def node_sharded(word: Any) -> bool:
    """Whether a layout word shards inside the node: a HYBRID_SHARD stage, or a shard group named as the node."""
    from gpuplan.catalog.stacks import sharding_words

    return isinstance(word, str) and (sharding_words(word).hybrid
                                      or NODE_GROUP.fullmatch(word.strip().lower()) is not None)


def batch_in_tokens(training: dict[str, Any]) -> tuple[dict[str, Any], tuple[Reading, ...]]:
    """A global batch written in tokens ("4M tokens", as papers state it) as ``global_batch_tokens``, as a reading,
    where no batch in tokens is given besides; the sequences follow from seq_len (user_keys.batch_from_tokens)."""
    word = training.get("global_batch")
    if not isinstance(word, str) or "global_batch_tokens" in training or not IN_TOKENS.search(word.strip()):
        return training, ()
    rest = {k: v for k, v in training.items() if k != "global_batch"}
    return {**rest, "global_batch_tokens": word}, (("training.global_batch_tokens", f"global_batch: {word}", word,
                                                     "a global batch in tokens: its sequences follow from seq_len"),)


def stage_from_framework(word: Any, layout: dict[str, Any], per_node: int | None = None,
                         where: str = "training.framework") -> tuple[Reading, ...]:
    """The ZeRO stage and the offload a ``training.framework`` word names ("DeepSpeed ZeRO-3", "ZeRO-Offload",
    "FSDP FULL_SHARD"), set in ``layout`` in place where it leaves them open (the user stated them), as readings
    (field, word, value, rule); a stage that contradicts a given ``layout.zero`` is refused. FSDP's HYBRID_SHARD
    shards inside a node: its group is the node's ``per_node`` GPUs over tp × cp. ``where``: the key that named it (a
    layout's FSDP sharding strategy reads the same way)."""
    from gpuplan.catalog.stacks import sharding_words

    if not isinstance(word, str):
        return ()
    said = sharding_words(word)
    stage, offload = said.stage, said.offload
    if stage is not None and "zero" in layout and layout["zero"] != stage:
        raise GpuplanError(f"{where} {word!r} names ZeRO stage {stage}, layout.zero is {layout['zero']}: "
                           "give the stage once")
    out: list[Reading] = []
    if stage is not None and "zero" not in layout:
        layout["zero"] = stage
        out.append(("layout.zero", word, stage, f"{where} {word} names ZeRO stage {stage}"))
    tp_cp = (layout.get("tp") or 1) * (layout.get("cp") or 1)
    node = node_sharded(word)
    if node and where.startswith("layout.") and per_node and per_node % tp_cp:
        raise GpuplanError(f"{where} {word!r} shards inside a node, but the node's {per_node} GPUs do not hold whole "
                           f"tensor × context groups of {tp_cp}: give layout.zero_group as a number of GPUs")
    if node and layout.get("zero_group") is None and per_node and per_node % tp_cp == 0:
        # a node holding one tensor × context group: a shard group of one GPU, each replica whole
        layout["zero_group"] = per_node // tp_cp
        out.append(("layout.zero_group", word, per_node // tp_cp, f"{where} {word} shards inside a node: "
                    f"the node's {per_node} GPUs over tp × cp = {tp_cp}"))
    if offload == "optimizer" and said.stack == "fsdp" and layout.get("zero") == 3:
        offload = "params"  # FSDP's CPUOffload(offload_params=True) moves parameters, gradients and optimizer state
    if offload is not None and "offload" not in layout:
        layout["offload"] = offload
        out.append(("layout.offload", word, offload, f"{where} {word} offloads the {offload} to the CPU"))
    return tuple(out)


def sp_without_tp(layout: dict[str, Any]) -> tuple[Reading, ...]:
    """Sequence parallelism given with tensor parallelism 1 (a published config's SP column, a recipe that always
    sets it) is no sequence parallelism: Megatron-LM turns it off there (megatron/training/arguments.py
    validate_args: 'Disabling sequence parallelism because tensor model parallelism is disabled'); dropped from
    ``layout`` in place, as a reading. With tp open the fixed field keeps the search to tp > 1 (spec/rules.py)."""
    if layout.get("sequence_parallel") is True and layout.get("tp") == 1:
        del layout["sequence_parallel"]
        return (("layout.sequence_parallel", True, False,
                 "sequence parallelism splits the tensor-parallel group's activations: with tp = 1 there is none "
                 "(Megatron-LM turns it off, validate_args)"),)
    return ()


def era_for_layout(tr_raw: dict[str, Any], training: Any, layout: dict[str, Any], architecture: str
                   ) -> tuple[Any, tuple[Reading, ...]]:
    """``training`` under the profile of its framework's later code where the user named the profile itself and
    states what only that later code runs (frameworks.json ``successor``: Megatron-LM since 2023 is Megatron-Core —
    FP8, context parallelism, TP communication overlap, which the 2020-22 profile refuses) or runs on a GPU after the
    profile's era (Hopper, Ada, Blackwell, ROCm's: ``ERA_2020_22``), as a reading; the fp8 recipe and gradient dtype
    the user left open are the successor's documented ones."""
    from gpuplan.catalog.framework_era import ERA_2020_22
    from gpuplan.catalog.frameworks import documented_defaults, first_refusal, get_framework
    from gpuplan.catalog.stacks import spelling

    word, name = tr_raw.get("framework"), training.framework
    later = get_framework(name).successor
    if later.value is None or not isinstance(word, str) or spelling(word, version=True) != name:
        return training, ()
    refused = first_refusal(name, layout, training)
    after = architecture not in ERA_2020_22
    if refused is None and not after:
        return training, ()
    # the recipe and gradient dtype the successor documents; the allocator stays the launcher's (the same scripts)
    open_ = {k: None for k in ("fp8_recipe", "grad_dtype") if k not in tr_raw}
    moved = documented_defaults(replace(training, framework=later.value, **open_))
    if first_refusal(later.value, layout, moved) is not None:
        return training, ()  # the later code refuses it too: the profile's own refusal stands
    why = f"cannot run this ({refused.why})" if refused is not None else \
        f"predates {architecture} GPUs (its era's are V100, T4 and A100)"
    return moved, (("training.framework", word, later.value,
                    f"the {name} profile is that name's code of 2020-22, which {why}; {later.note} ({later.source})"),)


def switch_for_layout(tr_raw: dict[str, Any], training: Any, layout: dict[str, Any]) -> tuple[Any, tuple[Reading, ...]]:
    """``training`` with torch.compile on where the user left it open and stated a layout setting their framework
    runs only compiled (frameworks.json ``cannot_run``: torchtitan's async TP, 'Async TP requires ... --compile.enable')
    — the run they describe was compiled —, as a reading; the model and its loss, the framework's components
    default (``compile_word``)."""
    from gpuplan.catalog.frameworks import get_framework, refused_rules, training_fields

    if "compile" in tr_raw or training.compile:
        return training, ()
    job = training_fields(training)
    profile = get_framework(training.framework)
    on = refused_rules(profile, layout, {**job, "compile": True})
    rule = next((r for r in refused_rules(profile, layout, {**job, "compile": False})
                 if "compile" in r.when and len(r.when) > 1 and r not in on), None)
    if rule is None:
        return training, ()
    stated = ", ".join(f"layout.{k} = {layout[k]}" for k in sorted(rule.when) if k in layout)
    model, loss = compile_word(True)
    return replace(training, compile=model, compile_loss=loss), (
        ("training.compile", f"open, with {stated}", True, f"{rule.why}; {stated} is stated, so the run was compiled"),)


# how Megatron-LM, NeMo and Megatron Bridge spell their CUDA-graph switches (--cuda-graph-impl local |
# transformer_engine | full_iteration, the older --cuda-graph-scope, enable_cuda_graph / external_cuda_graph: true)
CUDA_GRAPH_WORDS = {
    **dict.fromkeys(("none", "off", "false", "no", "disabled"), "none"),
    **dict.fromkeys(("layer", "true", "on", "yes", "local", "transformer_engine", "te", "per-layer", "per_layer",
                     "scoped", "attn", "mlp", "moe", "moe_router", "mamba"), "layer"),
    **dict.fromkeys(("full", "full_iteration", "full-iteration", "iteration"), "full"),
}


def cuda_graphs_word(value: Any) -> str:
    """training.cuda_graphs as a stack writes it: a switch (true: per layer) or a scope/implementation name."""
    if isinstance(value, bool):
        return "layer" if value else "none"
    if isinstance(value, str) and value.strip().lower() in CUDA_GRAPH_WORDS:
        return CUDA_GRAPH_WORDS[value.strip().lower()]
    raise GpuplanError(f"training.cuda_graphs must be none, layer (per layer or module: Transformer Engine, "
                       f"Megatron's local or transformer_engine) or full (the whole iteration), or true/false; "
                       f"got {described(value)}")


SWITCH_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def switch_word(value: Any) -> bool | None:
    """A true/false switch as files write it — a boolean, or true/false, yes/no, on/off in any case, or a DeepSpeed
    section's ``enabled`` — else None (the caller names the key and what else it takes)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and "enabled" in value:  # DeepSpeed's sections: bf16: {enabled: true}
        return switch_word(value["enabled"])
    return SWITCH_WORDS.get(value.strip().lower()) if isinstance(value, str) else None


def switch(value: Any, key: str) -> bool:
    """``switch_word`` of a key's value; a value that is no switch is one error naming the key."""
    on = switch_word(value)
    if on is None:
        raise GpuplanError(f"{key} is a switch: give true or false, got {value!r}")
    return on


def compile_word(value: Any) -> tuple[bool, bool]:
    """training.compile as (the model compiled, the loss compiled with it): true compiles both — torchtitan's
    compile.components default ["model", "loss"] (torchtitan/config/job_config.py), and the Hugging Face models,
    whose loss runs inside their forward —; ``model`` leaves the loss eager (components ["model"], or torchtitan of
    2024, whose train.py kept ``torch.compile(loss_fn)`` commented out: "compiling loss function causes CUDA
    errors")."""
    if isinstance(value, str) and value.strip().lower() == "model":
        return True, False
    on = switch_word(value)
    if on is not None:
        return on, on
    raise GpuplanError(f"training.compile must be true (the model and its loss), model (the model only, the loss "
                       f"eager) or false; got {described(value)}")


def kernels_word(value: Any) -> str:
    """training.kernels as a stack writes it: ``liger`` (or the Trainer's switch use_liger_kernel: true) or
    ``framework`` (false: the model's own kernels)."""
    on = switch_word(value)
    if on is not None:
        return "liger" if on else "framework"
    if isinstance(value, str) and value.strip().lower() in ("liger", "liger-kernel", "liger_kernel"):
        return "liger"
    if isinstance(value, str) and value.strip().lower() in ("framework", "none"):
        return "framework"
    raise GpuplanError(f"training.kernels must be framework (the model's kernels as the framework runs them) or liger "
                       f"(Liger Kernel; use_liger_kernel: true); got {described(value)}")


def read_lora_targets(given: tuple[str, ...] | None, model: Any, framework: str, method: str | None
                      ) -> tuple[tuple[str, ...], tuple[Reading, ...]]:
    """``training.lora_targets`` (None: all-linear) as ``model``'s own linears (spec/model.py ``resolve_lora_targets``),
    each given name checked as a module name first, a framework's word read as the model's linears of its kind; on a
    MoE model whose stack cannot reach the routed experts (frameworks.json ``memory.lora_experts`` false), the experts
    left out (``NO_EXPERTS``) — each reading said."""
    from gpuplan.catalog.framework_memory import lora_adapts_experts
    from gpuplan.spec.job import check_lora_target_names
    from gpuplan.spec.model import NO_EXPERTS, is_lora_target, resolve_lora_targets

    targets, reads = ALL_LINEAR, ()
    if given is not None:
        check_lora_target_names(given)
        targets, note = resolve_lora_targets(model, given)
        reads = (("training.lora_targets", ", ".join(given), ", ".join(targets), f"read {note}"),) if note else ()
    if method in ("lora", "qlora", "lora-int8") and model.n_experts and not lora_adapts_experts(framework):
        said = ", ".join(given) if given is not None else "all-linear"
        reads += (("training.lora_targets", said, f"{said}, not the routed experts", f"{framework} adapts modules "
                   "(PEFT's target_modules); transformers 5 keeps a MoE block's experts as fused parameters, which "
                   "only PEFT's target_parameters reaches (frameworks.json memory.lora_experts)"),)
        targets = (*targets, NO_EXPERTS)
        if not any(is_lora_target(w, targets) for lg in model.kinds for w in lg.weights):
            raise GpuplanError(f"training.lora_targets: {said} adapts only {model.name}'s routed experts, which "
                               f"{framework}'s PEFT cannot reach (transformers 5 keeps them as fused parameters, "
                               "adapted only by PEFT's target_parameters): name attention linears too, or all-linear")
    return targets, reads


def stack_lora(kw: dict[str, Any], word: Any, model: Any) -> tuple[Reading, ...]:
    """A LoRA/QLoRA run's target modules and rank where it names none: what the stack or profile ``word`` names builds
    by default (catalog/lora_defaults.py: PEFT's model-type mapping at rank 8, torchtune's recipes, NeMo's, …), the
    names read as ``model``'s own linears, each reading said once; a default name the model has no linear for is left
    out, and where none is left — or the stack names none for this model type (PEFT asks for them) — the typical
    all-linear stays, said so. Nothing where the stack has no default (the typical all-linear at rank 16)."""
    from gpuplan.catalog.lora_defaults import lora_defaults
    from gpuplan.spec.model import resolve_lora_targets

    found = lora_defaults(word) if isinstance(word, str) else None
    if found is None:
        return ()
    how = f"{word}'s default where a run names none: {found.source}" + (f" — {found.note}" if found.note else "")
    out: tuple[Reading, ...] = ()
    if "lora_targets" not in kw:
        names = found.targets_for(model.model_type)
        if names == "all-linear":
            kw["lora_targets"], value = ALL_LINEAR, "all-linear"
        else:
            kept = tuple(n for n in names or () if _resolves(model, n))
            targets = resolve_lora_targets(model, kept)[0] if kept else ALL_LINEAR
            kw["lora_targets"], value = targets, ", ".join(targets) if kept else "all-linear"
            if not kept:
                how = (f"{word} names no default target modules for {model.name} (model type {model.model_type}): "
                       f"the run names them; the typical all-linear is assumed ({found.source})")
        out += (("training.lora_targets", word, value, how),)
    if "lora_rank" not in kw:
        kw["lora_rank"] = found.rank
        out += (("training.lora_rank", word, found.rank, f"{word}'s default where a run names none: {found.source}"),)
    return out


def _resolves(model: Any, name: str) -> bool:
    """Whether ``name`` reads as one of ``model``'s linears (spec/model.py ``resolve_lora_targets``)."""
    from gpuplan.spec.model import resolve_lora_targets

    try:
        resolve_lora_targets(model, (name,))
    except GpuplanError:
        return False
    return True


def lora_target_names(value: Any) -> tuple[str, ...]:
    """The names as given (a string or a list; a dotted path by its last part); "all-linear" is every linear."""
    key = "training.lora_targets"
    if isinstance(value, str):
        names = [v.strip() for v in value.split(",")]
    elif isinstance(value, list | tuple):
        names = list(value)
    else:
        raise GpuplanError(f"{key} must be a list of module names such as [q_proj, v_proj], or all-linear; "
                           f"got {described(value)}")
    for v in names:
        if not isinstance(v, str) or not v.strip():
            raise GpuplanError(f"{key} must list module names such as q_proj, v_proj, or all-linear; got {v!r}")
    if len(names) == 1 and names[0].strip().lower() in ("all", "all-linear", "all_linear"):
        return ALL_LINEAR
    return tuple(n.strip().rsplit(".", 1)[-1] for n in names)
