"""The Hugging Face Trainer profile (catalog/frameworks.json ``hf-trainer``): the transformers model code as the
Trainer runs it — the loss in fp32 over materialised logits, eager norms — on accelerate's DDP/FSDP, with
whole-layer gradient checkpointing only; TRL, PEFT, Axolotl and LLaMA-Factory read as it (catalog/stacks.json)."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.frameworks import get_framework, refused_rules
from gpuplan.errors import GpuplanError

LORA = dict(model="llama-3.1-8b", method="lora", gpu="h100-sxm", gpus=1, seq_len=4096, global_batch=16,
            micro_batch=4, lora_targets="all-linear", lora_rank=16)  # given: the stacks' own defaults differ
LOGITS = 4 * 4096 * 128256  # micro-batch × sequence × Llama 3's vocabulary


def test_the_trainer_holds_fp32_logits_where_composer_fuses_the_loss():
    hf = gpuplan.evaluate(**LORA, framework="hf-trainer").memory.peak
    composer = gpuplan.evaluate(**LORA, framework="llm-foundry").memory.peak
    # transformers' ForCausalLMLoss: logits.float() then cross_entropy — the fp32 log-softmax output and the incoming
    # and outgoing fp32 gradients, 12 B per logit at the start of backward (model/software.py); llm-foundry's fused
    # cross-entropy writes the gradient into the bf16 logits' own buffer, 4 B
    assert hf.logits == 12 * LOGITS
    assert composer.logits == 4 * LOGITS
    # the kernels are the transformers model code's, as the generic stack assumes them
    assert gpuplan.evaluate(**LORA, framework="hf-trainer").memory.total == gpuplan.evaluate(**LORA).memory.total


@pytest.mark.parametrize("word", ["trl", "peft", "axolotl", "llama-factory", "HF Trainer", "transformers"])
def test_the_stacks_on_the_trainer_read_as_it(word):
    est = gpuplan.evaluate(**LORA, framework=word)
    assert est.scenario.training.framework == "hf-trainer"


def test_only_whole_layer_checkpointing():
    hf = get_framework("hf-trainer")
    for mode in ("selective", "selective-op"):
        assert [r.rule for r in refused_rules(hf, {"recompute": mode}, {})] == ["whole-layer-checkpointing"]
    assert refused_rules(hf, {"recompute": "full"}, {}) == []
    with pytest.raises(GpuplanError, match="hf-trainer cannot run this: the Trainer's gradient_checkpointing"):
        gpuplan.evaluate(**{**LORA, "gpus": 8, "global_batch": 64}, framework="hf-trainer", recompute="selective-op")
    p = gpuplan.plan(model="llama-3.1-8b", method="full", gpu="h100-sxm", gpus=8, seq_len=8192, framework="trl",
                     tokens="1B")
    assert p.result.candidates and {c.layout.recompute for c in p.result.candidates} <= {"none", "full"}
    assert all(c.layout.pp == 1 for c in p.result.candidates)  # accelerate has no pipeline stages
