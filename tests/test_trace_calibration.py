"""training.trace_calibration: the activation ratio stored by `gpuplan trace --calibrate`, applied by
evaluate and plan (torch-free: read in parse_scenario, carried on Scenario.corrections.activations)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario


def _sc(**training):
    return parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                           "training": {"seq_len": 4096, **training},
                           "layout": {"zero": 3, "micro_batch": 2, "recompute": "none"}})


@pytest.fixture
def stored(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(tmp_path))
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"llama": {"n": 2, "states": 1.0, "activations": 1.125, "model_flops": 1.0,
                                          "updated": "2025-01-01"}}))
    return path


@pytest.mark.parametrize("ref", ["default", "path"])
def test_stored_calibration_scales_the_activations_exactly(stored, ref):
    base = evaluate(_sc()).to_json()["memory"]
    cal = evaluate(_sc(trace_calibration=str(stored) if ref == "path" else "default")).to_json()["memory"]
    assert cal["activations"] == pytest.approx(base["activations"] * 1.125, rel=1e-12)
    assert cal["activations_per_microbatch"] == pytest.approx(base["activations_per_microbatch"] * 1.125, rel=1e-12)
    for k in ("weights", "gradients", "optimizer"):
        assert cal[k] == base[k]


def test_without_the_key_nothing_changes(stored):
    assert _sc().corrections.activations == 1.0
    assert evaluate(_sc()).to_json()["memory"] == evaluate(_sc(trace_calibration=None)).to_json()["memory"]


@pytest.mark.parametrize(("content", "needle"), [
    (None, "not found: run `gpuplan trace --calibrate`"),
    ("not json", "is not a calibration file"),
    (json.dumps({"gpu": "h100", "memory_factor": 1.1}), "is not a calibration file"),
    (json.dumps({"qwen2": {"n": 1, "activations": 1.1}}), "has no calibration for llama"),
])
def test_missing_or_foreign_file_is_one_clear_error(tmp_path, content, needle):
    path = tmp_path / "cal.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(GpuplanError) as err:
        _sc(trace_calibration=str(path))
    assert needle in str(err.value) and "training.trace_calibration" in str(err.value)
    assert "\n" not in str(err.value)


def test_plan_uses_it_without_importing_torch(stored):
    code = ("import sys, json; from gpuplan.io.scenario import parse_scenario; "
            "from gpuplan.model.estimate import evaluate; "
            f"sc = parse_scenario({{'model': 'llama-3.1-8b', 'hardware': {{'gpu': 'h100-sxm', 'gpus': 8}}, "
            f"'training': {{'trace_calibration': {str(stored)!r}}}}}); "
            "print(sc.corrections.activations, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1.125", "False"]
