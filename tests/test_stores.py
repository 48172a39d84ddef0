"""gpuplan's local files: one path policy (cache folder, run store, trace calibration) and one set
of words for hardware.calibration and training.trace_calibration (gpuplan.io.stores)."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.io.stores import (
    Store,
    activation_factor,
    cache_dir,
    calibration_factors,
    choose,
    record_ratios,
    store_path,
    trace_activation_factor,
    trace_calibration_path,
)

ENVS = ("GPUPLAN_CACHE_DIR", "GPUPLAN_STORE", "XDG_CACHE_HOME")
OFF = [None, False, "", "  ", "false", "FALSE", "no", "No", "off", "none", " None "]
DEFAULT = [True, "default", "DEFAULT", "true", "yes", "on", " On "]


@pytest.fixture
def clean_env(monkeypatch):
    for env in ENVS:
        monkeypatch.delenv(env, raising=False)
    return monkeypatch


@pytest.fixture
def cache(tmp_path, clean_env):
    clean_env.setenv("GPUPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_one_cache_folder_for_both_files(tmp_path, clean_env):
    clean_env.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "gpuplan"
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store_path() == tmp_path / "xdg" / "gpuplan" / "runs.sqlite3"
    assert trace_calibration_path() == tmp_path / "xdg" / "gpuplan" / "calibration.json"
    clean_env.setenv("GPUPLAN_CACHE_DIR", str(tmp_path / "mine"))
    assert store_path() == tmp_path / "mine" / "runs.sqlite3"
    assert trace_calibration_path() == tmp_path / "mine" / "calibration.json"
    clean_env.setenv("GPUPLAN_STORE", str(tmp_path / "elsewhere.sqlite3"))
    assert store_path() == tmp_path / "elsewhere.sqlite3"
    assert trace_calibration_path() == tmp_path / "mine" / "calibration.json"


def test_a_cache_folder_on_a_file_names_its_variable(tmp_path, clean_env):
    (tmp_path / "afile").write_text("x")
    clean_env.setenv("GPUPLAN_CACHE_DIR", str(tmp_path / "afile"))
    with pytest.raises(GpuplanError, match="from GPUPLAN_CACHE_DIR.*afile is a file"):
        Store()


@pytest.mark.parametrize("word", OFF)
def test_the_off_words_are_the_same_for_both_keys(word, tmp_path, clean_env):
    clean_env.chdir(tmp_path)
    assert choose(word, "k", "x") is None
    assert calibration_factors(word, "h100-sxm") is None
    assert trace_activation_factor(word, "llama") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("word", DEFAULT)
def test_the_default_words_are_the_same_for_both_keys(word, cache):
    s = Store(create=True)
    s.set_calibration("h100-sxm", 1.2, 0.8, 1)
    s.close()
    (cache / "calibration.json").write_text(json.dumps({"llama": {"n": 1, "activations": 1.125}}))
    assert calibration_factors(word, "h100-sxm") == pytest.approx((1.2, 0.8))
    assert trace_activation_factor(word, "llama") == 1.125


def test_a_path_object_is_a_path_for_both_keys(tmp_path, clean_env):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"llama": {"n": 1, "activations": 0.9}}))
    assert trace_activation_factor(path, "llama") == 0.9
    assert trace_activation_factor(f" {path} ", "llama") == 0.9
    with pytest.raises(GpuplanError, match="hardware.calibration: there is no gpuplan store"):
        calibration_factors(tmp_path / "runs.sqlite3", "h100-sxm")


@pytest.mark.parametrize("value", [0, 5, 1.5, ["a"], {"a": 1}])
def test_a_value_that_is_not_a_word_or_a_path_is_refused(value):
    with pytest.raises(GpuplanError, match="hardware.calibration must be default, false or the path"):
        calibration_factors(value, "h100-sxm")
    with pytest.raises(GpuplanError, match="training.trace_calibration must be default or the path"):
        trace_activation_factor(value, "llama")


def test_the_default_trace_file_as_a_folder_says_folder(cache):
    (cache / "calibration.json").mkdir(parents=True)
    with pytest.raises(GpuplanError, match="training.trace_calibration: .* is a folder"):
        activation_factor("default", "llama")


def test_record_ratios_keeps_running_means_per_architecture(cache):
    path, entry = record_ratios("llama", {"states": 1.0, "activations": 1.2, "model_flops": None})
    assert path == cache / "calibration.json" and entry["n"] == 1 and "model_flops" not in entry
    _, entry = record_ratios("llama", {"states": 1.0, "activations": 1.0, "model_flops": 1.1})
    assert entry["n"] == 2 and entry["activations"] == pytest.approx(1.1) and entry["model_flops"] == 1.1
    record_ratios("qwen2", {"activations": 0.9})
    stored = json.loads(path.read_text())
    assert set(stored) == {"llama", "qwen2"} and stored["llama"]["n"] == 2
    assert trace_activation_factor("default", "llama") == pytest.approx(1.1)
    assert sorted(p.name for p in cache.iterdir()) == ["calibration.json"]  # no temporary file left


@pytest.mark.parametrize("content", ["not json", "[1, 2]", json.dumps({"llama": [1]}),
                                     json.dumps({"llama": {"n": "x", "activations": "y"}})])
def test_record_ratios_over_a_broken_file_starts_afresh(cache, content):
    cache.mkdir()
    (cache / "calibration.json").write_text(content)
    _, entry = record_ratios("llama", {"activations": 1.25})
    assert entry["n"] == 1 and entry["activations"] == 1.25


def test_record_ratios_where_no_folder_can_be_made_is_one_line(tmp_path, clean_env):
    (tmp_path / "afile").write_text("x")
    clean_env.setenv("GPUPLAN_CACHE_DIR", str(tmp_path / "afile" / "cache"))
    with pytest.raises(GpuplanError, match="cannot write the trace calibration .*GPUPLAN_CACHE_DIR") as err:
        record_ratios("llama", {"activations": 1.0})
    assert "\n" not in str(err.value)
