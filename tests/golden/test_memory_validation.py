"""The memory model against published, measured per-GPU peaks (src/gpuplan/validation/memory_runs.json).

No constant was fitted to these rows: the terms come from papers and framework source code; the
two places that read framework code (torchtitan's per-op SAC policy, eager cross-entropy's 12 B
per logit) are documented in activations.py.
"""

from gpuplan.validation.memory_check import score_memory_runs


def test_high_trust_rows_median_error_under_10_percent():
    # source: torchtitan docs/performance.md Tables 1-6 and torchao float8 README (measured
    # max_memory_reserved on H100), rows marked trust=high.
    s = score_memory_runs()["summary"]["high"]
    assert s["n"] >= 12
    assert s["median_abs_error"] < 0.10
    assert s["within_15pct"] >= 0.8
    assert s["max_abs_error"] < 0.25


def test_all_scored_rows_median_error_under_15_percent():
    s = score_memory_runs()["summary"]["all"]
    assert s["n"] >= 20
    assert s["median_abs_error"] < 0.15


def test_rows_missing_a_deciding_setting_are_skipped_with_a_reason():
    skipped = score_memory_runs()["skipped"]
    assert skipped and all(s["why"] for s in skipped)
