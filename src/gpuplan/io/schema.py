"""The scenario's keys, once: the file's sections, the command-line flags and the Python API's
keyword arguments are all generated from these tables (README "The scenario file")."""

from __future__ import annotations

import difflib
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal, get_args, get_origin, get_type_hints

from gpuplan.errors import GpuplanError
from gpuplan.spec import Layout, Training

TOP_KEYS = ("name", "model", "hardware", "training", "layout")
HARDWARE_KEYS = ("gpu", "gpus", "gpus_per_node", "scale_up", "scale_out", "price_per_gpu_hour", "power_limit_w",
                 "calibration", "host_memory")
TRAINING_KEYS = ("seq_len", "global_batch", "global_batch_tokens", "tokens", "steps", "precision", "optimizer",
                 "optimizer_impl", "method", "lora_rank", "lora_targets", "lora_dropout", "dora", "preference",
                 "attention", "dropout", "headroom", "trace_calibration", "framework", "compile", "fp8_recipe",
                 "grad_dtype", "optimizer_in_backward", "activation_offloading", "expandable_segments", "cuda_graphs",
                 "kernels", "moe_dispatcher", "tf32")
LAYOUT_KEYS = tuple(f.name for f in fields(Layout))
# keys of an answer's echoed scenario that a file may give back (answers are inputs), not flags:
# nodes must agree with gpus / gpus_per_node; the factors are a calibration's (1 = none)
ECHO_HARDWARE_KEYS = ("nodes", "memory_factor", "compute_factor")
SECTIONS = (("hardware", HARDWARE_KEYS), ("training", TRAINING_KEYS), ("layout", LAYOUT_KEYS))
# a scenario file's keys as the frameworks' own configs spell them (Megatron-LM's arguments, DeepSpeed's and
# Hugging Face's config keys, torchrun's): read as gpuplan's key; giving both is refused
KEY_ALIASES: dict[str, dict[str, str]] = {
    "layout": {
        **dict.fromkeys(("tensor_model_parallel_size", "tensor_parallel_size", "tensor_parallel_degree", "tp_size"),
                        "tp"),
        **dict.fromkeys(("pipeline_model_parallel_size", "pipeline_parallel_size", "pipeline_parallel_degree",
                         "pp_size"), "pp"),
        **dict.fromkeys(("context_parallel_size", "context_parallel_degree", "cp_size"), "cp"),
        **dict.fromkeys(("expert_model_parallel_size", "expert_parallel_size", "expert_parallel_degree", "ep_size"),
                        "ep"),
        **dict.fromkeys(("data_parallel_size", "data_parallel_degree", "dp_size"), "dp"),
        # (not torchtitan's local_batch_size: under a pipeline it is the per-replica batch its microbatches split)
        **dict.fromkeys(("micro_batch_size", "train_micro_batch_size_per_gpu", "per_device_train_batch_size",
                         "micro_batch_size_per_gpu", "mbs"), "micro_batch"),
        # torchtitan's parallelism.pipeline_parallel_schedule (not "schedule": a learning-rate schedule elsewhere)
        **dict.fromkeys(("pipeline_parallel_schedule", "pipeline_schedule"), "pp_schedule"),
        **dict.fromkeys(("zero_stage", "zero_optimization_stage"), "zero"),
        # Megatron Bridge's ddp.use_distributed_optimizer as tables and papers shorten it
        "distributed_optimizer": "use_distributed_optimizer",
        **dict.fromkeys(("virtual_pipeline_model_parallel_size", "virtual_pipeline_parallel_size", "vpp", "vp"),
                        "virtual_stages"),
        # a paper's or a table's words for the degrees
        **{f"{word}_parallel": key for word, key in (("tensor", "tp"), ("pipeline", "pp"), ("data", "dp"),
                                                       ("context", "cp"), ("expert", "ep"))},
        "recompute_granularity": "recompute",
        "enable_async_tensor_parallel": "tp_overlap",  # torchtitan's async TP
        # Megatron-Core's --expert-tensor-parallel-size, torchtitan's expert_tensor_parallel_degree
        **dict.fromkeys(("expert_tensor_parallel_size", "expert_tensor_parallel_degree", "expert_tp", "etp_size"),
                        "etp"),
    },
    "training": {
        **dict.fromkeys(("global_batch_size", "train_batch_size", "gbs"), "global_batch"),
        # accelerate's mixed_precision (no, fp16, bf16, fp8) and Lightning's precision flag word
        **dict.fromkeys(("mixed_precision", "mixed_precision_param"), "precision"),  # torchtitan's param dtype
        # Axolotl's sequence_len, torchtitan's training.seq_len
        **dict.fromkeys(("seq_length", "sequence_length", "max_seq_len", "max_seq_length", "context_length",
                         "sequence_len", "cutoff_len"), "seq_len"),  # LLaMA-Factory's cutoff_len
        **dict.fromkeys(("train_tokens", "total_tokens", "training_tokens"), "tokens"),
        **dict.fromkeys(("train_iters", "train_steps", "max_steps", "total_steps"), "steps"),
        "lora_r": "lora_rank",
        # PEFT's LoraConfig.use_dora (TRL's and LLaMA-Factory's use_dora), Axolotl's peft_use_dora
        **dict.fromkeys(("use_dora", "peft_use_dora"), "dora"),
        # the Hugging Face Trainer's optim (its words, e.g. paged_adamw_8bit, read as the optimizer they run);
        # Axolotl's adapter and LLaMA-Factory's finetuning_type (lora, qlora, full) as the method
        "optim": "optimizer",
        **dict.fromkeys(("adapter", "finetuning_type"), "method"),
        # PEFT's LoraConfig.target_modules, Axolotl's lora_target_modules
        **dict.fromkeys(("target_modules", "lora_target_modules", "lora_target"), "lora_targets"),
        "torch_compile": "compile",  # the Trainer's switch
        # the attention kernel: Hugging Face's attn_implementation ("flash_attention_2", "sdpa", "eager"),
        # llm-foundry's attn_config.attn_impl ("flash", "torch")
        **dict.fromkeys(("attn_implementation", "attn_impl"), "attention"),
        **dict.fromkeys(("tokens_per_step", "batch_tokens", "global_batch_size_tokens"), "global_batch_tokens"),
        "optimizer_in_bwd": "optimizer_in_backward",
        "enable_activation_offloading": "activation_offloading",
        # the Hugging Face Trainer's switch (TrainingArguments.use_liger_kernel), LLaMA-Factory's (ModelArguments
        # enable_liger_kernel), Axolotl's liger plugin flags
        **dict.fromkeys(("use_liger_kernel", "enable_liger_kernel", "liger_kernel", "use_liger"), "kernels"),
        # Megatron-LM / NeMo / Megatron Bridge switches for CUDA graphs
        **dict.fromkeys(("enable_cuda_graph", "cuda_graph_impl", "cuda_graph_scope", "external_cuda_graph",
                         "use_cuda_graph", "cuda_graph"), "cuda_graphs"),
    },
    "hardware": {
        **dict.fromkeys(("num_gpus", "n_gpus", "gpu_count", "world_size", "count"), "gpus"),
        **dict.fromkeys(("nproc_per_node", "gpus_per_host"), "gpus_per_node"),
        **dict.fromkeys(("gpu_type", "gpu_model", "gpu_name", "accelerator"), "gpu"),
        **dict.fromkeys(("num_nodes", "nnodes", "node_count"), "nodes"),
    },
}
# top-level sections as published-run tables name them (a run's "parallelism": its layout), read as gpuplan's
SECTION_ALIASES = {"parallelism": "layout"}


