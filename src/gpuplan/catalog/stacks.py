"""The words a user has for the training software and its precision (``stacks.json``), read once when a
scenario is parsed.

* A stack without a profile of its own (Hugging Face Trainer, Lightning, Axolotl, Unsloth, NeMo, ...) is
  run by one of ``frameworks.json``'s profiles underneath: ``training.framework: lightning`` is read as
  ``pytorch-fsdp``, and the answer says so (``Reading``, listed under ``assumed``).
* A framework's own word for a precision means what that framework does: ``precision: bf16`` under
  ``framework: torchtune`` is torchtune's pure bf16 (``bf16-pure``), not gpuplan's mixed ``bf16``;
  ``bf16-true`` (Lightning), ``amp_bf16`` (Composer) and the like are read as the precision they name.
* A library's word for an optimizer means the optimizer it runs: Hugging Face Trainer's ``optim`` names
  (``adamw_torch_fused``, ``paged_adamw_8bit``), torch.optim and bitsandbytes class paths (torchtune's configs).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpuplan.catalog import load_json, without_remarks
from gpuplan.errors import GpuplanError
from gpuplan.spec import ATTENTIONS, FP8_RECIPES, FRAMEWORKS, OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """How a word of the input was read: the field, the word given, the value it stands for, the cited rule."""

    field: str
    given: str
    value: str
    rule: str


@cache
def _data() -> dict[str, Any]:
    data: dict[str, Any] = load_json("stacks.json")
    for name, row in data["stacks"].items():
        if row["profile"] not in FRAMEWORKS or name in FRAMEWORKS:
            raise GpuplanError(f"stacks.json: stack {name} must map a new name to a profile of {', '.join(FRAMEWORKS)}")
    for words in data["precision_words"].values():
        for word, row in words.items():
            if row["precision"] not in PRECISIONS or row.get("fp8_recipe", "delayed") not in FP8_RECIPES:
                raise GpuplanError(f"stacks.json: precision word {word} must mean one of {', '.join(PRECISIONS)} "
                                   f"(and an fp8 recipe one of {', '.join(FP8_RECIPES)})")
    for word, row in data.get("attention_words", {}).items():
        if row["attention"] not in ATTENTIONS:
            raise GpuplanError(f"stacks.json: attention word {word} must mean one of {', '.join(ATTENTIONS)}")
    for word, row in data["optimizer_words"].items():
        if row["optimizer"] not in OPTIMIZERS or row.get("impl", "fused") not in OPTIMIZER_IMPLS:
            raise GpuplanError(f"stacks.json: optimizer word {word} must mean one of {', '.join(OPTIMIZERS)}")
    return data


@cache
def _names() -> dict[str, str]:
    """Every accepted spelling of a stack (its name and aliases) → the stack's name."""
    out: dict[str, str] = {}
    for name, row in _data()["stacks"].items():
        for word in (name, *row["aliases"]):
            out[word] = name
    return out


def runs_profile_defaults(word: str) -> bool:
    """Whether the stack a ``training.framework`` word names runs its profile's documented layout defaults
    (stacks.json ``profile_defaults``: Composer, a loop of one's own on FSDP, NeMo AutoModel, verl, metaseq shard
    fully as the FSDP profiles do); a profile's own name does too."""
    name = named_stack(word)
    if name is None or name in FRAMEWORKS:
        return name is not None
    stack = _names()[name]
    return bool(_data()["stacks"][stack].get("profile_defaults"))


def stack_layout_defaults(word: str) -> dict[str, tuple[Any, str]]:
    """A stack's own documented layout defaults (stacks.json ``layout_defaults``: NeMo's distributed optimizer, ZeRO
    1) as field → (value, source); empty for a profile's own name or a stack without them."""
    stack = _names().get(named_stack(word) or "")
    if stack is None:
        return {}
    rows = _data()["stacks"][stack].get("layout_defaults", {})
    return {k: (row["value"], row["source"]) for k, row in rows.items()}


def stacks_table(name: str) -> dict[str, Any]:
    """A top-level table of stacks.json by name (``lora_defaults``: catalog/lora_defaults.py reads it)."""
    return _data().get(name, {})


def stack_allocator(word: str) -> tuple[bool, str] | None:
    """Whether a stack's launcher maps expandable segments where that differs from its profile (stacks.json
    ``expandable_segments``), with the source; None for a profile's own name or a stack that states nothing."""
    stack = _names().get(named_stack(word) or "")
    row = _data()["stacks"][stack].get("expandable_segments") if stack is not None else None
    return None if row is None else (bool(row["value"]), str(row["source"]))


