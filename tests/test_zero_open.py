"""An open layout.zero on a given layout whose replicas run out of memory unsharded (model/zero_open.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.refusals import why_not
from gpuplan.errors import GpuplanError
from gpuplan.model.memory import memory
from gpuplan.model.recompute_open import open_recompute

GiB = 2**30


def _assumed(est, field):
    return [a for a in est.to_json()["assumed"] if a["field"] == field]


def _llama2_70b(**layout):
    # Llama 2 70B as its paper states the run: A100-80GB, 4,096-token sequences, 4M-token batches (Touvron et al.
    # 2023, Sec. 2.2); tensor parallel 8 over 2,048 GPUs, the sharding not stated
    return make("llama-2-70b", "a100-80gb-sxm", 2048, training={"seq_len": 4096, "global_batch": 1024},
                layout={"tp": 8, **layout})


def test_a_published_layout_whose_replicas_cannot_hold_the_states_is_read_sharded():
    # unsharded, each of the 256 replicas' ranks holds 8.75B parameters' weights, fp32 gradients and Adam states:
    # DOES NOT FIT even recomputing everything; ZeRO-1 still keeps the fp32 gradients whole, ZeRO-2 fits
    plain = evaluate(_llama2_70b(zero=0, recompute="none"))
    assert not plain.memory.fits and not plain.memory.tight
    est = evaluate(_llama2_70b())
    assert est.layout.zero == 2 and est.layout.recompute == "none" and est.memory.fits
    one = memory(est.scenario.model, est.scenario.hardware, est.scenario.training, replace(est.layout, zero=1))
    assert not one.fits
    (rule,) = _assumed(est, "layout.zero")
    assert rule["value"] == 2 and "ZeRO-2" in rule["rule"] and "zero_open.py" in rule["rule"]
    assert f"{plain.memory.total / GiB:,.1f} GiB" in rule["rule"]


def test_a_given_stage_one_replica_or_a_fitting_layout_stays_as_it_is():
    given_zero = evaluate(_llama2_70b(zero=0))
    assert given_zero.layout.zero == 0 and not given_zero.memory.fits
    single = evaluate(make("llama-3.1-8b", "h100-sxm", 1, training={"seq_len": 4096, "global_batch": 8}))
    assert single.layout.zero == 0
    small = evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"seq_len": 2048, "global_batch": 64},
                          layout={"tp": 4, "micro_batch": 1}))
    assert small.layout.zero == 0 and (small.memory.fits or small.memory.tight)


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "qwen2.5-14b", "llama-3.1-70b"]),
       gpus=st.sampled_from([2, 8, 32, 128]), tp=st.sampled_from([1, 2, 8]), seq=st.sampled_from([2048, 8192]),
       fw=st.sampled_from(["generic", "megatron-core", "deepspeed", "hf-trainer"]))
def test_the_least_stage_that_fits_is_taken(model, gpus, tp, seq, fw):
    if tp > gpus:
        return
    sc = make(model, "h100-sxm", gpus, training={"seq_len": seq, "global_batch": 4 * gpus, "framework": fw},
              layout={"tp": tp, "micro_batch": 1})
    try:
        est = evaluate(sc)
    except Exception as err:  # a layout the framework refuses: not this rule's business
        assert "gpuplan" in type(err).__module__
        return
    rules = _assumed(est, "layout.zero")
    if not any("zero_open.py" in r["rule"] for r in rules):
        return  # kept: as completed, or nothing sharded fits better (checked below where it changed)
    tr, lay = est.scenario.training, est.layout
    below = [replace(lay, zero=z, recompute="none") for z in range(0, lay.zero)]
    # every lower stage the framework runs ran out of memory with nothing recomputed; where the chosen one fits only
    # with recomputation, none fitted with the least recomputation either (a stage that fits without any is taken
    # before recomputing: ZeRO-2's sharding costs less than a recomputed forward)
    recomputes = any("with the least recomputation" in r["rule"] for r in rules)
    for low in below:
        if why_not(fw, low.values(), tr, sc.model):
            continue
        m = memory(sc.model, sc.hardware, tr, low)
        assert not m.fits
        if recomputes:
            assert not open_recompute(est.scenario, low, m, {})[1].fits


def test_a_layout_the_stack_runs_only_sharded_is_read_sharded():
    # accelerate composes tensor parallelism only with FSDP (frameworks.json hf-trainer cannot_run): tp 8 over 16 GPUs
    # with the stage open is the least stage it runs it with, said; a given zero 0 is still refused with the reason
    est = evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "hf-trainer", "seq_len": 4096},
                        layout={"tp": 8}))
    assert est.layout.zero == 2
    (rule,) = _assumed(est, "layout.zero")
    assert "at ZeRO-0 the run is refused" in rule["rule"] and "compose TP/CP with FSDP" in rule["rule"]
    with pytest.raises(GpuplanError, match="compose TP/CP with FSDP"):
        evaluate(make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "hf-trainer", "seq_len": 4096},
                      layout={"tp": 8, "zero": 0}))


def test_plan_and_trace_read_the_layout_evaluate_reads():
    # one reading of an open field for every command (model/estimate.py ``read_layout``): the plan's row for the user's
    # own layout is `evaluate`'s answer — before, it completed the layout at ZeRO-0 and showed the refusal
    from gpuplan.api import plan_scenario
    from gpuplan.model.estimate import read_layout

    sc = make("llama-3.1-8b", "h100-sxm", 16, training={"framework": "hf-trainer", "seq_len": 4096},
              layout={"tp": 8})
    est = evaluate(sc)
    assert read_layout(sc) == est.layout and est.layout.zero == 2
    row = plan_scenario(sc, max_gpus=16).result.user_layout
    assert row is not None and row.error is None
    assert row.estimate.layout == est.layout and row.estimate.time.tokens_per_s == est.time.tokens_per_s


def test_megatron_core_shards_the_parameters_only_without_a_pipeline():
    # Megatron-FSDP and torch FSDP2 (ZeRO-3 under Megatron-Core) compose with TP, EP and CP, not PP (Megatron-LM
    # docs/api-guide/custom_fsdp.md; NeMo's FSDP strategy asserts pipeline size 1): Nemotron-4 340B as NeMo 24.07 ran
    # it, tp 8 pp 8 interleaved over 128 H100 with the stage open, is its distributed optimizer — it was read as
    # ZeRO-3, gathering every layer's weights per micro-batch (91 tok/s/GPU where the run published ~330)
    sc = make("nemotron-4-340b", "h100-sxm", 128, training={"framework": "NeMo", "seq_len": 4096, "global_batch": 32},
              layout={"tp": 8, "pp": 8, "dp": 2, "micro_batch": 1, "pp_schedule": "interleaved",
                      "virtual_stages": 12})
    est = evaluate(sc)
    # bf16 with the recompute open: full recompute, Megatron's least that leaves it TIGHT (it has no per-op selective),
    # 150 tok/s/GPU — against 91 gathering every layer as ZeRO-3
    assert est.layout.zero in (1, 2) and est.time.tokens_per_s / 128 > 130
    with pytest.raises(GpuplanError, match="not with pipeline parallelism"):
        evaluate(make("llama-3.1-70b", "h100-sxm", 64, training={"framework": "megatron-core"},
                      layout={"tp": 8, "pp": 4, "zero": 3}))
    assert evaluate(make("llama-3.1-70b", "h100-sxm", 64, training={"framework": "megatron-core"},
                         layout={"tp": 8, "pp": 1, "zero": 3})).layout.zero == 3


_GEMMA2_9B = {  # google/gemma-2-9b config.json
    "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
    "max_position_embeddings": 8192, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh"}


def test_of_the_tight_stages_the_one_whose_point_estimate_fits_is_read():
    # Gemma 2 9B on 8 H100s, the stage open: nothing surely fits; ZeRO-1 with full recomputation leaves the peak TIGHT
    # with its point estimate over the GPU, ZeRO-3 without recomputation TIGHT within it — the run an expert starts
    est = evaluate(make(_GEMMA2_9B, "h100-sxm", 8, training={"seq_len": 4096}))
    assert est.memory.tight and est.memory.total <= est.memory.capacity
    assert est.layout.zero == 3 and est.layout.recompute == "none"
    one = evaluate(make(_GEMMA2_9B, "h100-sxm", 8, training={"seq_len": 4096}, layout={"zero": 1}))
    assert one.memory.total > one.memory.capacity
    (rule,) = _assumed(est, "layout.zero")
    assert "its point estimate within the GPU" in rule["rule"]


def test_out_of_memory_at_every_stage_the_answer_is_the_least_peak():
    # a 70B on 8 A100-40GB fits at no stage: the answer says how far it is at best (ZeRO-3, everything recomputed),
    # not at the unsharded stage — five times as far
    est = evaluate(make("llama-3.1-70b", "a100-40gb-sxm", 8, training={"seq_len": 4096}))
    assert not est.memory.fits and not est.memory.tight
    assert est.layout.zero == 3 and est.layout.recompute == "full"
    plain = evaluate(make("llama-3.1-70b", "a100-40gb-sxm", 8, training={"seq_len": 4096},
                          layout={"zero": 0, "recompute": "full"}))
    assert plain.memory.total > 3 * est.memory.total
    (rule,) = _assumed(est, "layout.zero")
    assert "out of memory at every stage" in rule["rule"]


_PHI3_MINI = {  # microsoft/Phi-3-mini-4k-instruct config.json
    "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
    "sliding_window": 2047, "tie_word_embeddings": False}


def test_a_tight_peak_past_the_gpu_is_read_sharded():
    # Phi-3-mini on 8 H100s unsharded: TIGHT with its point estimate (89 GiB) past the 79.6 usable — more likely out of
    # memory than not: the stage open, a run like it shards (ZeRO-1 fits); a TIGHT peak within the GPU is kept
    plain = evaluate(make(_PHI3_MINI, "h100-sxm", 8, layout={"zero": 0}))
    assert plain.memory.tight and plain.memory.total > plain.memory.capacity
    est = evaluate(make(_PHI3_MINI, "h100-sxm", 8))
    assert est.layout.zero == 1 and est.memory.fits