def own_sections(raw: dict) -> dict:
    """``raw`` with its sections under gpuplan's names (``SECTION_ALIASES``; torchtitan's [activation_checkpoint] as
    the layout's block of that name, io/config_keys.py); a key in both is refused."""
    out = dict(raw)
    if "activation_checkpoint" in out:
        layout = out.get("layout") or {}
        if not isinstance(layout, dict) or "activation_checkpoint" in layout:
            raise GpuplanError("activation_checkpoint is torchtitan's block of the layout: give it once, beside a "
                               "layout mapping")
        out["layout"] = {**layout, "activation_checkpoint": out.pop("activation_checkpoint")}
    for alias, section in SECTION_ALIASES.items():
        part = out.pop(alias, None)
        if part is None:
            continue
        mine = out.get(section)
        if not isinstance(part, dict) or not isinstance(mine, dict | None):
            raise GpuplanError(f"{alias} (read as {section}) and {section} must be mappings of {section} keys")
        both = sorted(set(part) & set(mine or {}))
        if both:
            raise GpuplanError(f"{section}.{both[0]} is given twice ({alias}.{both[0]} and {section}.{both[0]}): "
                               "give it once")
        out[section] = {**(mine or {}), **part}
    return out


# the same, for flags and Python keywords (one namespace: no spelling stands for two keys)
FIELD_ALIASES = {alias: key for section in KEY_ALIASES.values() for alias, key in section.items()}


