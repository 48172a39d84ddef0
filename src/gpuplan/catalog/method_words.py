"""A user's words for what is trained and how attention runs (``training.method``, ``training.attention``), read
once when a scenario is parsed, beside catalog/stacks.py's words for the stack and its precision."""

from __future__ import annotations

import re
from typing import Any

from gpuplan.catalog.stacks import Reading, attention_words, spelling
from gpuplan.errors import GpuplanError
from gpuplan.spec import ATTENTIONS

# what is trained, as papers and recipes say it: every weight (pre-training, supervised or full fine-tuning) or
# low-rank adapters over frozen weights, 16-bit (LoRA, PEFT's default) or over 4-bit NF4 ones (QLoRA)
_METHOD_WORDS = {
    "full": ("full-fine-tuning", "full-finetuning", "full-finetune", "full-fine-tune", "fft", "sft", "pretrain",
             "pretraining", "pre-training", "continued-pretraining", "full-parameter", "full-sft"),
    # rsLoRA (a rank-scaled multiplier), LoRA+ (a larger learning rate for B) and PiSSA (adapters initialised from
    # the principal singular vectors) train LoRA's A and B of the same shapes: LoRA's memory and FLOPs
    "lora": ("peft", "lora-fine-tuning", "lora-finetuning", "lora-sft", "low-rank-adaptation", "rslora", "rs-lora",
             "lora+", "loraplus", "lora-plus", "pissa", "dora", "lora-dora", "dora-lora"),
    "qlora": ("4-bit-lora", "lora-4-bit", "qlora-4bit", "nf4-lora", "lora-nf4", "qdora", "qlora-dora"),
    # LoRA over a base loaded in 8 bits (bitsandbytes' LLM.int8: transformers' load_in_8bit, LLaMA-Factory's
    # quantization_bit 8) — alpaca-lora's and PEFT's 2023 int8 training
    "lora-int8": ("8-bit-lora", "8bit-lora", "lora-8-bit", "lora-8bit", "int8-lora", "lora-int-8", "llm-int8-lora",
                  "lora-llm-int8", "qlora-8bit", "qlora-int8", "8-bit-qlora"),
}


# methods that train part of the model in ways gpuplan does not cost, each with the bound or fix to give instead
_FREEZE = ("freeze tuning (LLaMA-Factory's finetuning_type freeze: only the last freeze_trainable_layers blocks "
           "trained) is not modelled: method full is its upper bound (every block's states and activations), lora "
           "a lighter alternative")
_PEFT_OTHER = "is not modelled: method lora is the nearest run gpuplan costs (adapters over the same frozen base)"
_NOT_MODELLED = {"freeze": _FREEZE, "freeze-tuning": _FREEZE, "partial": _FREEZE,
                 "prefix-tuning": f"prefix tuning {_PEFT_OTHER}", "prompt-tuning": f"prompt tuning {_PEFT_OTHER}",
                 "p-tuning": f"p-tuning {_PEFT_OTHER}", "ia3": f"IA³ (a learned scale per activation) {_PEFT_OTHER}"}


def read_method(word: str) -> tuple[str, Reading | None]:
    """The method a ``training.method`` word names: every weight trained (pre-training, SFT, full fine-tuning) or
    adapters (LoRA, QLoRA), a rank or options in brackets aside ("LoRA (r=16)"); gpuplan's own names as they are."""
    key = spelling(re.sub(r"\(.*\)|\br\s*=\s*\d+|\brank\s*=?\s*\d+", "", word, flags=re.IGNORECASE))  # "LoRA r=16"
    if key in ("full", "lora", "qlora", "lora-int8"):
        return key, (None if key == word else Reading(field="training.method", given=word, value=key,
                                                       rule=f"method {word} read as {key}"))
    if key in _NOT_MODELLED:
        raise GpuplanError(f"training.method {word}: {_NOT_MODELLED[key]}")
    for method, words in _METHOD_WORDS.items():
        if key in words:
            what = "every weight trained" if method == "full" else "adapters over frozen 8-bit weights" \
                if method == "lora-int8" else "adapters over frozen weights"
            return method, Reading(field="training.method", given=word, value=method,
                                   rule=f"method {word} read as {method}: {what}")
    return word, None  # spec.Training names the choices


_DORA = re.compile(r"(^|[^a-z])q?dora([^a-z]|$)")  # "DoRA", "QDoRA", "LoRA + DoRA"