def stack_names() -> tuple[str, ...]:
    """The stacks ``training.framework`` accepts besides the profiles, in the file's order."""
    return tuple(_data()["stacks"])


def attention_words() -> dict[str, dict[str, str]]:
    """stacks.json ``attention_words``: a word for an attention kernel → the attention it means, why, the source."""
    return _data().get("attention_words", {})


def precision_words() -> tuple[str, ...]:
    """The framework words ``training.precision`` accepts besides gpuplan's own precisions."""
    return tuple(dict.fromkeys(w for words in _data()["precision_words"].values() for w in words
                               if w not in PRECISIONS))


def spelling(word: str, version: bool = False) -> str:
    """A word as the names are spelled: lower case, spaces, underscores, brackets, commas and slashes as one hyphen
    ("AdamW (fused)" → adamw-fused); ``version``: a trailing version number dropped ("Megatron Core",
    "megatron_core 0.12", "NeMo-2.0", "DeepSpeed v0.14" → megatron-core, nemo, deepspeed)."""
    key = re.sub(r"[\s_()\[\],/]+", "-", word.strip().lower()).strip("-")
    return (re.sub(r"-v?\d+(\.\d+)*$", "", key) or key) if version else key


def read_framework(word: str) -> tuple[str, Reading | None]:
    """The profile a ``training.framework`` word names, and how it was read when it is a stack's name."""
    if word in FRAMEWORKS:
        return word, None
    key = spelling(word, version=True)
    if key in FRAMEWORKS:
        return key, (None if key == word.strip().lower() else
                     Reading(field="training.framework", given=word, value=key, rule=f"{word} read as {key}"))
    stack = _versioned(word, _names().get(key))
    if stack is None:
        return _unknown_framework(word, key)
    row = _data()["stacks"][stack]
    rule = f"{word} has no profile of its own: {row['uses']}; read as the {row['profile']} profile ({row['source']})"
    return row["profile"], Reading(field="training.framework", given=word, value=row["profile"], rule=rule)


# who publishes a stack, as run descriptions prefix its name ("Microsoft DeepSpeed", "NVIDIA Megatron-LM")
VENDORS = ("hugging face", "huggingface", "microsoft", "nvidia", "meta", "facebook", "mosaicml", "mosaic ml",
           "pytorch", "google", "eleutherai", "databricks", "bytedance", "alibaba")


# a training method's words in a run's description of its stack ("HF Trainer + LoRA", "FSDP-QLoRA"): they name the
# method (training.method), not the stack
METHOD_PARTS = frozenset({"lora", "qlora", "dora", "sft", "fft", "rslora", "pissa", "fine", "tuning", "finetuning",
                          "finetune", "full", "pretraining", "pretrain", "int8", "8bit"})  # not "peft": also the HF
# stack's alias


# names of stacks that are also everyday words of a run's description: one of them alone names nothing
COMMON_WORDS = ("trainer", "transformers", "pytorch", "fabric", "hf", "tf", "mosaic", "swift", "fsdp")
CLIENTS = ("pytorch-fsdp", "hf-trainer", "generic")  # a run naming one beside an engine (DeepSpeed) runs the engine


@cache
def _all_names() -> dict[str, str]:
    """Every name ``training.framework`` accepts as it is (profiles, stacks, their aliases) → profile or stack."""
    return {**{f: f for f in FRAMEWORKS}, **_names()}


@cache
def _names_by_words() -> dict[frozenset[str], str]:
    """The accepted names by the set of their words ("megatron-deepspeed" as {megatron, deepspeed})."""
    return {frozenset(n.split("-")): n for n in _all_names()}


def _named(text: str) -> str | None:
    """The catalogued name ``text`` gives, read as run descriptions write one: with its publisher before it, a
    note in brackets after it ("Axolotl (FSDP)"), its words in another order ("DeepSpeed-Megatron") or as one
    of its words ("JAX/Pax", "OPT metaseq")."""
    text = re.sub(r"\(.*?\)", " ", text.lower())
    names = _all_names()
    bare = spelling(" ".join(w for w in re.split(r"[-\s/+]+", text) if w not in METHOD_PARTS), version=True)
    if bare in names:  # "Hugging Face LoRA", "FSDP-QLoRA": the name as it reads without its method's words
        return bare
    for vendor in VENDORS:
        text = re.sub(rf"\b{vendor}\b", " ", text)
    key = spelling(text, version=True)
    if key in names:
        return key
    words = [w for w in re.split(r"[-\s/+]+", key) if w and w not in METHOD_PARTS] or [key]
    if frozenset(words) in _names_by_words():
        return _names_by_words()[frozenset(words)]
    found = [w for w in words if w in names and w not in COMMON_WORDS]  # "Axolotl DeepSpeed": the engine it names
    return next((w for w in found if read_framework(w)[0] not in CLIENTS), found[0] if found else None)