def own_keys(items: dict[str, Any], aliases: dict[str, str], label: str) -> dict[str, Any]:
    """``items`` under gpuplan's keys (``aliases``: a framework's spelling → the key); a key given in two spellings
    is refused, named by ``label`` formatted with the key ("layout.{}", "scenario field {!r}")."""
    out: dict[str, Any] = {}
    for key, value in items.items():
        own = aliases.get(key, key)
        if own in out:
            spelled = [k for k in items if aliases.get(k, k) == own]
            raise GpuplanError(f"{label.format(own)} is given twice ({' and '.join(spelled)}): give it once")
        out[own] = value
    return out


# flags (and API keywords) that are shorter than their key; every other flag is the key itself
SHORT_NAMES = {"price_per_gpu_hour": "price", "power_limit_w": "power_limit"}


def flag_keys() -> dict[str, str]:
    """Flag name (``gpu``, ``seq_len``; ``--seq-len`` on the command line) → dotted scenario key."""
    out = {"model": "model"}
    for section, keys in SECTIONS:
        for key in keys:
            out[SHORT_NAMES.get(key, key)] = f"{section}.{key}"
    return out


FLAG_KEYS = flag_keys()


# ---- what each key means: the flags' --help and the docs are generated from this table ----------------
@dataclass(frozen=True, slots=True)
class FieldDoc:
    """One scenario key, for its help line. Allowed values and the default come from the spec types
    (``Training``/``Layout`` Literal annotations and field defaults) unless given here: ``values`` for keys
    that name a catalogue entry or take a free form, ``default`` for a default that is a rule, not a value."""

    what: str
    unit: str = ""
    values: str = ""
    default: str = ""


