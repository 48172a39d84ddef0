"""A fine-tuning config's switches (the Hugging Face Trainer's, Axolotl's, TRL's, DeepSpeed's) read as the training
fields they set (io/user_keys.py reads the rest of a scenario's framework spellings)."""

from __future__ import annotations

from gpuplan.errors import GpuplanError
from gpuplan.io.words import Reading, switch


def fine_tune_keys(training: dict) -> list[Reading]:
    """A fine-tuning config's switches read as what they set, where the scenario leaves it open: the Hugging Face
    Trainer's (and Axolotl's) ``bf16`` / ``fp16`` and a run's ``fp8`` switch as the precision, ``load_in_4bit`` as
    QLoRA, ``load_in_8bit`` as lora-int8,
    TRL's ``use_peft`` as LoRA, Axolotl's ``lora_target_linear`` as all-linear; TRL's ``packing`` and Axolotl's
    ``sample_packing`` set aside (gpuplan's tokens are whole sequences of seq_len, as packing makes them)."""
    reads: list[Reading] = []
    for key in [k for k in ("bf16", "fp16", "fp8") if k in training]:
        value = training.pop(key)
        if key != "fp8" and isinstance(value, str) and value.strip().lower() == "auto":
            # the Trainer's and Axolotl's "auto": bf16 where the GPU has it, else fp16 (read with the GPU)
            if training.get("precision") is None:
                training["precision"] = "mixed"
                reads.append(("training.precision", f"{key}: auto", "mixed", f"{key}: auto trains in 16-bit mixed "
                              "precision: bf16 where the GPU has bf16 tensor cores, else fp16"))
            continue
        if not switch(value, f"training.{key}"):
            continue
        if training.get("precision") is None:
            training["precision"] = key
            reads.append(("training.precision", f"{key}: true", key, f"{key}: true trains in {key} mixed precision"))
        else:
            reads.append((f"training.{key}", f"{key}: true", "not used", "training.precision is given"))
    reads += _factory_keys(training)
    for key, word, method in (("load_in_4bit", "a 4-bit base under LoRA adapters", "qlora"),
                              ("load_in_8bit", "an 8-bit base (LLM.int8) under LoRA adapters", "lora-int8"),
                              ("use_peft", "LoRA adapters on a frozen base", "lora")):
        open_to = (None, "lora") if method != "lora" else (None,)  # a 4- or 8-bit load turns LoRA into QLoRA / int8
        if key in training and switch(training.pop(key), f"training.{key}"):
            given, where = _method_said(training)
            if given in open_to:
                training["method"] = method
                reads.append(("training.method", f"{key}: true", method, f"{key}: true trains {word}: {method}"))
            elif given == method or method == "lora" and given in ("qlora", "lora-int8"):  # the method says it
                # (QLoRA and lora-int8 are PEFT's LoRA on a 4- or 8-bit base)
                reads.append((f"training.{key}", f"{key}: true", "not used", where))
            else:
                raise GpuplanError(f"training.{key}: true trains {word}, but training.method is {given}: set method "
                                   f"{method}, or drop {key}")
    if "lora_target_linear" in training and switch(training.pop("lora_target_linear"), "training.lora_target_linear") \
            and training.get("lora_targets") is None:
        training["lora_targets"] = "all-linear"
        reads.append(("training.lora_targets", "lora_target_linear: true", "all-linear",
                      "Axolotl's lora_target_linear adapts every linear layer: all-linear"))
    for key in [k for k in ("packing", "sample_packing") if k in training]:
        reads.append((f"training.{key}", f"{key}: {training.pop(key)}", "not used", "gpuplan's tokens are whole "
                      "sequences of seq_len, as packing makes them (padding is not modelled)"))
    return reads


# LLaMA-Factory's training stages: supervised (sft) and pre-training (pt) are the step gpuplan costs, and dpo — pairs,
# with its pref_loss: sigmoid (DPO), ipo, orpo, simpo (training.preference); kto (unpaired, with a KL batch), rm and
# ppo (a reward model, generation) are not (LLaMA-Factory src/llamafactory/train/, hparams/finetuning_args.py pref_loss)
FACTORY_STAGES = {"sft": "supervised fine-tuning", "pt": "pre-training"}
PREF_LOSSES = {"sigmoid": "dpo", "hinge": "dpo", "ipo": "ipo", "orpo": "orpo", "simpo": "simpo", "cpo": "cpo"}


def _factory_keys(training: dict) -> list[Reading]:
    """LLaMA-Factory's ``stage`` (sft and pt costed; a preference or RL stage refused with the fix) and
    ``quantization_bit`` (4: QLoRA's 4-bit base, as ``load_in_4bit``; 8: LLM.int8's 8-bit base, as ``load_in_8bit``)."""
    reads: list[Reading] = []
    if "stage" in training:
        stage = str(training.pop("stage")).strip().lower()
        loss = str(training.pop("pref_loss", "sigmoid")).strip().lower()
        if stage == "dpo" and loss in PREF_LOSSES and training.get("preference") is None:
            training["preference"] = PREF_LOSSES[loss]
            reads.append(("training.preference", f"stage: dpo, pref_loss: {loss}", PREF_LOSSES[loss],
                          "LLaMA-Factory's dpo stage trains on pairs with that loss"))
        elif stage not in FACTORY_STAGES and stage != "dpo":
            raise GpuplanError(f"training.stage {stage!r}: KTO (unpaired, with a KL batch), a reward model or PPO's "
                               "generation is not modelled: give stage sft (or pt) for the supervised step, or dpo "
                               "(pref_loss sigmoid, ipo, orpo, simpo) for pairs")
        else:
            reads.append(("training.stage", f"stage: {stage}", "not used", f"{FACTORY_STAGES.get(stage, 'pairs')}: "
                          "the training step gpuplan costs"))
    if "quantization_bit" in training:
        bits = training.pop("quantization_bit")
        if bits not in (4, "4", 8, "8"):
            raise GpuplanError(f"training.quantization_bit {bits!r}: a 4-bit base (QLoRA) or an 8-bit one (LLM.int8) "
                               "is modelled: give 4 or 8, or drop it for a 16-bit base")
        key = f"load_in_{int(bits)}bit"
        if key in training:
            raise GpuplanError(f"training.quantization_bit and {key} both name the {int(bits)}-bit base: give it once")
        training[key] = True
        reads.append((f"training.{key}", f"quantization_bit: {bits}", True, f"LLaMA-Factory's quantization_bit {bits} "
                      f"loads the base in {int(bits)} bits (bitsandbytes), as {key}"))
    return reads


def _method_said(training: dict) -> tuple[str | None, str]:
    """The method the config already says, and where: ``training.method`` as it spells it ("LoRA", "QLoRA (r=16)"),
    else the adapter method a stack's description names beside it ("Axolotl QLoRA": io/words.py fills an open method
    with it); None where neither says one."""
    from gpuplan.catalog.method_words import method_in, read_method

    given = training.get("method")
    if isinstance(given, str):
        return read_method(given)[0], f"training.method {given} says it"
    described = training.get("framework")
    named = method_in(described) if given is None and isinstance(described, str) else None
    if named:
        return named, f"training.framework {described!r} names {named}"
    return given, "training.method says it"
