"""The user's words for the training software and its precision (catalog/stacks.json): a framework's own word
means what that framework does, and a stack without a profile is read as the profile underneath — both said
under the answer's ``assumed``."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.stacks import precision_words, read_framework, read_precision, stack_names
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.spec import FRAMEWORKS

GiB = 2**30


def _answer(gpu="h100-sxm", **training):
    return evaluate(make("llama-3.1-8b", gpu, 8, training=training, layout={"zero": 3})).to_json()


def _assumed(est, field):
    return [a for a in est["assumed"] if a["field"] == field]


def test_torchtunes_bf16_is_its_pure_bf16_not_an_error():
    # torchtune recipes/full_finetune_distributed.py: "When dtype=bf16, all activations, gradients and optimizer
    # states are in bfloat16" — no fp32 master weights; gpuplan's bf16 is mixed (16 B/param with AdamW)
    est = _answer(framework="torchtune", precision="bf16")
    assert est["scenario"]["training"]["precision"] == "bf16-pure"
    (read,) = _assumed(est, "training.precision")
    assert read["given"] == "bf16" and read["value"] == "bf16-pure" and "torchtune" in read["rule"]
    pure = _answer(framework="torchtune", precision="bf16-pure")
    assert est["memory"] == pure["memory"]
    # AdamW in bf16: 2 states × 2 B per parameter, sharded over 8 ranks (ZeRO 3)
    assert est["memory"]["optimizer"] == pytest.approx(4 * est["model"]["params"] / 8, rel=1e-6)


def test_an_open_precision_takes_the_frameworks_documented_default():
    est = _answer(framework="torchtune")
    (a,) = _assumed(est, "training.precision")
    assert a["value"] == "bf16-pure" and "documented default" in a["rule"] and "given" not in a
    # frameworks whose default is gpuplan's bf16 keep the one rule's words
    (a,) = _assumed(_answer(framework="torchtitan"), "training.precision")
    assert a["value"] == "bf16" and a["rule"].startswith("bf16 mixed precision")


def test_megatron_bf16_stays_mixed_precision():
    # Megatron's --bf16 keeps fp32 main parameters (Float16OptimizerWithFloat16Params): gpuplan's bf16 as given
    est = _answer(framework="megatron-core", precision="bf16")
    assert est["scenario"]["training"]["precision"] == "bf16" and not _assumed(est, "training.precision")
    assert est["memory"]["optimizer"] == pytest.approx(12 * est["model"]["params"] / 8, rel=1e-6)


@pytest.mark.parametrize(("word", "meant"), [("bf16-true", "bf16-pure"), ("bf16-mixed", "bf16"),
                                             ("16-mixed", "fp16"), ("amp_bf16", "bf16"), ("32-true", "fp32")])
def test_lightning_and_composer_words(word, meant):
    est = _answer(framework="lightning", precision=word)
    assert est["scenario"]["training"]["precision"] == meant
    assert _assumed(est, "training.precision")[0]["given"] == word


@pytest.mark.parametrize(("stack", "profile"), [("huggingface", "hf-trainer"), ("transformers", "hf-trainer"),
                                                ("trl", "hf-trainer"), ("peft", "hf-trainer"),
                                                ("lightning", "pytorch-fsdp"), ("axolotl", "hf-trainer"),
                                                ("accelerate", "pytorch-fsdp"),
                                                ("llm-foundry", "pytorch-fsdp"), ("nemo", "megatron-core"),
                                                ("megatron-bridge", "megatron-core"),
                                                ("megatron-deepspeed", "megatron-lm"),
                                                ("llamafactory", "hf-trainer"), ("ms-swift", "hf-trainer"),
                                                ("nemo-automodel", "torchtitan"), ("automodel", "torchtitan")])
def test_a_stack_without_a_profile_is_read_as_the_one_underneath(stack, profile):
    # the megatron-lm profile on a GPU of its era (named on Hopper it is Megatron-LM's later code, megatron-core)
    gpu = "a100-80gb-sxm" if profile == "megatron-lm" else "h100-sxm"
    est = _answer(gpu, framework=stack)
    assert est["scenario"]["training"]["framework"] == profile
    (read,) = _assumed(est, "training.framework")
    assert read["given"] == stack and read["value"] == profile and "http" in read["rule"]
    # the same memory as the profile named (PEFT's name also names its method: adapters) — at the recomputation the
    # stack runs by default where it has its own (TRL's SFTConfig checkpoints: stacks.json layout_defaults)
    layout = {"zero": 3, "recompute": est["scenario"]["layout"]["recompute"]}
    named = evaluate(make("llama-3.1-8b", gpu, 8, training={"framework": profile,
                                                           "method": est["scenario"]["training"]["method"]},
                          layout=layout)).to_json()
    assert est["memory"] == named["memory"]


def test_every_stack_maps_to_a_profile_and_no_word_shadows_one():
    assert set(stack_names()).isdisjoint(FRAMEWORKS)
    for name in stack_names():
        profile, read = read_framework(name)
        assert profile in FRAMEWORKS and read is not None and read.given == name
    assert read_framework("torchtitan") == ("torchtitan", None)
    assert read_precision("bf16", "torchtitan") == ("bf16", None)
    assert read_precision("bf16", "torchtune")[0] == "bf16-pure"
    assert "bf16" not in precision_words() and "bf16-true" in precision_words()


def test_an_unknown_framework_runs_as_the_typical_stack_with_a_note_naming_the_profiles():
    # issue 21 item 3: a stack without a profile ("your own loop") maps to a documented one, with a note
    est = _answer(framework="my-loop")
    assert est["scenario"]["training"]["framework"] == "generic"
    assert est["time"]["step_s"] == _answer()["time"]["step_s"]
    (note,) = _assumed(est, "training.framework")
    assert note["value"] == "generic" and "'my-loop'" in note["rule"]
    assert "torchtune" in note["rule"] and "hf-trainer" in note["rule"] and "\n" not in note["rule"]


@pytest.mark.parametrize("word, profile", [("torchtitn", "torchtitan"), ("deepspeeed", "deepspeed"),
                                           ("nanotorn", "nanotron"), ("megatron", "megatron-core"),
                                           ("LightningAI", "pytorch-fsdp"), ("Keras", "generic")])
def test_a_misspelt_or_bare_name_is_read_as_its_stack(word, profile):
    found, reading = read_framework(word)
    assert found == profile and reading is not None and reading.value == profile


def test_help_lists_the_stacks_and_precision_words(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name in ("hf-trainer", "lightning", "axolotl", "unsloth", "nemo", "bf16-true", "amp_bf16"):
        assert name in out.replace("- ", "-")


def test_the_text_answer_says_what_a_word_was_read_as(capsys):
    main(["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--zero", "3",
          "--framework", "lightning", "--precision", "bf16-true"])
    out = capsys.readouterr().out
    assert "read as: framework lightning → pytorch-fsdp, precision bf16-true → bf16-pure" in out


@pytest.mark.parametrize("word, profile", [
    # the profiles as published runs spell them: capitals, spaces, underscores, a version
    ("Megatron Core", "megatron-core"), ("megatron_core 0.12", "megatron-core"), ("DeepSpeed v0.14", "deepspeed"),
    ("PyTorch FSDP", "pytorch-fsdp"), ("TorchTitan", "torchtitan"), ("NeMo 2.0", "megatron-core"),
    # stacks built on a profile (catalog/stacks.json, each with its source)
    ("GPT-NeoX", "megatron-lm"), ("MegaBlocks", "megatron-lm"), ("Primus", "megatron-core"),
    ("Pai-Megatron-Patch", "megatron-core"), ("ColossalAI", "deepspeed"), ("OpenRLHF", "deepspeed"),
    ("metaseq", "pytorch-fsdp"), ("fairseq", "pytorch-fsdp"), ("DDP", "pytorch-fsdp"), ("verl", "pytorch-fsdp"),
    ("Hugging Face", "hf-trainer"), ("HF Trainer", "hf-trainer"), ("MaxText", "generic"), ("T5X", "generic"),
    ("HuggingFace Transformers", "hf-trainer"), ("nanoGPT", "pytorch-fsdp"), ("Horovod", "pytorch-fsdp"),
    ("picotron", "nanotron"), ("veScale", "torchtitan"), ("DeepSpeed ZeRO-3", "deepspeed"),
    ("DeepSpeed ZeRO 2", "deepspeed"), ("Mesh TensorFlow", "generic"), ("PaddlePaddle", "generic"),
    ("MindSpore", "generic"),
])
def test_a_framework_word_is_read_as_its_profile(word, profile):
    value, reading = read_framework(word)
    assert value == profile
    if word.lower() == profile:  # only the case differs: nothing to say
        assert reading is None
    else:
        assert reading is not None and reading.given == word and reading.value == profile


def test_a_stack_reading_names_what_runs_underneath():
    est = _answer(framework="gpt-neox")
    (read,) = _assumed(est, "training.framework")
    assert read["value"] == "megatron-lm" and "DeepSpeed" in read["rule"] and "github.com/EleutherAI" in read["rule"]
    # a profile spelled differently is the profile itself: the same answer
    assert _answer(framework="PyTorch FSDP")["time"] == _answer(framework="pytorch-fsdp")["time"]


def test_an_open_precision_on_a_gpu_without_bf16_is_fp16_mixed():
    # V100 and T4 have fp16 tensor cores and no bf16 ones (Volta, Turing): training there runs fp16 mixed
    # precision, so an open precision is read as that, named under assumed — a given bf16 is still refused
    est = evaluate(make("llama-3.1-8b", "v100-32gb", 8, layout={"zero": 3})).to_json()
    assert est["scenario"]["training"]["precision"] == "fp16"
    (read,) = _assumed(est, "training.precision")
    assert read["value"] == "fp16" and "no bf16 tensor cores" in read["rule"]
    with pytest.raises(GpuplanError, match="v100-32gb has no bf16 tensor cores in the catalogue"):
        evaluate(make("llama-3.1-8b", "v100-32gb", 8, training={"precision": "bf16"}, layout={"zero": 3}))
    # a GPU with bf16 keeps the bf16 default
    assert _answer()["scenario"]["training"]["precision"] == "bf16"


@pytest.mark.parametrize("word, precision", [
    ("mixed", "bf16"), ("Mixed Precision", "bf16"), ("AMP", "fp16"), ("16-bit", "bf16"), ("fp16 mixed", "fp16"),
    ("bf16_mixed", "bf16"), ("TF32", "fp32"), ("FP8 hybrid", "fp8"), ("fp8-e4m3", "fp8"), ("pure-bf16", "bf16-pure"),
    ("AMP fp16", "fp16"), ("AMP (bf16)", "bf16"), ("FP8 (Transformer Engine)", "fp8"), ("TE FP8", "fp8"),
    ("fp8 delayed scaling", "fp8"), ("MXFP8", "fp8"),
    # with remarks, or in a sentence: the word before the remarks, else the precision its words name
    ("BF16 mixed (AMP)", "bf16"), ("mixed precision (16-bit)", "bf16"), ("fp16 (loss scaling)", "fp16"),
    ("bf16 with fp32 master weights", "bf16"), ("bf16 + float8 linears", "fp8"), ("fp8 e4m3 + bf16", "fp8"),
    ("FP8 (Transformer Engine, delayed scaling)", "fp8"), ("pure bf16 (no master)", "bf16-pure"),
])
def test_precision_words_as_papers_write_them(word, precision):
    value, reading = read_precision(word, "generic")
    assert value == precision and reading is not None and reading.given == word


def test_sixteen_bit_mixed_precision_is_fp16_on_a_gpu_without_bf16():
    est = evaluate(make("llama-3.1-8b", "v100-32gb", 8, training={"precision": "mixed precision"},
                        layout={"zero": 3})).to_json()
    assert est["scenario"]["training"]["precision"] == "fp16"
    (read,) = _assumed(est, "training.precision")
    assert read["given"] == "mixed precision" and "no bf16 tensor cores" in read["rule"]
    # an unknown word is still one line naming the choices
    with pytest.raises(GpuplanError, match="'fp6' is not one of"):
        _answer(precision="fp6")


@pytest.mark.parametrize("word, optimizer, impl", [
    ("8-bit Adam", "adamw-8bit", None), ("AdamW 8bit", "adamw-8bit", None), ("bnb_8bit_adam", "adamw-8bit", None),
    ("FusedAdam", "adamw", "fused"), ("LAMB", "adamw", None), ("Fused LAMB", "adamw", "fused"),
    ("SGD momentum", "sgd-momentum", None), ("AdamW (fused)", "adamw", "fused"), ("fused AdamW", "adamw", "fused"),
    ("SGD with momentum", "sgd-momentum", None), ("SGD (Nesterov)", "sgd-momentum", None),
])
def test_optimizer_words_as_papers_write_them(word, optimizer, impl):
    from gpuplan.catalog.stacks import read_optimizer

    value, fixed, reading = read_optimizer(word)
    assert (value, fixed.get("optimizer_impl")) == (optimizer, impl)
    assert reading is not None or word.lower().replace(" ", "-") == optimizer


@pytest.mark.parametrize("word, attention", [
    ("FlashAttention-2", "flash"), ("flash_attention_2", "flash"), ("FA3", "flash"), ("sdpa", "flash"),
    ("cuDNN", "flash"), ("math", "eager"), ("fa1", "flash1"), ("flash", "flash"),
    # llm-foundry / MPT: attn_impl triton
    ("triton", "flash1-triton"), ("flash-attn triton", "flash1-triton"), ("flash1-triton", "flash1-triton"),
])
def test_attention_words_as_papers_write_them(word, attention):
    from gpuplan.catalog.method_words import read_attention

    value, reading = read_attention(word.lower())
    assert value == attention and (reading is None) == (word == attention)


def test_an_attention_word_is_listed_under_assumed():
    est = _answer(attention="FlashAttention-2")
    (read,) = _assumed(est, "training.attention")
    assert read["value"] == "flash" and "Dao 2023" in read["rule"]
    assert est["time"] == _answer(attention="flash")["time"]


def test_a_frameworks_own_word_wins_in_any_spelling():
    # torchtune's bf16 is its pure bf16 however it is written
    assert read_precision("BF16", "torchtune")[0] == read_precision("bf16", "torchtune")[0] == "bf16-pure"


def test_a_bf16_default_on_a_gpu_without_bf16_is_fp16_for_a_stack_as_for_its_profile():
    # pytorch-fsdp documents bf16; on a V100 it and a stack running on it (hf-trainer) both train in fp16
    for framework in ("pytorch-fsdp", "hf-trainer", "PyTorch FSDP"):
        est = evaluate(make("llama-3.1-8b", "v100-32gb", 8, training={"framework": framework},
                            layout={"zero": 3})).to_json()
        assert est["scenario"]["training"]["precision"] == "fp16", framework



def test_an_open_zero_stage_is_the_named_frameworks_documented_stage():
    # torchtune's distributed recipes shard with FSDP only ('DDP is currently not supported'): an open zero takes
    # its documented stage, 3, named under assumed; a given zero 0 is still refused
    est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "torchtune"})).to_json()
    assert est["scenario"]["layout"]["zero"] == 3
    (a,) = _assumed(est, "layout.zero")
    assert a["value"] == 3 and "torchtune's documented default" in a["rule"]
    with pytest.raises(GpuplanError, match="torchtune cannot run this"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "torchtune"}, layout={"zero": 0}))
    # a framework whose documented stage is 0 keeps the one rule's default where its replicas hold the model states
    # (a 1B: 18 B a parameter is 22 GiB) — where they cannot (an 8B: 144 GB), the run sharded (model/zero_open.py);
    # an FSDP profile named shards fully
    other = evaluate(make("llama-3.2-1b", "a100-80gb-sxm", 8, training={"framework": "megatron-lm"})).to_json()
    assert other["scenario"]["layout"]["zero"] == 0
    assert _assumed(other, "layout.zero")[0]["rule"] == "the layout default"
    big = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "megatron-lm"})).to_json()
    assert big["scenario"]["layout"]["zero"] > 0 and "zero_open.py" in _assumed(big, "layout.zero")[0]["rule"]
    fsdp = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "pytorch-fsdp"})).to_json()
    assert fsdp["scenario"]["layout"]["zero"] == 3 and fsdp["scenario"]["layout"]["recompute"] == "none"
    # a stack read as that profile keeps the layout default (HF Trainer runs DDP unless FSDP is configured) unless
    # it runs the profile's own choices (stacks.json profile_defaults: Composer/llm-foundry, the FSDP profile's source)
    hf = evaluate(make("llama-3.2-1b", "a100-80gb-sxm", 8, training={"framework": "hf-trainer"})).to_json()
    assert hf["scenario"]["layout"]["zero"] == 0
    foundry = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "llm-foundry"})).to_json()
    assert foundry["scenario"]["layout"]["zero"] == 3


def test_nemo_runs_megatron_cores_distributed_optimizer():
    # NeMo 2's recipes build their optimizer with use_distributed_optimizer=True (recipes/optim/adam.py): an open
    # zero under framework nemo (or its Megatron-Bridge alias) is ZeRO 1, said with the source; Megatron-Core
    # named itself takes the same, as Megatron-LM's own Llama 3 example passes --use-distributed-optimizer
    # (frameworks.json megatron-core defaults.zero); Megatron-LM of 2021-22 keeps 0; a given zero stays
    for word in ("nemo", "megatron-bridge"):
        est = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": word})).to_json()
        assert est["scenario"]["layout"]["zero"] == 1
        (a,) = _assumed(est, "layout.zero")
        assert a["by_rule"] and "use_distributed_optimizer=True" in a["rule"] and "layout_defaults.zero" in a["rule"]
    core = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "megatron-core"})).to_json()
    assert core["scenario"]["layout"]["zero"] == 1
    (a,) = _assumed(core, "layout.zero")
    assert "megatron-core's documented default" in a["rule"]
    old = evaluate(make("llama-3.2-1b", "a100-80gb-sxm", 16, training={"framework": "megatron-lm"})).to_json()
    assert old["scenario"]["layout"]["zero"] == 0
    given = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "nemo"}, layout={"zero": 0}))
    assert given.layout.zero == 0
    # the distributed optimizer shards the fp32 master weights and Adam states: 12 bytes a parameter over 16 ranks
    plain = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "megatron-core"},
                          layout={"zero": 0})).memory
    nemo = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "nemo"})).memory
    assert nemo.optimizer == pytest.approx(plain.optimizer / 16)


def test_a_precision_word_that_names_an_fp8_recipe_sets_it():
    # Transformer Engine's fp8_autocast runs the DelayedScaling recipe by default; MXFP8 is its own recipe
    est = evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"precision": "FP8 (Transformer Engine)"},
                        layout={"zero": 3})).to_json()
    assert est["scenario"]["training"]["fp8_recipe"] == "delayed"
    (a,) = _assumed(est, "training.fp8_recipe")  # once: read from the word, not also as a default
    assert a["given"] and "delayed" in a["rule"]
    mx = evaluate(make("llama-3.1-8b", "b200", 8, training={"precision": "MXFP8"}, layout={"zero": 3})).to_json()
    assert mx["scenario"]["training"]["fp8_recipe"] == "mxfp8"
    # a recipe given beside the word wins
    given = evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"precision": "TE FP8", "fp8_recipe": "tensorwise"},
                          layout={"zero": 3})).to_json()
    assert given["scenario"]["training"]["fp8_recipe"] == "tensorwise"


def test_a_framework_word_that_names_a_zero_stage_sets_it():
    est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "DeepSpeed ZeRO-3"})).to_json()
    assert est["scenario"]["training"]["framework"] == "deepspeed" and est["scenario"]["layout"]["zero"] == 3
    (a,) = _assumed(est, "layout.zero")
    assert a["given"] == "DeepSpeed ZeRO-3" and "stage 3" in a["rule"]
    with pytest.raises(GpuplanError, match="names ZeRO stage 2, layout.zero is 1"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "deepspeed_zero2"},
                      layout={"zero": 1}))


def test_a_frameworks_stage_is_taken_where_the_default_layout_is_invalid_and_the_refusal_names_what_remains():
    # offloaded parameters need ZeRO 3: torchtune's own stage, 3, makes the layout valid
    est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "torchtune"},
                        layout={"offload": "params"})).to_json()
    assert est["scenario"]["layout"]["zero"] == 3
    # fp16 is refused by torchtune whatever the stage: the error names fp16, not DDP
    with pytest.raises(GpuplanError, match="fp16"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "torchtune", "precision": "fp16"}))
    # a stack read as a profile keeps the one rule (DDP stacks are not switched to FSDP)
    with pytest.raises(GpuplanError, match="cannot run this"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "ddp"}, layout={"tp": 2}))


@pytest.mark.parametrize("word, method", [
    ("SFT", "full"), ("pretraining", "full"), ("Full fine-tuning", "full"), ("full-parameter", "full"),
    ("PEFT", "lora"), ("LoRA (r=16)", "lora"), ("4-bit LoRA", "qlora"), ("QLoRA", "qlora"),
])
def test_method_words_as_recipes_write_them(word, method):
    from gpuplan.catalog.method_words import read_method

    assert read_method(word)[0] == method


def test_a_lora_rank_in_the_method_word_is_the_rank():
    est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 1, training={"method": "LoRA (r=64)"})).to_json()
    assert (est["scenario"]["training"]["method"], est["scenario"]["training"]["lora_rank"]) == ("lora", 64)
    (a,) = _assumed(est, "training.lora_rank")
    assert a["given"] and "rank 64" in a["rule"]
    given = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 1, training={"method": "LoRA (r=64)", "lora_rank": 8}))
    assert given.to_json()["scenario"]["training"]["lora_rank"] == 8
    with pytest.raises(GpuplanError, match="'banana' is not one of full, lora, qlora, lora-int8"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 1, training={"method": "banana"}))


@pytest.mark.parametrize("field, word, value", [
    # two fp32 states per parameter: Sophia (m, h), Schedule-Free AdamW (z, exp_avg_sq) — AdamW's 8 B
    ("optimizer", "Sophia", "adamw"), ("optimizer", "schedule-free AdamW", "adamw"),
    ("optimizer", "AdamWScheduleFree", "adamw"),
    # one: RMSprop's square_avg, Adagrad's sum — one momentum buffer's 4 B
    ("optimizer", "RMSprop", "sgd-momentum"), ("optimizer", "Adagrad", "sgd-momentum"),
    ("optimizer", "AdamW8bit", "adamw-8bit"),
    # LoRA's A and B of the same shapes: rsLoRA, LoRA+, PiSSA
    ("method", "rsLoRA", "lora"), ("method", "LoRA+", "lora"), ("method", "PiSSA", "lora"),
])
def test_optimizer_and_method_words_mean_their_states(field, word, value):
    est = _answer(**{field: word})
    assert est["scenario"]["training"][field] == value
    (note,) = _assumed(est, f"training.{field}")
    assert note["given"].lower() == word.lower() and note["value"] == value


@pytest.mark.parametrize("word, profile, layout", [
    # ZeRO-Offload is ZeRO-2 with the optimizer on the CPU (arXiv:2101.06840); ZeRO-Infinity ZeRO-3 with the
    # parameters offloaded too (arXiv:2104.07857); ZeRO words name DeepSpeed
    ("ZeRO-Offload", "deepspeed", {"zero": 2, "offload": "optimizer"}),
    ("ZeRO-Infinity", "deepspeed", {"zero": 3, "offload": "params"}),
    ("ZeRO-2", "deepspeed", {"zero": 2}),
    ("DeepSpeed ZeRO-3 + offload", "deepspeed", {"zero": 3, "offload": "optimizer"}),
    # torch.distributed.fsdp.ShardingStrategy: FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2
    ("FSDP FULL_SHARD", "pytorch-fsdp", {"zero": 3}),
    ("FSDP SHARD_GRAD_OP", "pytorch-fsdp", {"zero": 2}),
    ("FSDP with CPU offload", "pytorch-fsdp", {"offload": "optimizer"}),
    # a front-end over an engine: the engine runs the step
    ("HF Trainer + DeepSpeed ZeRO-3", "deepspeed", {"zero": 3}),
    ("Lightning + DeepSpeed ZeRO-2", "deepspeed", {"zero": 2}),
    # the engine named in brackets or beside the front-end's name (Axolotl's deepspeed_configs/zero1.json)
    ("LLaMA-Factory (DeepSpeed ZeRO-2)", "deepspeed", {"zero": 2}),
    ("Axolotl DeepSpeed ZeRO-1", "deepspeed", {"zero": 1}),
    ("Axolotl (FSDP FULL_SHARD)", "hf-trainer", {"zero": 3}),
])
def test_sharding_and_offload_words_in_the_framework_name_are_read_into_the_layout(word, profile, layout):
    sc = make("llama-3.1-8b", "h100-sxm", 16, training={"framework": word})
    assert sc.training.framework == profile and sc.layout == layout
    assert {r[0] for r in sc.read_as} >= {f"layout.{k}" for k in layout}


def test_a_sharding_word_that_contradicts_the_layout_is_refused():
    with pytest.raises(GpuplanError, match="names ZeRO stage 3, layout.zero is 1"):
        make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "FSDP FULL_SHARD"}, layout={"zero": 1})


@pytest.mark.parametrize("word, precision", [
    # torch.half, Lightning's 32, Apex AMP's opt levels
    ("half", "fp16"), ("32", "fp32"), ("O1", "fp16"), ("O2", "fp16"), ("apex O2", "fp16"),
])
def test_precision_words_of_older_stacks(word, precision):
    assert make("llama-3.1-8b", "h100-sxm", 8, training={"precision": word}).training.precision == precision


@pytest.mark.parametrize("word, impl", [("adamw_hf", "foreach"), ("adamw_apex_fused", "fused")])
def test_trainer_optimizer_names(word, impl):
    tr = make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": word}).training
    assert (tr.optimizer, tr.optimizer_impl) == ("adamw", impl)


@pytest.mark.parametrize("word, profile", [
    # the publisher before the name, a note in brackets after it, the words in another order, one of its words
    ("Microsoft DeepSpeed", "deepspeed"), ("NVIDIA Megatron-LM", "megatron-lm"), ("Meta torchtitan", "torchtitan"),
    ("Hugging Face nanotron", "nanotron"), ("MosaicML LLM Foundry", "pytorch-fsdp"), ("Axolotl (FSDP)", "hf-trainer"),
    ("Megatron-Core (MCore)", "megatron-core"), ("DeepSpeed-Megatron", "megatron-lm"), ("GPT-NeoX (DeepSpeed)",
                                                                                          "megatron-lm"),
    # an everyday word that is also a stack's alias names nothing alone
    ("our internal trainer", "generic"), ("custom PyTorch trainer", "generic"),
])
def test_a_stack_named_as_run_descriptions_write_it(word, profile):
    assert read_framework(word)[0] == profile


@pytest.mark.parametrize("word, recipe", [("float8 rowwise", "rowwise"), ("float8 tensorwise", "tensorwise"),
                                          ("FP8 (Transformer Engine, delayed scaling)", "delayed"),
                                          # Transformer Engine's Float8CurrentScaling: one scale per tensor from its
                                          # current amax, Megatron-Bridge's mixed-precision recipe names
                                          ("FP8 current scaling", "tensorwise"),
                                          ("bf16_with_fp8_current_scaling_mixed", "tensorwise"),
                                          ("fp8_cs", "tensorwise")])
def test_a_precision_in_words_names_its_fp8_recipe(word, recipe):
    from gpuplan.catalog.stacks import precision_recipe

    assert read_precision(word, "torchtitan")[0] == "fp8" and precision_recipe(word, "torchtitan") == recipe


@pytest.mark.parametrize("framework, recipe", [("megatron-core", "delayed"), ("torchtitan", "tensorwise")])
def test_block_scaled_fp8_is_said_to_be_costed_as_the_frameworks_default(framework, recipe):
    # Megatron-Core's --fp8-recipe blockwise (TE Float8BlockScaling; DeepSeek-V3's 1x128 / 128x128 scales) has no
    # model here: the framework's documented default recipe is costed, and the answer says so
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"precision": "FP8 blockwise", "framework": framework})
    said = [r for r in sc.read_as if r[0] == "training.fp8_recipe"]
    assert sc.training.fp8_recipe == recipe and said and "not modelled" in said[0][3]


@pytest.mark.parametrize("word", ["FP8 (TE)", "FP8 with Transformer Engine", "Transformer Engine FP8 (hybrid)"])
def test_transformer_engine_fp8_in_words_is_its_default_recipe(word):
    # Transformer Engine's fp8_autocast without a recipe runs DelayedScaling (its FP8 primer)
    tr = make("llama-3.1-8b", "h100-sxm", 8, training={"precision": word}).training
    assert (tr.precision, tr.fp8_recipe) == ("fp8", "delayed")


def test_a_precision_no_word_names_stays_an_error():
    assert read_precision("8-bit", "generic") == ("8-bit", None)  # int8 or fp8: not guessed
    with pytest.raises(GpuplanError, match="training.precision: '8-bit' is not one of"):
        evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"precision": "8-bit"}))


def test_answer_ais_fsdp_qlora_shards_fully():
    # github.com/AnswerDotAI/fsdp_qlora train.py @02586ac7: FSDP(...) with no sharding_strategy, torch's FULL_SHARD;
    # it sets no PYTORCH_CUDA_ALLOC_CONF. Read as generic before (zero 0: 30.6 GiB of a 24 GiB card for its
    # README's Llama-2 70B on two 24 GB GPUs, offload aside)
    for word in ("fsdp-qlora", "fsdp_qlora", "AnswerDotAI fsdp_qlora"):
        est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 4, training={"framework": word, "method": "qlora"}))
        est = est.to_json()
        assert est["scenario"]["training"]["framework"] == "pytorch-fsdp"
        assert est["scenario"]["layout"]["zero"] == 3 and est["scenario"]["training"]["expandable_segments"] is False


@pytest.mark.parametrize("name", sorted({*FRAMEWORKS, *stack_names()} - {"generic"}))
@pytest.mark.parametrize("method", ["LoRA", "QLoRA", "+ QLoRA", "SFT", "full fine-tuning", "(PEFT)"])
def test_a_method_beside_a_stacks_name_reads_as_the_stack_alone(name, method):
    # "HF Trainer LoRA", "FSDP + QLoRA", "Megatron SFT": the method's words name the method, not the stack — read
    # as generic before where they stood beside a name ("hf trainer lora"), or kept a stack's words but lost its
    # layout defaults ("FSDP + QLoRA": zero 0 where "fsdp" alone shards fully)
    def layout(word):  # a 1B, whose replicas hold its states at any stage: the stage read is the stack's own
        sc = make("llama-3.2-1b", "a100-80gb-sxm", 4, training={"framework": word})
        return evaluate(sc).to_json()["scenario"]

    alone, described = layout(name), layout(f"{name} {method}")
    for field in ("framework", "expandable_segments"):
        assert described["training"].get(field) == alone["training"].get(field)
    assert described["layout"]["zero"] == alone["layout"]["zero"]  # the stack's documented stage


@pytest.mark.parametrize("word, method", [
    ("Axolotl QLoRA", "qlora"), ("FSDP + QLoRA", "qlora"), ("fsdp_qlora", "qlora"),
    ("HF Trainer with PEFT LoRA", "lora"), ("peft", "lora"), ("DeepSpeed ZeRO-3", "full"), ("Megatron SFT", "full")])
def test_the_method_a_stacks_description_names_fills_an_open_method(word, method):
    est = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 4, training={"framework": word})).to_json()
    assert est["scenario"]["training"]["method"] == method
    if method != "full":
        (read,) = [a for a in est["assumed"] if a["field"] == "training.method" and a["given"] == word.lower()]
        assert read["value"] == method
    # a method the scenario gives is kept, and said where the description names another
    given = evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 4, training={"framework": word, "method": "full"}))
    assert given.to_json()["scenario"]["training"]["method"] == "full"
    kept = [a for a in given.to_json()["assumed"] if a["field"] == "training.method"]
    assert (len(kept) == 1 and "is given and kept" in kept[0]["rule"]) == (method != "full")


@pytest.mark.parametrize("word, switch, method", [("Axolotl QLoRA", "use_peft", "qlora"),
                                                  ("HF Trainer LoRA", "use_peft", "lora"),
                                                  ("Axolotl LoRA", "load_in_4bit", "qlora")])
def test_a_peft_switch_beside_a_described_method_reads_as_the_description(word, switch, method):
    # TRL's use_peft says adapters, not which: "Axolotl QLoRA" with it is QLoRA; a 4-bit load turns LoRA into QLoRA
    sc = make("llama-3.1-8b", "a100-80gb-sxm", 1, training={"framework": word, switch: True})
    assert sc.training.method == method


@pytest.mark.parametrize("word, profile, method", [
    # PEFT is the Hugging Face stack's alias as well as an adapter word; a name beside a method reads as it does alone
    # ("PyTorch": a loop of one's own on FSDP; "Fabric": Lightning's); a negated method names none
    ("PEFT LoRA", "hf-trainer", "lora"), ("PyTorch LoRA", "pytorch-fsdp", "lora"),
    ("Fabric LoRA", "pytorch-fsdp", "lora"),
    ("Axolotl full fine-tune (no LoRA)", "hf-trainer", "full"),
])
def test_method_words_do_not_unname_a_stack_or_name_a_negated_method(word, profile, method):
    est = evaluate(make("llama-3.2-1b", "a100-80gb-sxm", 4, training={"framework": word})).to_json()
    assert (est["scenario"]["training"]["framework"], est["scenario"]["training"]["method"]) == (profile, method)


@pytest.mark.parametrize("word", ["hf-trainer", "axolotl", "TRL SFTTrainer"])
def test_a_trainer_stack_at_zero_1_runs_deepspeeds_engine(word):
    # FSDP has no optimizer-only sharding; Hugging Face Trainer shards the optimizer alone through its DeepSpeed
    # integration (transformers integrations/deepspeed.py): read as deepspeed, said, never refused
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"framework": word}, layout={"zero": 1})
    assert sc.training.framework == "deepspeed"
    assert any(r[0] == "training.framework" and "at ZeRO-1" in r[3] for r in sc.read_as)
    assert evaluate(sc).to_json()["time"]["tokens_per_s_per_gpu"] > 0
    other = make("llama-3.1-8b", "h100-sxm", 8, training={"framework": word}, layout={"zero": 2})
    assert other.training.framework == "hf-trainer"  # ZeRO-2/3: FSDP's SHARD_GRAD_OP / FULL_SHARD, the profile's