RULE = "the default rule (the answer lists it under `assumed`)"
FIELD_DOCS: dict[str, FieldDoc] = {
    "model": FieldDoc("the model", values="a catalogue id (`gpuplan models`), a config.json path or {params: 7e9}",
                      default="none: required"),
    "hardware.gpu": FieldDoc("GPU type", values="a catalogue id or alias (`gpuplan gpus`), several comma-separated "
                             "for plan/fit, or inline {base: a10g, bf16_dense_tflops: 125}", default="none: required"),
    "hardware.gpus": FieldDoc("total GPU count", "GPUs", default="1 (plan and fit search it when not given)"),
    "hardware.gpus_per_node": FieldDoc("GPUs in one host (server/tray)", "GPUs", default="the GPU's usual node"),
    "hardware.scale_up": FieldDoc("fabric inside the scale-up domain (NVLink, Infinity Fabric)",
                                  values="a fabric id (`gpuplan fabrics`)", default="the GPU's own"),
    "hardware.scale_out": FieldDoc("network between nodes", values="a fabric id (`gpuplan fabrics`): ib-400g, "
                                   "roce-400g, eth-100g, ...", default=RULE),
    "hardware.price_per_gpu_hour": FieldDoc("rental price", "USD per GPU-hour", default="the catalogue's (dated)"),
    "hardware.power_limit_w": FieldDoc("board power cap", "W", default="the GPU's TDP"),
    "hardware.calibration": FieldDoc("correction factors fitted by `gpuplan calibrate`",
                                     values="true (the default store), false, or a store path", default="false"),
    "hardware.host_memory": FieldDoc("CPU memory per node, for offload", "bytes (e.g. 2TiB)",
                                     default="the GPU's reference node (DGX datasheets), else unchecked"),
    "training.seq_len": FieldDoc("sequence length", "tokens"),
    "training.global_batch": FieldDoc("sequences per optimizer step", "sequences", default=RULE),
    "training.global_batch_tokens": FieldDoc("tokens per optimizer step (instead of global_batch)", "tokens",
                                             default="none"),
    "training.tokens": FieldDoc("tokens to train (or steps)", "tokens (e.g. 1.4T)", default="none: no time to train"),
    "training.steps": FieldDoc("optimizer steps to train (or tokens)", "steps", default="none"),
    "training.precision": FieldDoc("number format; bf16 = mixed precision with fp32 master weights",
                                   default="bf16, or the framework's documented default (torchtune: bf16-pure)"),
    "training.optimizer": FieldDoc("optimizer (its states per parameter)"),
    "training.optimizer_impl": FieldDoc("optimizer kernel"),
    "training.method": FieldDoc("what is trained: all weights, or LoRA adapters over a 16-bit, 4-bit (QLoRA) or 8-bit "
                                "(lora-int8: LLM.int8, load_in_8bit) base"),
    "training.lora_rank": FieldDoc("LoRA adapter rank", "rank"),
    "training.lora_targets": FieldDoc("modules that get adapters", values="the model's module names (comma-separated; "
                                      "Megatron's linear_qkv…, NeMo's attention_qkv…, torchtune's output_proj read as "
                                      "the model's own), or all-linear", default="all-linear"),
    "training.attention": FieldDoc("attention kernel (flash: FlashAttention-2)"),
    "training.lora_dropout": FieldDoc("LoRA adapters' dropout probability (PEFT's and torchtune's default 0; a mask "
                                      "per adapter input)", "probability 0-1"),
    "training.preference": FieldDoc("a preference run on pairs — dpo, ipo (against a frozen reference model), orpo, "
                                    "simpo, cpo; its global_batch and micro_batch count pairs",
                                    values="dpo | ipo | orpo | simpo | cpo", default="none (supervised)"),
    "training.dora": FieldDoc("DoRA: LoRA adapters with weight-decomposed magnitudes (PEFT use_dora)",
                              values="true | false", default="false"),
    "training.dropout": FieldDoc("dropout probability (masks add activation memory)", "probability 0-1"),
    "training.trace_calibration": FieldDoc("activation factor from `gpuplan trace --calibrate`",
                                           values="true, false, or a file path", default="false"),
    "training.framework": FieldDoc("training software: what runs and how fast depends on it"),
    "training.kernels": FieldDoc("the model's kernels: framework (as the framework runs them) or liger (Liger "
                                 "Kernel's patch of a Hugging Face model: use_liger_kernel)"),
    "training.compile": FieldDoc("torch.compile: true compiles the model and its loss (the fp32 logits never "
                                 "materialised), model the model only", values="true | false | model"),
    "training.fp8_recipe": FieldDoc("fp8 scaling recipe (precision fp8): checked against the framework, exported",
                                    default=RULE),
    "training.moe_dispatcher": FieldDoc("a MoE layer's expert exchange: alltoall (an NCCL all-to-all: Megatron-Core's "
                                        "alltoall dispatcher, torchtitan) or deepep (DeepEP's kernels: Megatron-Core's "
                                        "flex dispatcher, DeepSeek-V3)",
                                        default="deepep under DualPipe, else alltoall"),
    "training.grad_dtype": FieldDoc("gradient dtype under bf16/fp8 mixed precision: fp32 (Megatron's main grads, "
                                    "autocast) or the parameters' 16-bit dtype", default=RULE),
    "training.optimizer_in_backward": FieldDoc("each parameter's optimizer step in backward, its gradient freed "
                                               "(torchtune optimizer_in_bwd): no gradient accumulation, no pipeline",
                                               default="false"),
    "training.activation_offloading": FieldDoc("saved activations to host memory in forward, back in backward "
                                               "(torchtune enable_activation_offloading, Megatron-Core "
                                               "cpu_offloading): no pipeline", default="false"),
    "training.expandable_segments": FieldDoc("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching "
                                             "allocator reserves ~5 % beyond the allocated peak; off (PyTorch's "
                                             "default), recompute, offload or LoRA make it ~19 %, up to 52 % measured",
                                             default="what the framework sets (torchtitan, torchtune, Unsloth, "
                                                     "llm-foundry, NeMo: true; others false)"),
    "training.tf32": FieldDoc("precision fp32 with its matmuls on the TF32 tensor cores (torch.backends.cuda.matmul."
                              "allow_tf32; the precision word tf32 sets it)", default="false: PyTorch's default"),
    "training.cuda_graphs": FieldDoc("CUDA graphs replayed each step — layer: per layer or module (Transformer "
                                     "Engine make_graphed_callables, Megatron --cuda-graph-impl transformer_engine|"
                                     "local, NeMo enable_cuda_graph); full: the whole iteration (--cuda-graph-impl "
                                     "full_iteration). Their buffers are not modelled: the peak's upper end carries "
                                     "the documented allowance", values="none | layer | full (true: layer)",
                                     default="none"),
    "training.headroom": FieldDoc("share of GPU memory kept free: `fits` means fits with this margin",
                                  "fraction of capacity (0-1)"),
    "layout.dp": FieldDoc("data-parallel degree", "ranks", default="derived: gpus / (tp·pp·cp)"),
    "layout.tp": FieldDoc("tensor-parallel degree", "ranks", default="1 (plan searches it)"),
    "layout.pp": FieldDoc("pipeline-parallel stages", "ranks", default="1 (plan searches it)"),
    "layout.cp": FieldDoc("context-parallel degree", "ranks", default="1 (plan searches it)"),
    "layout.ep": FieldDoc("expert-parallel degree (MoE)", "ranks", default="1 (plan searches it)"),
    "layout.etp": FieldDoc("the experts' tensor-parallel degree (MoE): 1 (parallel folding) or tp", "ranks",
                           default="tp where ep divides dp×cp, else 1"),
    "layout.zero": FieldDoc("ZeRO stage; 3 = FSDP full shard", values="0, 1, 2, 3"),
    "layout.zero_group": FieldDoc("hybrid shard: ranks sharing one copy of the state", "ranks",
                                  default="none: all dp×cp ranks"),
    "layout.micro_batch": FieldDoc("sequences per GPU per forward/backward", "sequences", default=RULE),
    "layout.recompute": FieldDoc("activation recomputation", default=RULE),
    "layout.recompute_every": FieldDoc("with recompute full: recompute every k-th block only (torchtitan selective "
                                       "layer AC; Megatron's block method)", "blocks", default="1 (every block)"),
    "layout.recompute_modules": FieldDoc("with recompute selective: the modules recomputed (Megatron-Core "
                                         "--recompute-modules)", values="comma-separated: core_attn, moe_act, "
                                         "layernorm, mla_up_proj, mlp, moe, shared_experts",
                                         default="core_attn (Megatron-Core's default)"),
    "layout.sequence_parallel": FieldDoc("Megatron sequence parallelism", default="true when tp > 1"),
    "layout.pp_schedule": FieldDoc("pipeline schedule"),
    "layout.virtual_stages": FieldDoc("model chunks per pipeline stage (interleaved)", "chunks",
                                      default="2 with the interleaved schedule, else 1"),
    "layout.offload": FieldDoc("CPU offload"),
    "layout.dp_overlap": FieldDoc("gradient reduction overlapped with backward"),
    "layout.zero3_gather": FieldDoc("ZeRO-3 parameter gathers: per block (FSDP), per submodule (DeepSpeed), per "
                                    "tensor, blocking"),
    "layout.tp_overlap": FieldDoc("tensor-parallel collectives overlapped with matmuls (async TP)"),
    "layout.ep_overlap": FieldDoc("expert all-to-all overlapped with another micro-batch's compute"),
}