def _described(word: str, key: str) -> tuple[str | None, str]:
    """The catalogued name (profile or stack) a description of a stack not in the catalogue gives, and how: the
    stacks it names ("HF Trainer + DeepSpeed": the engine that runs the step), the stack its sharding words imply
    ("ZeRO-2", "FSDP FULL_SHARD"), or one close spelling of a name; (None, "") where it gives none."""
    words = sharding_words(word)
    rest = " ".join(w for w in words.rest.split() if w not in METHOD_PARTS)
    parts = re.split(r"\+|&|,|\(|\)|\bwith\b|\bon\b|\bvia\b|\bover\b", word.lower())
    named = [n for part in parts if (n := _named(sharding_words(re.sub(r"\(.*?\)", " ", part)).rest))
             is not None]
    engines = [n for n in named if read_framework(n)[0] not in CLIENTS] or named
    stack = engines[0] if engines else (words.stack if words.stack is not None and not rest else None)
    if stack is not None:  # "DeepSpeed ZeRO-Offload", "ZeRO-2", "FSDP FULL_SHARD", "HF Trainer + DeepSpeed"
        how = (", its sharding or offload into the layout" if words.stage is not None or words.offload else "") + \
            (f"; of the stacks it names, {stack} runs the step" if len(set(named)) > 1 else "")
        return stack, how
    names = _all_names()
    close = difflib.get_close_matches(key, names, n=2, cutoff=0.85)
    if len(close) == 1 or (close and names[close[0]] == names[close[1]]):
        return close[0], "close"
    return None, ""


def named_stack(word: str) -> str | None:
    """The catalogued name — a profile or a stacks.json stack — a ``training.framework`` word is read as (its own
    name, an alias, or what its description names: ``_described``); None where it is read as the typical stack."""
    key = spelling(word, version=True)
    if key in FRAMEWORKS:
        return key
    stack = _names().get(key)
    if stack is None:
        stack = _described(word, key)[0]
    return _versioned(word, _names().get(stack or "", stack))


def _versioned(word: str, stack: str | None) -> str | None:
    """``stack``, or the earlier stack the version written right after one of its names in ``word`` names
    (stacks.json ``earlier``: "NeMo 1.23", "NeMo 24.07 + LoRA", "nemo_toolkit==1.23.0" — a toolkit version below 2.0,
    a container tag below 24.09 — are NeMo 1; Megatron-Bridge 0.x, not one of the names, is not)."""
    row = _data()["stacks"].get(stack or "", {}).get("earlier")
    if row is None:
        return stack
    names = "|".join(re.escape(n) for n in sorted(row["names"], key=len, reverse=True))
    found = re.search(rf"(?:^|-)(?:{names})[-=]*v?(\d+(?:\.\d+)*)(?![\d.])", spelling(word))
    if found is None:
        return stack
    version = tuple(int(x) for x in found[1].split("."))
    below = tuple(row["container_below"] if version[0] >= 20 else row["version_below"])
    version += (0,) * (len(below) - len(version))  # "NeMo 2" is 2.0, not below it
    return str(row["stack"]) if version < below else stack


def _unknown_framework(word: str, key: str) -> tuple[str, Reading]:
    """A stack not in the catalogue: a misspelling of a name it has (one close spelling) is read as that name;
    any other (a loop of one's own, a framework not catalogued) runs as the typical stack, ``generic`` — said under
    ``assumed`` with the names that have a profile, never refused (issue 21: a stack without a profile maps to a
    documented one, with a note)."""
    stack, how = _described(word, key)
    if stack is not None:
        stack = _versioned(word, _names().get(stack, stack))  # "NeMo 24.07 + LoRA": NeMo 1
        found, _ = read_framework(stack)
        rule = f"{word!r} is not a catalogued stack; read as its closest name, {stack}" if how == "close" else \
            f"{word!r} read as {stack} ({found}){how}"
        return found, Reading(field="training.framework", given=word, value=found, rule=rule)
    return "generic", Reading(field="training.framework", given=word, value="generic",
                              rule=f"{word!r} is not a catalogued stack: the typical stack (generic: Hugging Face "
                                   f"model code in eager PyTorch) is assumed; name one of {', '.join(FRAMEWORKS)} "
                                   f"or a stack built on one ({', '.join(stack_names())}) for its profile")


