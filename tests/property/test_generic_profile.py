"""The default stack is the typical one, never the best (hypothesis): with no framework named, a layout runs
no faster than the median of the named framework profiles that can run it, and the answer lists what naming
each would change; the memory it assumes keeps gradients in fp32, as the typical stack does."""

from __future__ import annotations

import statistics

from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError

MODELS = ["llama-3.2-1b", "qwen2.5-1.5b", "llama-3.1-8b", "mistral-7b", "gpt2-xl"]
GPUS = ["h100-sxm", "a100-80gb", "h200", "mi300x"]
LAYOUTS = [{"zero": 0}, {"zero": 1}, {"zero": 2}, {"zero": 3}, {"tp": 2, "zero": 1}, {"tp": 4, "zero": 3},
           {"pp": 2, "zero": 1}, {"tp": 2, "pp": 2, "zero": 1, "recompute": "full"}]


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(MODELS), gpu=st.sampled_from(GPUS), gpus=st.sampled_from([8, 16, 64]),
       layout=st.sampled_from(LAYOUTS), seq=st.sampled_from([2048, 8192]), mb=st.sampled_from([1, 2]))
def test_generic_is_never_faster_than_the_median_named_framework(model, gpu, gpus, layout, seq, mb):
    try:
        est = evaluate(make(model, gpu, gpus, training={"seq_len": seq, "global_batch": 512},
                            layout={**layout, "micro_batch": mb}))
    except GpuplanError:
        return  # a layout this model or GPU cannot take
    if not est.memory.fits:
        return  # the named alternatives are timed for a layout that fits (hypothesis found 8B, 16 H100, ZeRO-1, 8K)
    named = [tps for _, tps in est.alternatives]
    assert named, "some named framework runs every one of these layouts"
    assert est.time.tokens_per_s <= statistics.median(named) * (1 + 1e-12)
    assert {k for k, _ in est.alternatives} <= {"megatron-lm", "megatron-core", "torchtitan", "deepspeed",
                                                 "pytorch-fsdp", "hf-trainer", "torchtune"}


def test_generic_keeps_fp32_gradients_and_says_so():
    # Megatron-LM forces fp32 gradient accumulation under bf16 (megatron/training/arguments.py validate_args);
    # the generic stack assumes that common choice: 4 B per gradient, listed under "assumed"
    est = evaluate(make("llama-3.1-8b", "h100-sxm", 8, layout={"zero": 1}))
    assert est.scenario.training.grad_dtype == "fp32"
    params = est.memory.peak.states.params_on_rank
    assert est.memory.gradients == 4 * params
    named = evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"framework": "torchtitan"},
                          layout={"zero": 3}))
    assert named.scenario.training.grad_dtype == "param"
    assert named.alternatives == ()  # a named framework is not second-guessed
    j = est.to_json()
    assert {"field": "training.grad_dtype", "value": "fp32"}.items() <= next(
        a for a in j["assumed"] if a["field"] == "training.grad_dtype").items()
    assert set(j["framework_alternatives"]) and all(v["ratio"] > 0 for v in j["framework_alternatives"].values())


def test_megatron_keeps_fp32_main_grads_under_bf16_only():
    # 18 B per parameter with DDP: bf16 weights 2 + fp32 main grads 4 + fp32 master 4 + Adam moments 8
    bf16 = evaluate(make("llama-3.2-1b", "h100-sxm", 8, training={"framework": "megatron-core"}, layout={"zero": 0}))
    s = bf16.memory.peak.states
    assert (s.weights + s.gradients + s.optimizer) / s.params_on_rank == 18
    fp16 = evaluate(make("llama-3.2-1b", "a100-80gb", 8, training={"framework": "megatron-lm", "precision": "fp16"},
                         layout={"zero": 0}))
    s = fp16.memory.peak.states
    assert fp16.scenario.training.grad_dtype is None
    assert (s.weights + s.gradients + s.optimizer) / s.params_on_rank == 16
