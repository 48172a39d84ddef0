"""The Hugging Face Trainer's optim names read as the states they keep (catalog/stacks.json optimizer_words,
model/states.py state_bytes), and the two whose states gpuplan does not model refused with the fix."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model.states import state_bytes


@pytest.mark.parametrize("word, optimizer, impl, in_backward", [
    ("adamw_torch_4bit", "adamw-4bit", None, False), ("adamw_torch_8bit", "adamw-8bit", None, False),
    ("ademamix", "ademamix", None, False), ("paged_ademamix_32bit", "ademamix", "paged", False),
    ("ademamix_8bit", "ademamix-8bit", None, False), ("paged_ademamix_8bit", "ademamix-8bit", "paged", False),
    ("grokadamw", "ademamix", None, False), ("rmsprop_bnb_8bit", "lion-8bit", None, False),
    ("schedule_free_radam", "adamw", None, False), ("schedule_free_sgd", "sgd-momentum", None, False),
    ("stable_adamw", "adamw", None, False), ("adamw_torch_xla", "adamw", None, False),
    ("adamw_torch_npu_fused", "adamw", "fused", False),
    ("lomo", "sgd", None, True), ("adalomo", "adafactor", None, True),
])
def test_trainer_optim_names_read_as_their_states(word, optimizer, impl, in_backward):
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": word})
    tr = sc.training
    assert (tr.optimizer, tr.optimizer_in_backward) == (optimizer, in_backward)
    if impl is not None:
        assert tr.optimizer_impl == impl
    assert [r[1] for r in sc.read_as if r[0] == "training.optimizer"] == ([] if word == optimizer else [word])


def test_a_given_field_wins_over_what_the_word_fixes():
    tr = make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": "paged_ademamix_8bit", "optimizer_impl": "fused"})
    assert tr.training.optimizer_impl == "fused"


def test_state_bytes_per_parameter():
    m = load_model("llama-3.2-1b")
    # torchao AdamW4bit: two moments at 4 bits, one fp32 scale per 128 values each (optim/README.md)
    assert state_bytes("bf16", "adamw-4bit", m).states == 2 * (0.5 + 4 / 128)
    # AdEMAMix: m1, m2 and nu in fp32 (Pagliardini et al. 2024, Alg. 1); bitsandbytes' 8-bit: one byte each and one
    # fp32 absmax per 2048-block (Dettmers et al. 2022)
    assert state_bytes("bf16", "ademamix", m).states == 12
    assert state_bytes("bf16", "ademamix-8bit", m).states == 3 * (1 + 4 / 2048)
    # bitsandbytes allocates its 32-bit states in fp32 whatever the parameters' dtype (optimizer.py init_state)
    assert state_bytes("bf16-pure", "ademamix", m).states == 12


def test_more_moments_hold_more_memory_at_the_same_layout():
    layout = {"dp": 8, "zero": 1, "micro_batch": 1, "recompute": "full"}
    opt = {w: evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": w, "seq_len": 4096},
                            layout=layout)).memory.optimizer for w in ("adamw_torch_4bit", "adamw_8bit", "adamw",
                                                                        "ademamix")}
    assert opt["adamw_torch_4bit"] < opt["adamw_8bit"] < opt["adamw"] < opt["ademamix"]
    # fp32 master weights (4 B) + the moments, over the 8 ZeRO-1 ranks
    assert opt["ademamix"] - opt["adamw"] == pytest.approx(opt["adamw"] * 4 / 12, rel=1e-9)


@pytest.mark.parametrize("word, fix", [("galore_adamw", "optimizer: adamw"), ("galore_adamw_8bit", "adamw-8bit"),
                                       ("GaLore AdamW layerwise", "optimizer: adamw"), ("apollo_adamw", "adamw")])
def test_low_rank_projected_optimizers_are_refused_with_the_fix(word, fix):
    with pytest.raises(GpuplanError, match=f"training.optimizer: {word.lower()}: .*not model.*{fix}"):
        evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": word}))


@pytest.mark.parametrize("word, optimizer", [("torchao.optim.AdamW4bit", "adamw-4bit"),
                                             ("torchao.optim.AdamW8bit", "adamw-8bit"),
                                             ("bitsandbytes.optim.AdEMAMix8bit", "ademamix-8bit"),
                                             ("bitsandbytes.optim.PagedAdEMAMix8bit", "ademamix-8bit")])
def test_optimizer_class_paths(word, optimizer):
    assert make("llama-3.1-8b", "h100-sxm", 8, training={"optimizer": word}).training.optimizer == optimizer