def _precision_row(word: str, framework: str) -> dict[str, Any] | None:
    words = _data()["precision_words"]
    key = spelling(word)  # "fp16 mixed", "Mixed Precision", "FP8_hybrid", "BF16" under torchtune
    return (words.get(framework, {}).get(word) or words.get(framework, {}).get(key) or words["*"].get(word)
            or words["*"].get(key))


def precision_recipe(word: str, framework: str) -> str | None:
    """The fp8 recipe a ``training.precision`` word names besides the precision (TE FP8: delayed; MXFP8), or None."""
    row = _precision_row(word, framework)
    if row is not None:
        return row.get("fp8_recipe")
    free = _free_precision(word)
    return free[1] if free is not None else None


# fp8 recipes by the words run descriptions use: torchao's float8 recipes, Transformer Engine's (its FP8 primer's
# DelayedScaling is the recipe "Transformer Engine FP8" runs unless another is named; Float8CurrentScaling, one scale
# per tensor from its current amax — torchao's tensorwise —, as Megatron-Core's --fp8-recipe tensorwise and
# Megatron-Bridge's "bf16_with_fp8_current_scaling_mixed" / "fp8_cs" name it), MXFP8
_RECIPE_WORDS = (("mxfp8", "mxfp8"), ("rowwise", "rowwise"), ("tensorwise", "tensorwise"), ("current", "tensorwise"),
                 ("cs", "tensorwise"), ("delayed", "delayed"), ("engine", "delayed"))


def _free_precision(word: str) -> tuple[str, str | None, list[str]] | None:
    """(precision, fp8 recipe, the words that say so) of a precision as run descriptions write it ("BF16 mixed
    (AMP)", "bf16 + float8 linears", "FP8 (Transformer Engine, delayed scaling)"): fp8 where any word names it, else
    fp16, else bf16 (pure where it says pure or true), else fp32; None where no word names a precision ("8-bit")."""
    toks = [t for t in re.split(r"[^a-z0-9]+", word.lower()) if t]
    recipe = next((r for w, r in _RECIPE_WORDS if w in toks), None)
    for precision, words in (("fp8", ("fp8", "float8", "e4m3", "e5m2", "mxfp8")), ("fp16", ("fp16", "float16", "half")),
                             ("bf16", ("bf16", "bfloat16")), ("fp32", ("fp32", "float32", "tf32"))):
        said = [t for t in toks if t in words]
        if said:
            pure = precision == "bf16" and ("pure" in toks or "true" in toks)
            return ("bf16-pure" if pure else precision), (recipe if precision == "fp8" else None), said
    return None


# sharding and offload words inside a framework name, as (pattern, ZeRO stage, offload, the stack they imply):
# DeepSpeed's ZeRO stages; ZeRO-Offload, ZeRO-2 with the optimizer on the CPU (Ren et al. 2021, arXiv:2101.06840);
# ZeRO-Infinity, ZeRO-3 with parameters offloaded too (Rajbhandari et al. 2021, arXiv:2104.07857); PyTorch FSDP's
# sharding strategies (torch.distributed.fsdp.ShardingStrategy: FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2,
# HYBRID_SHARD = ZeRO-3 inside a node, NO_SHARD = DDP)
_HYBRID = r"hybrid[-_\s]?shard"
SHARDING_WORDS = ((r"zero[-_\s]?offload", 2, "optimizer", "deepspeed"),
                  (r"zero[-_\s]?infinity", 3, "params", "deepspeed"),
                  (r"zero[-_\s]?([0-3])\b", None, None, "deepspeed"), (r"zero\+\+", None, None, "deepspeed"),
                  (r"full[-_\s]?shard", 3, None, "fsdp"), (r"shard[-_\s]?grad[-_\s]?op", 2, None, "fsdp"),
                  (_HYBRID, 3, None, "fsdp"), (r"no[-_\s]?shard", 0, None, "fsdp"),
                  (r"(?:cpu[-_\s]?)?offload(?:ing)?", None, "optimizer", None))


@dataclass(frozen=True, slots=True)
class Sharding:
    """What a ``training.framework`` word says of the sharding: the ZeRO stage, the offload, the stack the words
    imply, the word without them, and whether it shards inside a node only (FSDP's HYBRID_SHARD)."""

    stage: int | None
    offload: str | None
    stack: str | None
    rest: str
    hybrid: bool = False