def _spec_field(key: str) -> tuple[Any, Any]:
    """(annotation, default) of the spec dataclass field behind ``training.X`` / ``layout.X``; (None, MISSING)
    for any other key."""
    section, _, name = key.partition(".")
    cls = {"training": Training, "layout": Layout}.get(section)
    if cls is None:
        return None, MISSING
    for f in fields(cls):
        if f.name == name:
            return get_type_hints(cls)[name], f.default
    return None, MISSING


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return "none"
    return ",".join(v) if isinstance(v, tuple) else str(v)


def _more_values(key: str) -> str:
    """Words a key accepts beyond its spec type's values (catalog/stacks.json): the stacks read as a framework
    profile, the frameworks' own words for a precision, libraries' words for an optimizer. Read when help is asked,
    not at import."""
    if key not in ("training.framework", "training.precision", "training.optimizer"):
        return ""
    from gpuplan.catalog.stacks import optimizer_words, precision_words, stack_names

    if key == "training.framework":
        return "; or a stack read as its profile (the answer says so): " + " | ".join(stack_names())
    if key == "training.optimizer":
        return "; or a library's word, read as the optimizer it runs (Hugging Face optim, torch.optim classes): " + \
            " | ".join(optimizer_words())
    return "; or a framework's own word, read as what it means there (torchtune's bf16 is bf16-pure): " + \
        " | ".join(precision_words())