def read_method_word(kw: dict) -> tuple[Reading | None, list[tuple[str, str, Any, str]]]:
    """``kw["method"]`` read as ``read_method`` reads it, and what else the word names where the input leaves it open
    — a rank ("LoRA (r=64)"), DoRA ("DoRA", "QDoRA": PEFT's use_dora) — set in ``kw``: (the method's reading, the
    others' as (field, given, value, rule))."""
    word = kw["method"]
    rank = re.search(r"\br\s*=\s*(\d+)|\brank\s*=?\s*(\d+)", word.lower())
    kw["method"], reading = read_method(word)
    said: list[tuple[str, str, Any, str]] = []
    if rank and "lora_rank" not in kw and kw["method"] != "full":
        kw["lora_rank"] = int(rank[1] or rank[2])
        said.append(("training.lora_rank", word, kw["lora_rank"], f"method {word} names rank {kw['lora_rank']}"))
    if _DORA.search(word.lower()) and "dora" not in kw:
        kw["dora"] = True
        said.append(("training.dora", word, True, f"method {word} names DoRA (PEFT use_dora)"))
    return reading, said


# gpuplan's own attention names, longest first ("flash1-triton" before "flash1" before "flash")
_OWN_ATTENTION = "|".join(re.escape(a) for a in sorted(ATTENTIONS, key=len, reverse=True))


def read_attention(word: str) -> tuple[str, Reading | None]:
    """The attention choice a ``training.attention`` word names (FlashAttention-2/3, SDPA, cuDNN → flash; math →
    eager), and how it was read; gpuplan's own names as they are."""
    if word in ATTENTIONS:
        return word, None
    words, key = attention_words(), spelling(word)
    free = not re.search(r"(^|-)(no|not|without|w-o)(-|$)", key)  # a word in a phrase, unless negated
    row = words.get(key) or next((words[w] for w in sorted(words, key=len, reverse=True)  # "xformers causal MHA"
                                  if free and re.search(rf"(^|-){re.escape(w)}(-|$)", key)), None)
    own = re.search(rf"(?:^|-)({_OWN_ATTENTION})(?:-|$)", key) if free else None
    if row is None and own is not None:  # "PyTorch eager attention"
        return own[1], Reading(field="training.attention", given=word, value=own[1], rule=f"attention {word}: {own[1]}")
    if row is None:
        return word, None  # spec.Training names the choices
    rule = f"attention {word} read as {row['attention']}: {row['why']} ({row['source']})"
    return row["attention"], Reading(field="training.attention", given=word, value=row["attention"], rule=rule)


# a preference trainer as descriptions name it beside the stack ("TRL DPO", "TRL's ORPOTrainer", "Axolotl dpo")
_PREFERENCE_WORDS = {"dpo": "dpo", "dpotrainer": "dpo", "ipo": "ipo", "orpo": "orpo", "orpotrainer": "orpo",
                     "simpo": "simpo", "cpo": "cpo", "cpotrainer": "cpo"}


def preference_in(description: str) -> str | None:
    """The preference loss a stack's description names ("TRL DPO", "trl (ORPOTrainer)"), else None."""
    words = set(re.split(r"[-\s/+_(),']+", description.lower()))
    if words & {"no", "not", "without", "w/o"}:
        return None
    return next((_PREFERENCE_WORDS[w] for w in sorted(words) if w in _PREFERENCE_WORDS), None)


def method_in(description: str) -> str | None:
    """The adapter method a stack's description names beside the stack ("Axolotl QLoRA", "FSDP + QLoRA", "HF Trainer
    with PEFT LoRA", Answer.AI's "fsdp_qlora", "PEFT LoRA int8"): qlora, lora-int8 or lora;
    None where it names none (every weight trained is
    the default either way)."""
    words = set(re.split(r"[-\s/+_(),]+", description.lower()))
    if words & {"no", "not", "without", "w/o"}:  # "full fine-tune (no LoRA)": a negated method names none
        return None
    if words & {"qlora", "qdora"}:
        return "qlora"
    if words & {"lora", "peft"} and (words & {"int8", "8bit", "llm.int8"} or {"8", "bit"} <= words):
        return "lora-int8"  # "LoRA (int8)", "8-bit LoRA"
    return "lora" if words & {"lora", "peft", "rslora", "pissa", "dora"} else None