def sharding_words(word: str) -> Sharding:
    """The sharding a ``training.framework`` word names ("DeepSpeed ZeRO-3", "ZeRO-Offload", "FSDP FULL_SHARD",
    "DeepSpeed ZeRO-3 + offload")."""
    text, stage, offload, stack = word.strip().lower(), None, None, None
    hybrid = bool(re.search(_HYBRID, text))
    for pattern, z, off, implied in SHARDING_WORDS:
        m = re.search(pattern, text)
        if m is None:
            continue
        stage = stage if stage is not None else (int(m.group(1)) if z is None and m.groups() else z)
        offload, stack = offload or off, stack or implied
        text = text[:m.start()] + " " + text[m.end():]
    return Sharding(stage, offload, stack, re.sub(r"[\s+&,/()-]+", " ", text).strip(), hybrid)


def read_precision(word: str, framework: str) -> tuple[str, Reading | None]:
    """The precision a ``training.precision`` word means under ``framework`` (a profile name), and how it was
    read when the framework's word differs from gpuplan's (torchtune's bf16) or is not gpuplan's word."""
    key = spelling(word)
    row = _precision_row(word, framework)
    if row is None and key in PRECISIONS:
        return key, None
    core = without_remarks(word)
    if row is None and core not in (word, ""):  # the word before its remarks
        found, reading = read_precision(core, framework)
        if found in PRECISIONS:
            inner = reading.rule.split(": ", 1)[1] if reading else core
            rule = f"precision {word} read as {found}: {inner} (its remarks not read)"
            return found, Reading(field="training.precision", given=word, value=found, rule=rule)
    free = _free_precision(word) if row is None else None
    if free is not None:
        rule = f"precision {word} read as {free[0]}: the word{'s' if len(free[2]) > 1 else ''} {', '.join(free[2])}"
        return free[0], Reading(field="training.precision", given=word, value=free[0], rule=rule)
    if row is None:
        return word, None
    rule = f"precision {word} read as {row['precision']}: {row['why']} ({row['source']})"
    return row["precision"], Reading(field="training.precision", given=word, value=row["precision"], rule=rule)


def optimizer_words() -> tuple[str, ...]:
    """The library words ``training.optimizer`` accepts besides gpuplan's own optimizers."""
    return tuple(_data()["optimizer_words"])


def read_optimizer(word: str) -> tuple[str, dict[str, Any], Reading | None]:
    """(optimizer, the training fields the word fixes besides it — its kernel ``optimizer_impl``, a step in the backward
    ``optimizer_in_backward`` —, how it was read) for a ``training.optimizer`` word: gpuplan's own name as it is, a
    library's word (matched without regard to case) as the optimizer it runs; a word for an optimizer whose states
    gpuplan does not model (stacks.json ``optimizer_not_modelled``: GaLore, APOLLO) is one error naming the fix."""
    if word in OPTIMIZERS:
        return word, {}, None
    rows = {w.lower(): row for w, row in _data()["optimizer_words"].items()}
    key = spelling(word)  # "8-bit Adam", "Fused Adam", "LAMB"
    row = rows.get(word.lower()) or rows.get(key)
    if row is None and key in OPTIMIZERS:
        return key, {}, None
    if row is None:
        for stem, miss in _data()["optimizer_not_modelled"].items():
            if key.replace("-", "").startswith(stem):
                raise GpuplanError(f"training.optimizer: {word}: {miss['why']} ({miss['source']}); {miss['fix']}")
        return word, {}, None  # spec.Training names the choices
    impl = row.get("impl")
    fields: dict[str, Any] = {"optimizer_impl": impl} if impl else {}
    if row.get("in_backward"):
        fields["optimizer_in_backward"] = True
    how = f" ({impl} kernel)" if impl else ""
    how += ", stepped in the backward" if row.get("in_backward") else ""
    rule = f"optimizer {word} read as {row['optimizer']}{how}: {row['why']} ({row['source']})"
    return row["optimizer"], fields, Reading(field="training.optimizer", given=word, value=row["optimizer"], rule=rule)


def precision_flag(word: str, flag: str) -> bool:
    """A precision word's flag (stacks.json precision_words): ``sixteen_bit``, 16-bit mixed precision that names no
    format ("mixed", "16-bit": bf16, or fp16 on a GPU without bf16 tensor cores); ``tf32``, fp32 on the TF32 cores."""
    return bool(_data()["precision_words"]["*"].get(spelling(word), {}).get(flag))

