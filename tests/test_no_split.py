"""A given GPU count and a global batch that do not meet (search/batch.py): the default batch a count can split,
and — when the batch is given — the nearest batches and counts that split, instead of "no configuration
qualifies" under a deadline nobody gave."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import plan_scenario
from gpuplan.io.scenario import parse_scenario
from gpuplan.report.advice import plan_json
from gpuplan.report.text import plan_text
from gpuplan.search.batch import batch_for_count, no_split, split_count


def _sc(model: str, gpus: int, **training):
    return parse_scenario({"model": model, "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                           "training": {"seq_len": 4096, **training}})


def test_given_batch_that_no_layout_of_the_count_splits_says_what_would():
    # Llama 2 70B: 80 layers, tp ≤ 8 inside an 8-GPU node. 328 = 8 × 41 = dp × tp × pp: 41 fits no pipeline (at most
    # 40 stages of two layers), so dp is 41, 82, 164 or 328, none of which divides 100; 82 = 41 × 2 and 123 = 41 × 3
    # are the nearest that do (−18 %, +23 %: no rounded figure, so the batch stays) and 82 keeps the most (split,
    # micro-batch) pairs; 320 GPUs (dp 20 × tp 8 × pp 2) and 400 (dp 50 × tp 8) split 100 — no whole-node count
    # between them does (336: dp 42 or 21; 344: 43; 352, 360, …: a factor the batch lacks)
    res = plan_scenario(_sc("llama-2-70b", 328, global_batch=100, tokens=1e9)).result
    assert res.best is None and res.global_batch == 100
    gap = res.no_split
    assert (gap.gpus, gap.global_batch, gap.batches, gap.suggested, gap.counts) == \
        (328, 100, (82, 123), 82, (320, 400))
    js = plan_json(res)
    assert js["no_split"] == {"gpus": 328, "global_batch": 100, "batches": [82, 123], "suggested_batch": 82,
                              "counts": [320, 400]}
    text = plan_text(js)
    assert "no layout of 328 GPUs splits the global batch of 100 sequences" in text
    assert "deadline or budget" not in text  # none was given
    assert "take a global batch of 82 or 123 sequences on 328 GPUs; or 320 or 400 GPUs for 100 sequences" in text


def test_a_given_batch_within_5_percent_of_one_that_splits_is_read_as_it():
    # 1,000 sequences on the same 328 GPUs: 984 (= 41 × 24, −1.6 %) is the batch a framework would run — a published
    # batch is a rounded figure (OPT-175B's 1,000 on 992 GPUs) — and the reading is listed under read_as
    res = plan_scenario(_sc("llama-2-70b", 328, global_batch=1000, tokens=1e9)).result
    assert res.global_batch == 984 and res.no_split is None and res.best.gpus == 328
    (reading,) = [a for a in plan_json(res)["assumed"] if a.get("given") == "1,000 sequences"]
    assert reading["value"] == 984 and "read as 984" in reading["rule"] and "-1.6%" in reading["rule"]


def test_a_count_only_a_refused_pipeline_splits_is_no_split_for_that_framework():
    # OPT-175B's 992 GPUs (8 × 124 = 2^5 × 31) and 1,000 sequences: only a 31-stage pipeline splits them (dp 8 ×
    # tp 4), which PyTorch FSDP via accelerate cannot run — so the batch is read as 992 (dp 124 × tp 8), not refused
    sc = parse_scenario({"model": "opt-175b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 992},
                         "training": {"seq_len": 2048, "global_batch": 1000, "tokens": 1e9,
                                      "framework": "pytorch-fsdp"}})
    assert split_count(sc, (sc.hardware,), 992, 1000) == 0
    res = plan_scenario(sc).result
    assert res.global_batch == 992 and res.best.gpus == 992 and res.best.layout.pp == 1
    generic = parse_scenario({**{"model": "opt-175b"}, "hardware": {"gpu": "a100-80gb-sxm", "gpus": 992},
                              "training": {"seq_len": 2048, "global_batch": 1000}})
    assert split_count(generic, (generic.hardware,), 992, 1000) > 0  # a stack with pipelines splits it as given


def test_an_odd_factor_of_the_count_goes_into_the_pipeline():
    # 96 = 8 × 12 GPUs of a 70B with 1,024 sequences: the factor 3 of the count fits a pipeline of 3, 6,
    # 12 or 24 uneven stages (80 layers), as BLOOM ran 70 layers on 12 stages of 384 GPUs with a batch of 2,048 (Le
    # Scao et al. 2022, Sec. 3.4.2): the power-of-two batch splits as given
    res = plan_scenario(_sc("llama-2-70b", 96, global_batch=1024, tokens=1e12)).result
    assert res.no_split is None and res.global_batch == 1024
    assert res.best.gpus == 96 and res.best.layout.pp % 3 == 0 and 1024 % res.best.layout.dp == 0
    # the default batch (~4M tokens) is moved instead, to 1,008 = 48 × 21: the data-parallel width carries the factor
    # and no pipeline is forced on the model for it
    default = plan_scenario(_sc("llama-2-70b", 96, tokens=1e12)).result
    assert default.global_batch == 1008 and default.best.gpus == 96 and 1008 % default.best.layout.dp == 0


def test_default_batch_is_fitted_to_a_given_count_and_said():
    # a fine-tune's default of 32 sequences and pre-training's 1,024 (4M tokens at 4,096) split over no layout of
    # 328 GPUs for a 70B (dp a multiple of 41): 41 and 984 = 41 × 24, the nearest keeping at least half the (split,
    # micro-batch) pairs of the roomiest batch within a factor of two — before, "no configuration qualifies"
    for tokens, batch in ((1e9, 41), (1e12, 984)):
        res = plan_scenario(_sc("llama-2-70b", 328, tokens=tokens)).result
        assert res.global_batch == batch and res.no_split is None
        assert res.best is not None and res.best.gpus == 328 and batch % res.best.layout.dp == 0
        rule = next(a for a in plan_json(res)["assumed"] if a["field"] == "training.global_batch")
        assert rule["value"] == batch and "splits over no layout of the given 328 GPUs" in rule["rule"]


def test_fixed_degrees_at_a_given_count_fit_the_default_batch():
    # tp 8 × pp 4 on 96 GPUs leaves dp 3: 1,024 does not divide; 1,020 = 3 × 340 (micro-batches 1, 2, 4) is the
    # nearest keeping half of what 1,008 (3 × 336: all five) keeps
    sc = parse_scenario({"model": "llama-2-70b", "hardware": {"gpu": "h100-sxm", "gpus": 96},
                         "training": {"seq_len": 4096, "tokens": 1e12}, "layout": {"tp": 8, "pp": 4}})
    assert batch_for_count(sc, (sc.hardware,), 96, 1024) == 1020
    res = plan_scenario(sc).result
    assert res.global_batch == 1020 and (res.best.layout.dp, res.best.layout.tp, res.best.layout.pp) == (3, 8, 4)


def test_a_count_the_default_batch_splits_keeps_it():
    # 64 GPUs split 1,024 sequences (dp 64 or 8 × tp 8): the default stays, worded as before
    res = plan_scenario(_sc("llama-2-70b", 64, tokens=1e12)).result
    assert res.global_batch == 1024
    rule = next(a for a in plan_json(res)["assumed"] if a["field"] == "training.global_batch")
    assert rule["rule"].startswith("~4M tokens per step")


@settings(max_examples=60, deadline=None)
@given(n=st.sampled_from([1, 2, 3, 5, 6, 7, 8, 16, 24, 40, 48, 56, 72, 96]), batch=st.integers(1, 400))
def test_nearest_batches_and_counts_are_the_nearest_that_split(n, batch):
    # Llama 3.1 8B: 32 layers, 8 KV heads
    sc = _sc("llama-3.1-8b", n, global_batch=batch)
    targets = (sc.hardware,)
    if split_count(sc, targets, n, batch):
        return
    gap = no_split(sc, targets, n, batch)
    lo, hi = gap.batches
    for x in (lo, hi, gap.suggested):
        assert x is None or split_count(sc, targets, n, x) > 0
    # nothing between the nearest two splits
    assert not any(split_count(sc, targets, n, x) for x in range((lo or 0) + 1, hi or batch + 1) if x != batch)
    assert batch_for_count(sc, targets, n, batch) == gap.suggested
    clo, chi = gap.counts
    for c in (clo, chi):
        assert c is None or split_count(sc, targets, c, batch) > 0
    between = range((clo or 0) + 1, chi or 4 * n + 1)
    assert not any(split_count(sc, targets, c, batch) for c in between if c != n)


def test_a_batch_given_in_tokens_is_read_as_the_nearest_that_splits():
    from gpuplan.api import evaluate_scenario
    from gpuplan.errors import GpuplanError

    # 4,194,304 tokens = 1,024 sequences of 4,096; 24 GPUs at micro-batch 3 need a multiple of 72: 1,008 (−1.6%)
    sc = parse_scenario({"model": "llama-2-7b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 24},
                         "training": {"seq_len": 4096, "global_batch_tokens": 4194304, "tokens": 1e9},
                         "layout": {"tp": 1, "pp": 1, "micro_batch": 3}})
    js = evaluate_scenario(sc).to_json()
    assert js["scenario"]["training"]["global_batch"] == 1008
    (reading,) = [a for a in js["assumed"] if a.get("given") == "4,194,304 tokens"]
    assert reading["value"] == 1008 * 4096 and "read as 1,008" in reading["rule"] and "-1.6%" in reading["rule"]
    # past 5 % of the tokens (32 sequences where a multiple of 96 is needed) it is no reading: the check names it
    far = parse_scenario({"model": "llama-2-7b", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 24},
                          "training": {"seq_len": 4096, "global_batch_tokens": 131072, "tokens": 1e9},
                          "layout": {"tp": 1, "pp": 1, "micro_batch": 4}})
    with pytest.raises(GpuplanError, match="global_batch=32 is not a multiple of dp×micro_batch = 24×4"):
        evaluate_scenario(far)
    # a plan at a given count reads it the same way: 328 GPUs of a 70B, 1,024 sequences → 984 (−3.9%)
    res = plan_scenario(_sc("llama-2-70b", 328, global_batch_tokens=4194304, tokens=1e12)).result
    assert res.global_batch == 984 and res.no_split is None and res.best.gpus == 328
    # given in sequences, within 5 % too; further off it stays, and the answer says what would split
    assert plan_scenario(_sc("llama-2-70b", 328, global_batch=1024, tokens=1e12)).result.global_batch == 984
    assert plan_scenario(_sc("llama-2-70b", 328, global_batch=100, tokens=1e12)).result.no_split is not None


def test_evaluate_reads_a_batch_in_sequences_as_the_nearest_that_splits_its_layout():
    from gpuplan.api import evaluate_scenario
    from gpuplan.errors import GpuplanError

    # GPT-NeoX-20B's paper states "1538 contexts" on 96 GPUs at tp 2, pp 4 (dp 12): 1,536 runs (−0.13 %)
    def sc(batch):
        return parse_scenario({"model": {"params": 20e9}, "hardware": {"gpu": "a100-40gb-sxm", "gpus": 96},
                               "training": {"seq_len": 2048, "global_batch": batch, "tokens": 1e9},
                               "layout": {"tp": 2, "pp": 4, "zero": 1}})
    js = evaluate_scenario(sc(1538)).to_json()
    assert js["scenario"]["training"]["global_batch"] == 1536
    (reading,) = [a for a in js["assumed"] if a.get("given") == "1,538 sequences"]
    assert reading["value"] == 1536 and "read as 1,536" in reading["rule"] and "-0.1%" in reading["rule"]
    # a multiple is no reading; past 5 % (10 sequences where 12 are needed: +20 %) the check names it
    assert not [a for a in evaluate_scenario(sc(1536)).to_json()["assumed"] if a.get("given")]
    with pytest.raises(GpuplanError, match="global_batch=10 is not a multiple of dp×micro_batch = 12×1"):
        evaluate_scenario(sc(10))


def test_a_given_batch_is_read_as_the_roomiest_batch_within_its_rounding():
    # Llama 3.1 8B under PyTorch FSDP (no pipeline) on 384 L40S: tp 1, 2, 4 or 8 leaves dp 384, 192, 96 or 48, none
    # of which divides 2,048. The roomy batch (1,920: -6.25 %) is beyond the 5 % a rounded published batch is read
    # within; of those within it, 2,112 = 192 × 11 (+3.1 %) is split by dp 192, 96 and 48 alike — more layouts than
    # 2,064 = 48 × 43 (+0.8 %, dp 48 only) or 2,016 = 96 × 21 (-1.6 %)
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "l40s", "gpus": 384},
                         "training": {"seq_len": 4096, "global_batch": 2048, "tokens": 1e11,
                                      "framework": "fsdp"}})
    res = plan_scenario(sc).result
    assert res.global_batch == 2112 and res.no_split is None and res.best is not None
    assert 2112 % (res.best.layout.dp * res.best.layout.micro_batch) == 0
