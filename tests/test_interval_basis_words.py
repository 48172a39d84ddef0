"""The line under an answer's time table that says which held-out runs its 80 % intervals come from
(report/spans.py ``basis_line``): the regime of catalog/intervals.py in words, and a widening for unmeasured kernels."""

from __future__ import annotations

import gpuplan
from gpuplan.report.spans import basis_line


def test_the_regime_is_said_in_words():
    line = basis_line({"interval_basis": {"regime": "standard|named|hopper|cluster", "runs": 35}})
    assert line == ("\n80% intervals: from 35 leave-one-source-out predictions of published runs like this one "
                    "(sequences up to 8,192 tokens, the framework named, Hopper GPUs, 2 to 512 GPUs over nodes)")


def test_a_widening_is_said_after_the_regime():
    line = basis_line({"interval_basis": {"regime": "long, 12% of the step on unmeasured kernels", "runs": 79}})
    assert line.endswith("(sequences past 8,192 tokens); widened: 12% of the step on unmeasured kernels")


def test_no_interval_no_line():
    assert basis_line({"interval_basis": None}) == ""
    assert basis_line({}) == ""


def test_a_128k_run_is_answered_from_the_long_context_runs():
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, seq_len=131072, global_batch=8,
                           framework="torchtitan", dp=2, cp=4, zero=3, micro_batch=1, recompute="full").to_json()
    assert est["time"]["interval_basis"]["regime"] == "long"
    assert "sequences past 8,192 tokens" in basis_line(est["time"])
