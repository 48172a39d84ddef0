"""corpus.json: the cited corpus of published runs as gpuplan scenarios (made by tools/import_corpus.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario
from gpuplan.io.schema import LAYOUT_KEYS, TRAINING_KEYS
from gpuplan.spec.layout import check_fixed_layout
from gpuplan.spec.scenario import complete_layout

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "src" / "gpuplan" / "validation" / "corpus.json"
YAML = REPO.parent / "shared" / "validation" / "published_runs.yaml"
IMPORTER = REPO / "tools" / "import_corpus.py"

METRICS = {
    "throughput": {"tokens_per_s_per_gpu", "mfu", "hfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "step_s"},
    "gpu_hours": {"gpu_hours"},
    "memory": {"peak_memory_bytes", "model_state_bytes"},
}
ALL_METRICS = set().union(*METRICS.values())
FRACTIONS = {"mfu", "hfu"}
OPEN_NAMES = set(LAYOUT_KEYS) | set(TRAINING_KEYS) | {"gpus"}

ROWS = json.loads(CORPUS.read_text(encoding="utf-8"))["rows"]
SCORED = [r for r in ROWS if not r.get("skip")]


def _yaml_rows() -> list[dict]:
    if not YAML.is_file():
        pytest.skip(f"{YAML} not present (the corpus lives in the shared checkout)")
    return yaml.safe_load(YAML.read_text(encoding="utf-8"))["rows"]


def test_every_scored_row_parses_and_its_stated_layout_holds():
    """parse_scenario accepts every row; the stated layout fields obey the rules on their own
    (check_fixed_layout); a row with nothing open and a GPU count is a complete, consistent layout."""
    failures = []
    for row in SCORED:
        try:
            sc = parse_scenario(row["scenario"])
            check_fixed_layout(sc)
            if not row["open"] and "gpus" in row["scenario"]["hardware"]:
                complete_layout(sc)
        except GpuplanError as err:
            failures.append(f"{row['id']}: {err}")
    assert not failures, "\n".join(failures)


def _positive_finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def test_categories_metrics_and_values():
    assert len({r["id"] for r in ROWS}) == len(ROWS), "corpus ids are unique"
    for row in ROWS:
        assert row["category"] in METRICS, row["id"]
        assert row["source_key"] and row["source"], row["id"]
        if row.get("skip"):
            assert isinstance(row["skip"], str) and "scenario" not in row, row["id"]
            continue
        pub = row["published"]
        assert pub["metric"] in METRICS[row["category"]], row["id"]
        for metric, value in [(pub["metric"], pub["value"]), *pub["also"].items()]:
            assert metric in ALL_METRICS, (row["id"], metric)
            assert _positive_finite(value), (row["id"], metric, value)
            if metric in FRACTIONS:
                assert value <= 1, (row["id"], metric, value)
        stated = {**row["scenario"]["layout"], **row["scenario"]["training"], **row["scenario"]["hardware"]}
        assert set(row["open"]) <= OPEN_NAMES, row["id"]
        assert not set(row["open"]) & set(stated), f"{row['id']}: a stated field is not open"


def test_import_reproduces_corpus_json(tmp_path):
    _yaml_rows()
    out = tmp_path / "corpus.json"
    subprocess.run([sys.executable, str(IMPORTER), str(YAML), "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes() == CORPUS.read_bytes(), "corpus.json is stale: run python tools/import_corpus.py"


def test_every_corpus_row_is_converted_or_skipped():
    wanted = [r["id"] for r in _yaml_rows() if r["category"] in METRICS]
    have = {r["id"].split("#")[0] for r in ROWS}
    assert not [i for i in wanted if i not in have], "rows of the corpus missing from corpus.json"
    assert have == set(wanted), "corpus.json holds rows that are not in the corpus"


def test_corpus_json_is_package_data():
    assert (files("gpuplan") / "validation" / "corpus.json").is_file()


def test_memory_is_summarised_apart_for_the_model_state_table_and_the_measured_peaks():
    from gpuplan.validation.corpus_check import summarize

    rows = [{"category": "memory", "source_key": "a", "metric": "model_state_bytes", "error": 0.0},
            {"category": "memory", "source_key": "b", "metric": "peak_memory_bytes", "error": -0.2},
            {"category": "memory", "source_key": "b", "metric": "peak_memory_bytes", "error": 0.1},
            {"category": "throughput", "source_key": "a", "metric": "mfu", "error": 0.1},
            {"category": "throughput", "source_key": "a", "metric": "tokens_per_s", "error": 0.3}]
    s = summarize(rows)
    peaks = s["memory"]["by_metric"]["peak_memory_bytes"]
    assert peaks["n"] == 2 and peaks["median_abs_error"] == pytest.approx(0.15)
    assert s["memory"]["by_metric"]["model_state_bytes"]["n"] == 1
    assert s["throughput"]["by_metric"] == {}  # one quantity in several units


def _row(row_id: str) -> dict:
    return next(r for r in ROWS if r["id"] == row_id)


def test_the_constant_efficiency_calculator_answers_half_the_peak_over_the_model_flops():
    from gpuplan.validation.corpus_check import resolve, score_row

    # Llama 3 paper Table 4: 405B on 16,384 H100, MFU 41 % (as model FLOPs over the BF16 peak) — the calculator's MFU
    # is 50 % by construction, whatever the layout
    row = _row("llama3-405b-t4-16384gpu-seq8192")
    assert row["published"] == {"metric": "mfu", "value": 0.41, "also": {"model_tflops_per_gpu": 400}}
    scored = score_row(row, resolve(row))
    assert scored["baseline_error"] == pytest.approx(0.5 / 0.41 - 1)


def test_the_calculator_costs_gpu_hours_at_half_the_peak():
    from gpuplan.api import evaluate_scenario
    from gpuplan.validation.corpus_check import baseline_value, resolve

    # LLaMA paper Table 15: the 7B, 1T tokens, 82,432 GPU-hours on A100-80GB (bf16 peak 312 TFLOP/s)
    row = _row("llama1-7b")
    res = resolve(row)
    est = evaluate_scenario(res.scenario, res.layout)
    per_token = est.time.flops.model
    assert baseline_value(row, est) == pytest.approx(1e12 * per_token / (0.5 * 312e12) / 3600)


def test_validate_shows_the_calculator_beside_gpuplan_each_source_once():
    from gpuplan.report.measured import _baseline_lines

    s = {"baseline": {"efficiency": 0.5, "throughput": {
        "all": {"n": 3, "median_abs_error": 0.3, "within_15pct": 0.0, "within_25pct": 0.0, "median_error": 0.3},
        "by_source": {"a": {"median_abs_error": 0.1}, "b": {"median_abs_error": 0.4}, "c": {"median_abs_error": 0.5}}}},
         "cross_validated": {"throughput": {"all": {"n": 3, "median_abs_error": 0.15}, "by_source": {
             "a": {"median_abs_error": 0.2}, "b": {"median_abs_error": 0.1}, "c": {"median_abs_error": 0.1}}}}}
    lines = _baseline_lines(s)
    assert lines[1].endswith("(gpuplan 15.0%; calculator / gpuplan 2.0)")
    assert lines[2].endswith("median |error|  40.0%   (gpuplan 10.0%; calculator / gpuplan 4.0)")
