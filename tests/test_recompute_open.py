"""An open layout.recompute on a given layout that runs out of memory without it (model/recompute_open.py)."""

from __future__ import annotations

from dataclasses import replace

from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.refusals import why_not
from gpuplan.model.memory import memory
from gpuplan.model.recompute_open import _modes

# Llama 3 405B as the Llama 3 paper trained it at 8K context (Table 4: 16,384 H100, TP 8, PP 16, DP 128, 16 sequences
# per data-parallel group, interleaved schedule); the paper does not say which activations were recomputed
LLAMA3_405B = {"hardware": {"gpus": 16384}, "training": {"seq_len": 8192, "global_batch": 2048},
               "layout": {"tp": 8, "pp": 16, "dp": 128, "micro_batch": 1, "pp_schedule": "interleaved", "zero": 1}}


def _405b(**layout):
    s = LLAMA3_405B
    return make("llama-3.1-405b", "h100-sxm", training=s["training"], hardware=s["hardware"],
                layout={**s["layout"], **layout})


def _assumed(est, field):
    return [a for a in est.to_json()["assumed"] if a["field"] == field]


def test_a_published_layout_that_needs_recompute_is_read_with_it():
    plain = evaluate(_405b(recompute="none"))
    assert not plain.memory.fits and not plain.memory.tight  # without recomputation: out of memory
    est = evaluate(_405b())
    assert est.layout.recompute == "selective-op"  # Megatron's selective (the attention core) does not fit
    assert est.memory.fits
    rec = _assumed(est, "layout.recompute")
    assert len(rec) == 1 and rec[0]["by_rule"] and rec[0]["value"] == "selective-op"
    assert f"{plain.memory.total / 2**30:,.1f} GiB" in rec[0]["rule"]
    # the recomputation costs time: the step is the recomputing layout's own
    assert est.time.step_s == evaluate(_405b(recompute="selective-op")).time.step_s > plain.time.step_s


def test_a_tight_layout_keeps_no_recompute():
    # Llama 3.1 8B on 8 H100 at 8K, FSDP, micro-batch 1: without recomputation its peak's interval straddles the
    # capacity — runs like it ran, others ran out of memory — so no recomputation is assumed
    est = evaluate(make("llama-3.1-8b", gpus=8, training={"seq_len": 8192, "global_batch": 16},
                        layout={"zero": 3, "micro_batch": 1}))
    assert est.memory.tight and est.layout.recompute == "none"
    assert _assumed(est, "layout.recompute")[0]["rule"] == "the layout default"
    # micro-batch 2 doubles the activations: out of memory at the interval's low end, so the run recomputed
    # (expandable segments: no recompute fragmentation on native segments to widen the interval)
    two = evaluate(make("llama-3.1-8b", gpus=8, training={"seq_len": 8192, "global_batch": 16,
                                                          "expandable_segments": True},
                        layout={"zero": 3, "micro_batch": 2}))
    assert two.layout.recompute == "full" and two.memory.fits  # generic: selective and selective-op do not fit


def test_a_given_recompute_and_a_fitting_layout_stay_as_they_are():
    assert evaluate(_405b(recompute="none")).layout.recompute == "none"
    small = evaluate(make("llama-3.1-8b", gpus=8, training={"seq_len": 4096, "global_batch": 64},
                          layout={"zero": 3, "micro_batch": 1}))
    assert small.memory.fits and small.layout.recompute == "none"
    rec = _assumed(small, "layout.recompute")
    assert rec and "by_rule" not in rec[0] and rec[0]["rule"] == "the layout default"


@settings(max_examples=25, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "qwen2.5-14b", "llama-3.1-70b"]),
       gpus=st.sampled_from([1, 2, 4, 8]), seq=st.sampled_from([2048, 8192, 16384]),
       mb=st.sampled_from([1, 2, 4]), zero=st.sampled_from([0, 1, 3]),
       fw=st.sampled_from(["generic", "megatron-core", "torchtitan", "deepspeed"]))
def test_the_least_recompute_that_fits_is_taken(model, gpus, seq, mb, zero, fw):
    sc = make(model, gpus=gpus, training={"seq_len": seq, "global_batch": 8 * gpus * mb, "framework": fw},
              layout={"dp": gpus, "micro_batch": mb, "zero": zero if gpus > 1 else 0})
    try:
        est = evaluate(sc)
    except Exception as err:  # a layout the framework refuses: not this rule's business
        assert "gpuplan" in type(err).__module__
        return
    chosen = est.layout.recompute
    none = memory(sc.model, sc.hardware, est.scenario.training, replace(est.layout, recompute="none"))
    if none.fits or none.tight:  # a run like it may have run without: kept as the layout default
        assert chosen == "none"
        return
    runs = [m for m in _modes(fw)
            if not why_not(fw, replace(est.layout, recompute=m).values(), est.scenario.training)]
    fits = [m for m in runs if memory(sc.model, sc.hardware, est.scenario.training,
                                      replace(est.layout, recompute=m)).fits]
    if fits:
        assert chosen == fits[0] and est.memory.fits
    else:
        mems = {m: memory(sc.model, sc.hardware, est.scenario.training, replace(est.layout, recompute=m))
                for m in runs}
        tight = [m for m in runs if mems[m].tight]
        if tight:
            assert chosen == tight[0]
        else:  # out of memory whatever it recomputes: the mode that leaves the least peak, where one lowers it
            least = min(runs, key=lambda m: (mems[m].total, runs.index(m)), default=None)
            assert chosen == (least if least is not None and mems[least].total < none.total else "none")
            assert not est.memory.fits and not est.memory.tight


def test_out_of_memory_whatever_it_recomputes_is_shown_at_the_nearest():
    # Llama 3.1 70B on one H100 at 8K: out of memory whatever it recomputes — the answer says so at the least peak
    # (full recomputation), not at the peak without any
    plain = evaluate(make("llama-3.1-70b", gpus=1, training={"seq_len": 8192, "global_batch": 8},
                          layout={"micro_batch": 1, "recompute": "none"}))
    est = evaluate(make("llama-3.1-70b", gpus=1, training={"seq_len": 8192, "global_batch": 8},
                        layout={"micro_batch": 1}))
    assert est.layout.recompute == "full" and not est.memory.fits and not est.memory.tight
    assert est.memory.total < plain.memory.total
    rec = _assumed(est, "layout.recompute")
    assert len(rec) == 1 and "nearest to fitting" in rec[0]["rule"]
    assert f"{plain.memory.total / 2**30:,.1f} GiB" in rec[0]["rule"]


def test_a_stack_that_checkpoints_whole_blocks_recomputes_them():
    # Answer.AI's FSDP + QLoRA: Llama 70B fine-tuned on two 24 GB GPUs with gradient checkpointing and offload
    sc = make("llama-3.1-70b", "rtx-4090", gpus=2,
              training={"method": "qlora", "framework": "hf-trainer", "seq_len": 2048, "global_batch": 16},
              layout={"zero": 3, "dp": 2, "micro_batch": 1, "offload": "params"})
    est = evaluate(sc)
    assert _modes("pytorch-fsdp") == ("full",) and _modes("torchtitan") == ("selective-op", "full")
    assert est.layout.recompute == "full" and est.memory.fits