def field_help(key: str) -> str:
    """The help line of a scenario key: what it is, its allowed values, its default and its unit."""
    doc = FIELD_DOCS[key]
    hint, default = _spec_field(key)
    values = doc.values
    literal = hint if get_origin(hint) is Literal else \
        next((a for a in get_args(hint) if get_origin(a) is Literal), None)  # Literal[...] | None
    if not values and literal is not None:
        values = " | ".join(get_args(literal)) + _more_values(key)
    elif not values and hint is bool:
        values = "true | false"
    shown = doc.default or (_show(default) if default is not MISSING else "")
    parts = [doc.what]
    if values:
        parts.append(f"values: {values}")
    if shown:
        parts.append(f"default: {shown}")
    if doc.unit:
        parts.append(f"unit: {doc.unit}")
    return "; ".join(parts) + f" [{key}]"


# a key that means a different field to each framework: its error asks which (nanoGPT's and torchtune's batch_size is
# per GPU, a paper's "batch size" is the global batch)
AMBIGUOUS_KEYS = {"batch_size": "training.global_batch (sequences per optimizer step) or layout.micro_batch "
                                "(sequences per GPU per forward/backward)"}


def homes(key: str, where: str) -> list[tuple[str, str]]:
    """The sections other than ``where`` that hold ``key`` — as gpuplan spells it or as a framework does
    (``KEY_ALIASES``) —, each as (section, gpuplan's key)."""
    return [(name, KEY_ALIASES.get(name, {}).get(key, key)) for name, keys in SECTIONS
            if name != where and KEY_ALIASES.get(name, {}).get(key, key) in keys]


def unknown_key(key: str, allowed: tuple[str, ...], where: str) -> str:
    """The error for ``where.key``: which field an ambiguous key could be, the section a key of another belongs in,
    else the section's keys."""
    if key in AMBIGUOUS_KEYS:
        return f"{where}.{key} means different things in different frameworks: give {AMBIGUOUS_KEYS[key]}"
    for name, own in homes(key, where)[:1]:
        spelled = f" (as {own})" if own != key else ""
        return f"{where}.{key} is a {name} key: put it under {name}{spelled}"
    near = [(f"{where}.", k) for k in difflib.get_close_matches(key, allowed, n=1, cutoff=0.8)] or \
        [(f"{name}.", k) for name, keys in SECTIONS if name != where
         for k in difflib.get_close_matches(key, keys, n=1, cutoff=0.8)][:1]
    hint = f"did you mean {near[0][0]}{near[0][1]}? " if near else ""
    return f"unknown key {where}.{key}: {hint}valid keys are {', '.join(allowed)}"
