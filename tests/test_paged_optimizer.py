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
    assert resident["total"] > resident["capacity"] >= paged["total"]  # paged: the predicted peak fits the card


@pytest.mark.parametrize("word", ["paged_adamw_8bit", "bitsandbytes.optim.PagedAdamW8bit"])
def test_the_libraries_words_read_as_paged(word):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "rtx-4090", "gpus": 1},
                         "training": {"optimizer": word, "framework": "torchtune"}})
    assert (sc.training.optimizer, sc.training.optimizer_impl) == ("adamw-8bit", "paged")
    notes = evaluate_scenario(sc).to_json()["notes"]
    assert any("paged optimizer" in n for n in notes)


def test_only_the_moments_are_paged_the_fp32_master_stays():
    kw = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, dp=8, zero=1, seq_len=4096, micro_batch=1,
              recompute="full", framework="deepspeed", tokens=1e9)
    resident = gpuplan.evaluate(**kw).to_json()["memory"]
    paged = gpuplan.evaluate(**kw, optimizer_impl="paged").to_json()["memory"]
    # AdamW's two fp32 moments (8 B) of the rank's shard are paged; the fp32 master (4 B) is not
    assert paged["cpu_offload"] == pytest.approx(resident["optimizer"] * 8 / 12, rel=1e-9)
    assert paged["optimizer"] == pytest.approx(resident["optimizer"] * 4 / 12, rel=1e-9)


def test_plan_checks_the_host_as_evaluate_does():
    # the moments paged to a host too small for them: evaluate refuses the layout, and so does the search
    from gpuplan.api import plan_scenario

    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8, "host_memory": "20GB"},
           "training": {"seq_len": 4096, "optimizer_impl": "paged", "tokens": 1e9, "framework": "deepspeed"},
           "layout": {"dp": 8, "zero": 1, "recompute": "full", "micro_batch": 1}}
    est = evaluate_scenario(parse_scenario(raw)).to_json()["memory"]
    assert not est["fits"]
    res = plan_scenario(parse_scenario(raw)).result
    assert res.best is None or res.best.memory.fits


def test_a_paged_optimizer_is_one_bitsandbytes_has():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="optimizer_impl paged is bitsandbytes' paged optimizers"):
        gpuplan.evaluate(**{**RUN, "optimizer": "sgd"}, optimizer_impl="paged")
