"""bitsandbytes' paged optimizers (optimizer_impl paged: Hugging Face Trainer's optim paged_adamw_8bit,
paged_adamw_32bit, paged_lion_32bit; torchtune's bitsandbytes.optim.PagedAdamW8bit): the states live in CUDA unified
memory (bitsandbytes functional.py get_paged: cudaMallocManaged), outside PyTorch's caching allocator — on the GPU
while it has room, evicted to the host when it has not. They never make an out-of-memory and are not in the GPU's
peak; host memory holds them at worst."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.api import evaluate_scenario
from gpuplan.io.scenario import parse_scenario

RUN = dict(model="llama-3.1-8b", gpu="rtx-4090", gpus=1, seq_len=2048, global_batch=2, micro_batch=2,
           recompute="full", framework="torchtune", optimizer="adamw-8bit", optimizer_in_backward=True, tokens=1e9)


def test_paged_states_are_not_in_the_gpu_peak():
    resident = gpuplan.evaluate(**RUN).to_json()["memory"]
    paged = gpuplan.evaluate(**RUN, optimizer_impl="paged").to_json()["memory"]
    # the 8-bit moments of 8,030,261,248 parameters: 2 B each, block-wise quantization constants beside
    assert resident["optimizer"] == pytest.approx(paged["cpu_offload"], rel=1e-12) and paged["optimizer"] == 0
    assert resident["total"] - paged["total"] > 0.9 * 2 * 8_030_261_248
    assert not resident["fits"] and paged["fits"]


@pytest.mark.parametrize("word", ["paged_adamw_8bit", "bitsandbytes.optim.PagedAdamW8bit"])
def test_the_libraries_words_read_as_paged(word):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "rtx-4090", "gpus": 1},
                         "training": {"optimizer": word, "framework": "torchtune"}})
    assert (sc.training.optimizer, sc.training.optimizer_impl) == ("adamw-8bit", "paged")
    notes = evaluate_scenario(sc).to_json()["notes"]
    assert any("paged optimizer" in n for n in notes)
