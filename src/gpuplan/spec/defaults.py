"""The one rule for what a scenario leaves open, the same in every command and in the Python API,
and the list of what it filled in (the answers' ``"assumed"``).

- training.global_batch: ~4M tokens per step (``DEFAULT_BATCH_TOKENS``), in whole sequences, a
  multiple of dp × micro_batch (at least one sequence per data-parallel rank); a fine-tune (``is_fine_tune``:
  LoRA/QLoRA, or a full fine-tune of at most ``FINE_TUNE_TOKENS``) takes ``FINE_TUNE_BATCH`` sequences, as
  fine-tuning recipes do;
- training.seq_len, precision, optimizer, framework, headroom: the Training defaults (spec/job.py); an open
  precision under a framework whose documented default differs (torchtune: bf16-pure) takes that default, and on a
  GPU without bf16 tensor cores (V100, T4: ``GPU.lacks_bf16``) is fp16 mixed precision (io/words.py);
- words read as something else (a stack's name as its profile, a framework's precision word as what it
  means there: catalog/stacks.py) are listed too, though given;
- training.fp8_recipe (precision fp8): the framework's documented default, else tensorwise;
- training.grad_dtype (bf16/fp8 mixed precision): the framework's documented choice, fp32 when none is named;
- hardware.gpus_per_node, scale_up, scale_out, price: the GPU's catalogue entry (catalog/gpus.json);
- layout fields: ``evaluate`` completes them with Layout's defaults (dp derived, micro_batch 1,
  recompute none, zero 0 — the documented stage of a framework named directly, 3 for torchtitan, torchtune and
  PyTorch FSDP: model/estimate.py ``completed_layout`` —, sequence parallel when tp > 1, interleaving with 2
  chunks), then reads the open ones as the run the rest describes (model/: zero_open, recompute_open,
  micro_batch_open with a given global batch, tp_open, batch_split where the batch cannot split over the GPUs as
  replicas), each listed with its rule; ``plan``,
  ``fit`` and ``export`` search them instead (listed as ``"searched"``, not assumed).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError
from gpuplan.spec.job import Training, moe_dispatcher_of
from gpuplan.spec.layout import Layout

if TYPE_CHECKING:
    from gpuplan.spec.scenario import Scenario

# Llama 2 and Llama 3 pre-trained with ~4M-token batches (Touvron et al. 2023, Table 1; Dubey et
# al. 2024, Sec. 3.4.1: 4M tokens at first); GPT-3 175B used 3.2M (Brown et al. 2020, Table 2.1).
DEFAULT_BATCH_TOKENS = 4 * 2**20

# A fine-tune's step is sequences, not millions of tokens: torchtune's Llama 3.1 8B QLoRA and LoRA recipes
# run batch_size 2 × gradient_accumulation_steps 16 = 32 sequences (recipes/configs/llama3_1/
# 8B_qlora_single_device.yaml); the QLoRA paper used 16 for 7B/13B, 32 for 33B, 64 for 65B (Dettmers et
# al. 2023, arXiv:2305.14314, Table 9).
FINE_TUNE_BATCH = 32
# A full-parameter run of at most this many tokens is a fine-tune (instruction tuning, domain adaptation):
# Llama 2-Chat's SFT was 27,540 annotations (Touvron et al. 2023, Sec. 3.1); pre-training runs are 10^11
# tokens and up (Llama 2: 2T, Table 1).
FINE_TUNE_TOKENS = 1e9


# Throughputs within 1 % are one speed to the model (its kernel and collective tables are 5-10 % accurate:
# `gpuplan validate --components`): the planner ranks such ties by cost, and names no "faster" alternative in them
SAME_SPEED = 0.01


def is_fine_tune(training: Training) -> bool:
    """An adapter run (LoRA/QLoRA), a run with the optimizer in backward (torchtune's fine-tuning recipes), or a
    full-parameter run of at most ``FINE_TUNE_TOKENS``."""
    if training.method != "full" or training.optimizer_in_backward:
        return True
    return training.tokens is not None and training.tokens <= FINE_TUNE_TOKENS

_TRAINING_RULES = {
    "seq_len": "the default sequence length",
    "precision": "bf16 mixed precision: bf16 compute, fp32 master weights and optimizer states",
    "optimizer": "AdamW",
    "framework": "the typical stack when none is named: Hugging Face transformers model code in eager PyTorch, "
                 "fp32 gradients (catalog/frameworks.json generic); the answer says how a named one would change it",
    "headroom": "share of GPU memory kept free when deciding what fits",
}
_TRAINING_DEFAULTS = {f.name: f.default for f in fields(Training)}
_GPUS_RULE = ("one GPU: evaluate answers the configuration it is given; `gpuplan fit` finds the smallest count on "
              "which the run fits, `gpuplan plan` the count to buy (give hardware.gpus to evaluate another)")
_HARDWARE_RULES = {
    "gpus_per_node": "the GPU's usual node (catalogue)",
    "scale_up": "the GPU's own fabric inside a node (catalogue)",
    "scale_out": "the GPU's usual cluster network (catalogue: the Ethernet of the instances PCIe and consumer "
                 "cards come in, else InfiniBand NDR 400G)",
    "price_per_gpu_hour": "the catalogue's dated price",
    "host_memory": "the CPU memory of the GPU's reference node per GPU, times the GPUs per node (catalogue: the "
                   "DGX / NVL72 / GH200 datasheets); what offloaded state must fit in",
}


# A peak within this share over the capacity may still run with memory savers that published runs use
# and gpuplan does not represent (an estimate's Note.NEAR_CAPACITY; report/words.py names the savers:
# Llama 3 405B as published, tp 8 pp 16 without activation checkpointing, is predicted 4-10 % over an
# 80 GB H100).
NOT_MODELLED_MARGIN = 0.15


def unmodelled_savers(precision: str, mla: bool, pp: int) -> tuple[str, ...]:
    """Which of those savers a run could use (report/words.py says each): fp8 activation caching in an fp8 run,
    recomputing only the norms and MLA up-projections in an MLA model, per-stage tuning of a pipeline."""
    return tuple(k for k, on in (("fp8_activations", precision == "fp8"), ("mla_recompute", mla),
                                  ("pipeline_tuning", pp > 1)) if on)

MAX_GPUS = 16384  # the largest count an open search tries unless --max-gpus says otherwise


def gpu_limit(sc: Scenario, max_gpus: int | None) -> tuple[int, int | None]:
    """(largest count to search, the fixed count or None). A given ``hardware.gpus`` is the answer's
    count (the search below it is context); ``max_gpus`` bounds only an open count, and one below a
    fixed count contradicts it."""
    if "hardware.gpus" in sc.given:
        n = sc.hardware.gpus
        if max_gpus is not None and max_gpus < n:
            raise GpuplanError(f"--max-gpus {max_gpus} is below the fixed hardware.gpus = {n}: --max-gpus bounds "
                               "only an open count; drop one of the two")
        return n, n
    return (MAX_GPUS if max_gpus is None else max_gpus), None


def default_global_batch(training: Training, replicas: int = 1) -> int:
    """Sequences per optimizer step: as given, else ~4M tokens rounded down to a multiple of
    ``replicas`` (dp × micro_batch), and at least one sequence per replica."""
    if training.global_batch is not None:
        return training.global_batch
    if is_fine_tune(training):
        return max(replicas, FINE_TUNE_BATCH // replicas * replicas)
    seqs = max(1, DEFAULT_BATCH_TOKENS // training.seq_len)
    return max(replicas, seqs // replicas * replicas)


def _documented_rules(training: Training) -> list[tuple[str, str]]:
    """The training fields a framework's documentation filled in (catalog/frameworks.py ``documented_defaults``)."""
    out = []
    if training.precision == "fp8":
        out.append(("fp8_recipe", "the framework's documented default (frameworks.json fp8_recipe), else tensorwise"))
    if training.grad_dtype is not None:
        out.append(("grad_dtype", "the framework's documented gradient dtype (frameworks.json memory.grad_dtype); "
                                  "with no framework named, fp32 — the common choice (Megatron-LM, PyTorch autocast)"))
    if training.precision == "fp32" and not training.tf32:
        out.append(("tf32", "off, PyTorch's default since 1.12 (torch.backends.cuda.matmul.allow_tf32 = False): fp32 "
                            "matmuls on the vector units at the fp32 peak; precision: tf32 runs them on the TF32 "
                            "tensor cores"))
    if training.expandable_segments is not None:
        out.append(("expandable_segments", "what the framework's launcher sets (frameworks.json memory."
                                           "expandable_segments); PyTorch's default is off, where recomputation, "
                                           "offload or LoRA fragment the allocator (model/allocator.py)"))
    return out


def assumed(sc: Scenario, training: Training, layout: Layout | None, searched: bool,
            layout_rules: tuple[tuple[str, str], ...] = ()) -> list[dict[str, Any]]:
    """``{"field", "value", "rule"}`` for every value the answer used that the input did not give.
    ``searched``: the layout was chosen by a search (then its fields are not assumptions); ``layout_rules``: the
    rule of a layout field a rule set (model/estimate.py: a framework's documented default, a needed recompute)."""
    given, hw, read = sc.given, sc.hardware, {f for f, *_ in sc.read_as}  # read: from a word or recipe, said below
    out: list[dict[str, Any]] = []
    if "training.global_batch" not in given and training.global_batch is not None:
        out.append(_batch_assumed(sc, training, layout, searched))
    for key, rule in _TRAINING_RULES.items():
        if f"training.{key}" not in given and f"training.{key}" not in read:
            if key == "precision" and training.precision == "fp16" and hw.gpu.lacks_bf16:
                rule = (f"{hw.gpu.id} has no bf16 tensor cores: fp16 mixed precision (fp32 master weights, dynamic "
                        "loss scaling), what training on it runs")
            elif key == "seq_len" and training.seq_len != _TRAINING_DEFAULTS["seq_len"]:
                rule = (f"{sc.model.name}'s learned position table: {training.seq_len:,} positions, the longest "
                        f"sequence it trains at as built (the default {_TRAINING_DEFAULTS['seq_len']:,} is longer)")
            elif key == "precision" and training.precision != _TRAINING_DEFAULTS["precision"]:
                rule = (f"{training.framework}'s documented default precision "
                        "(catalog/frameworks.json defaults.precision)")
            out.append({"field": f"training.{key}", "value": getattr(training, key), "rule": rule})
    out += [{"field": f, "value": v, "rule": r, "given": w} for f, w, v, r in sc.read_as]
    told = given | read  # given, or read from a word (listed above with its rule)
    out += [{"field": f"training.{key}", "value": getattr(training, key), "rule": rule}
            for key, rule in _documented_rules(training) if f"training.{key}" not in told]
    values = {"gpus_per_node": hw.gpus_per_node, "scale_up": hw.scale_up.id,
              "scale_out": hw.scale_out.id if hw.scale_out is not None and hw.nodes > 1 else None,
              "price_per_gpu_hour": hw.price_per_gpu_hour, "host_memory": hw.host_memory_bytes}
    if "hardware.gpus" not in given and "hardware.gpus" not in read and not searched:  # a search chose the count
        out.append({"field": "hardware.gpus", "value": hw.gpus, "rule": _GPUS_RULE})
    for key, rule in _HARDWARE_RULES.items():
        if f"hardware.{key}" not in given and values[key] is not None:
            if key == "gpus_per_node" and hw.gpus_per_node != hw.gpu.gpus_per_node:
                rule = (f"{hw.gpus} GPUs are no whole number of the GPU's usual {hw.gpu.gpus_per_node}-GPU nodes: "
                        f"{hw.nodes} nodes of {hw.gpus_per_node} (4-GPU boards: HGX A100/H100 4-GPU; Perlmutter, "
                        "Polaris, Leonardo and JUWELS Booster run 4 A100s a node) — give gpus_per_node to change it")
            if key == "scale_out" and hw.gpu.scale_out_source and hw.scale_out.id == hw.gpu.scale_out:
                rule = f"the network the GPU's nodes usually have (catalogue): {hw.gpu.scale_out_source}"
            m = hw.market
            if key == "price_per_gpu_hour" and m is not None:
                rule = (f"the price catalogue's cheapest {m.pricing.replace('_', '-')} price for {hw.gpu.id} "
                        f"asked: {m.provider} {m.region}, read {m.date}")
            out.append({"field": f"hardware.{key}", "value": values[key], "rule": rule})
    out += _dispatcher_assumed(sc, training, layout, told) if layout is not None else []
    if layout is not None and not searched:
        out += _layout_assumed(sc, layout, layout_rules)
    return out


def _batch_assumed(sc: Scenario, training: Training, layout: Layout | None, searched: bool) -> dict[str, Any]:
    """The assumed global batch and its rule — a preference run's in pairs, as its input counts them."""
    given, hw = sc.given, sc.hardware
    fixed = sc.layout.get("dp", 1) * sc.layout.get("micro_batch", 1)
    plain = default_global_batch(replace(training, global_batch=None), fixed)
    rule = ("one micro-batch per step, dp × micro_batch: the optimizer in backward accumulates no gradients"
            if training.optimizer_in_backward and layout is not None
            and training.global_batch == layout.dp * layout.micro_batch else
            f"the default of {plain} sequences splits over no layout of the given {hw.gpus} GPUs (each "
            "data-parallel replica takes an equal share): the nearest batch that keeps most layouts "
            f"and micro-batches of {hw.gpus} GPUs (search/batch.py)"
            if searched and layout is None and "hardware.gpus" in given and training.global_batch != plain else
            f"a fine-tune's batch: {FINE_TUNE_BATCH} sequences per step, as torchtune's LoRA/QLoRA recipes "
            "(a multiple of dp × micro_batch)" if is_fine_tune(training) else
            f"~{DEFAULT_BATCH_TOKENS / 2**20:.0f}M tokens per step ({training.global_batch} × "
            f"{training.seq_len} tokens), a multiple of dp × micro_batch")
    pair = 2 if training.preference else 1
    return {"field": "training.global_batch", "value": training.global_batch // pair,
            "rule": rule + (" — in sequences; half as many pairs" if pair == 2 else "")}


def _dispatcher_assumed(sc: Scenario, training: Training, layout: Layout, told: set[str]) -> list[dict[str, Any]]:
    """The expert exchange a MoE layout with expert parallelism makes when the input does not name one."""
    if layout.ep == 1 or not sc.model.n_experts or "training.moe_dispatcher" in told:
        return []
    dualpipe = layout.pp_schedule == "dualpipe"
    return [{"field": "training.moe_dispatcher", "value": moe_dispatcher_of(training, layout.pp_schedule),
            "rule": "DualPipe is DeepSeek-V3's schedule, run with its own expert kernels (DeepEP: a token crosses the "
                    "network once per node it reaches)" if dualpipe else
                    "an NCCL all-to-all of the permuted tokens, as Megatron-Core's alltoall dispatcher and torchtitan "
                    "exchange them (deepep: DeepEP's kernels, Megatron-Core's flex dispatcher)"}]


_DERIVED = {"dp": "derived: gpus / (tp·pp·cp)",
            "etp": "derived: tp where ep divides dp×cp, else 1 (Megatron-Core MoE parallel folding)",
            "recompute_modules": "selective recomputation of the attention core (Megatron-Core's default list, "
                                 "core_attn)"}


def _layout_assumed(sc: Scenario, layout: Layout, layout_rules: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    """The layout fields the input left open: each rule a field's value came by (``by_rule``: a framework's documented
    stage, the recomputation the layout needs — model/estimate.py), else derived or the layout default."""
    out = []
    for f in fields(Layout):
        if f.name == "recompute_modules" and layout.recompute != "selective":  # read by selective recompute only
            continue
        if f.name not in sc.layout:
            ruled = dict(layout_rules).get(f.name)
            rule = ruled or _DERIVED.get(f.name, "the layout default")
            value = layout.expert_tp if f.name == "etp" else getattr(layout, f.name)
            out.append({"field": f"layout.{f.name}", "value": value, "rule": rule,
                        **({"by_rule": True} if ruled else {})})
    return out


def searched_fields(sc: Scenario) -> list[str]:
    """The layout fields a search chose (everything the scenario's layout does not fix)."""
    return [f"layout.{f.name}" for f in fields(Layout) if f.name not in sc.layout
            and f.name not in ("etp", "recompute_modules")]
