"""Which engine runs a Hugging Face Trainer stack's step at ZeRO-1 or with the optimizer alone offloaded.

Hugging Face Trainer — and the stacks on it, Axolotl, LLaMA-Factory, TRL, ms-swift (the ``hf-trainer`` profile) —
shards through Accelerate: PyTorch FSDP, or DeepSpeed when the run gives a DeepSpeed config
(``TrainingArguments.deepspeed``; transformers integrations/deepspeed.py ``HfTrainerDeepSpeedConfig``). FSDP has no
optimizer-only sharding (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and their hybrids), so such a run at ZeRO-1 is
DeepSpeed's engine around the same Hugging Face model code: the ``deepspeed`` profile (whose client model is
transformers'), said under ``assumed`` — not refused; so is one that offloads the optimizer alone (ZeRO-Offload: FSDP's
CPU offload moves the parameters with it). Axolotl ships the configs (deepspeed_configs/zero1.json, zero2.json with
offload_optimizer), LLaMA-Factory too (examples/deepspeed/ds_z2_offload_config.json)."""

from __future__ import annotations

from typing import Any

from gpuplan.catalog.stacks import read_framework, sharding_words

SOURCE = ("https://github.com/huggingface/transformers src/transformers/integrations/deepspeed.py "
          "(HfTrainerDeepSpeedConfig, deepspeed_init); https://github.com/axolotl-ai-cloud/axolotl "
          "deepspeed_configs/zero1.json (zero_optimization.stage 1)")


def trainer_engine(profile: str, word: Any, zero: Any, pp: Any = None, offload: Any = None) -> tuple[str, str | None]:
    """(the profile that runs the step, the rule when it is not ``profile``): DeepSpeed for an ``hf-trainer`` stack
    at ZeRO-1 (``zero``, the layout's stage as given or as the framework word names it) or offloading the optimizer
    alone (``offload``: ZeRO-Offload; FSDP's CPU offload moves the parameters too) without a pipeline — the Trainer
    has none (DeepSpeed's PipelineEngine needs a PipelineModule), so ``pp`` > 1 stays refused."""
    what = "ZeRO-1" if str(zero).strip() == "1" else "optimizer offload" if offload == "optimizer" else None
    if profile != "hf-trainer" or what is None or str(pp or 1).strip() != "1":
        return profile, None
    return "deepspeed", (f"{word} at {what}: Hugging Face Trainer shards or offloads the optimizer alone only through "
                         "its DeepSpeed integration (FSDP has no optimizer-only sharding or offload) — read as "
                         f"deepspeed, the engine that runs the step around the same transformers model code ({SOURCE})")


def read_stack(word: Any, layout: dict[str, Any]) -> tuple[str, tuple[str, str, Any, str] | None]:
    """The profile a ``training.framework`` word is read as (catalog/stacks.py ``read_framework``) in the ``layout``
    given (its ZeRO stage, else the stage the word itself names; its pipeline), and the reading (field, word, value,
    rule)."""
    profile, r = read_framework(word)
    named = sharding_words(word).stage if isinstance(word, str) else None
    zero = layout.get("zero")
    engine, why = trainer_engine(profile, word, zero if zero is not None else named, layout.get("pp"),
                                 layout.get("offload"))
    if why is not None:
        return engine, ("training.framework", str(word), engine, why)
    return profile, (r.field, r.given, r.value, r.rule) if r is not None else None
