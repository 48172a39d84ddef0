"""Trial runs on CPU/gloo (2 ranks, FSDP2), the store, calibration and the failure paths."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.profile.calibrate import calibrate
from gpuplan.profile.run import _bisect, _gpu_of
from gpuplan.profile.store import Store

TINY = ("{model_type: llama, num_hidden_layers: 2, hidden_size: 256, num_attention_heads: 4, "
        "num_key_value_heads: 2, intermediate_size: 512, vocab_size: 1000, max_position_embeddings: 512}")
CLI = [sys.executable, "-m", "gpuplan.cli"]


def _cli(*args: str, env_store=None, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    pytest.importorskip("torch")
    store = tmp_path_factory.mktemp("store") / "runs.sqlite3"
    out = _cli("profile", "--model", TINY, "--gpu", "h100-sxm", "--device", "cpu", "--nproc", "2", "--steps", "2",
               "--warmup", "1", "--seq-len", "128", "--zero", "3", "--micro-batch", "2", "--precision", "bf16",
               "--store", str(store), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), store


def test_two_rank_fsdp2_model_states_match_prediction_within_5_percent(cpu_run):
    rep, _ = cpu_run
    # FSDP2 mixed precision keeps fp32 shards (4 B) + fp32 grads (4 B) + AdamW (8 B): 16 B/param over
    # 2 ranks — the same total as the ZeRO convention (2 + 2 + 12) the prediction uses.
    assert rep["ratio"]["model_states"] == pytest.approx(1.0, abs=0.05)
    m = rep["measured"]["memory"]
    # the tiny Llama has 1,692,928 parameters: 16 B each, halved by the 2-way shard
    assert m["model_states"] == 16 * 1_692_928 // 2
    assert rep["measured"]["time"]["tokens_per_s"] > 0


def test_run_is_recorded_in_the_store(cpu_run):
    rep, store = cpu_run
    runs = Store(store).runs()
    assert len(runs) == 1 and runs[0]["id"] == rep["stored"]
    assert runs[0]["gpu"] == "cpu" and runs[0]["measured"]["memory"]["model_states"] == 13_543_424


def test_store_rejects_foreign_and_corrupt_files(tmp_path):
    text = tmp_path / "notes.sqlite3"
    text.write_text("hello")
    with pytest.raises(GpuplanError, match="not a gpuplan store"):
        Store(text)
    other = tmp_path / "other.sqlite3"
    con = sqlite3.connect(other)
    con.execute("create table customers (id int)")
    con.commit()
    con.close()
    with pytest.raises(GpuplanError, match="another program"):
        Store(other)
    corrupt = tmp_path / "corrupt.sqlite3"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(GpuplanError, match="corrupt"):
        Store(corrupt)


def _fake_run(store: Store, gpu: str, mem_ratio: float, tps_ratio: float, i: int) -> None:
    predicted = {"memory": {"total": 50e9 + i}, "time": {"tokens_per_s": 1e5 + i}}
    measured = {"memory": {"total": predicted["memory"]["total"] * mem_ratio},
                "time": {"tokens_per_s": predicted["time"]["tokens_per_s"] * tps_ratio}}
    store.add_run(kind="profile", gpu=gpu, model="m", layout={}, scenario={}, measured=measured, predicted=predicted)


def test_calibrate_lowers_error_on_stored_runs_and_not_raises_validation_error(tmp_path):
    store = Store(tmp_path / "runs.sqlite3")
    for i, (mr, tr) in enumerate([(1.08, 0.90), (1.10, 0.92), (1.12, 0.88)]):
        _fake_run(store, "h200", mr, tr, i)  # h200 has no published validation rows
    for i in range(3):
        _fake_run(store, "h100-sxm", 1.05, 1.30, i)  # would raise the H100 validation error if applied fully
    res = calibrate(store)["gpus"]
    h200 = res["h200"]
    assert h200["memory_factor"] == pytest.approx(1.10, rel=1e-3)
    assert h200["compute_factor"] == pytest.approx(0.90, rel=1e-3)
    assert h200["memory_error_after"] < h200["memory_error_before"]
    assert h200["throughput_error_after"] < h200["throughput_error_before"]
    h100 = res["h100-sxm"]
    assert h100["validation_error_after"] <= h100["validation_error_before"] + 1e-12
    assert h100["compute_factor"] < h100["compute_factor_fitted"]  # shrunk toward 1
    assert store.calibration("h200") == pytest.approx((1.10, 0.90), rel=1e-3)


def test_calibration_is_applied_when_a_scenario_asks_for_it(tmp_path):
    from conftest import make

    from gpuplan.estimate import evaluate

    store = Store(tmp_path / "runs.sqlite3")
    store.set_calibration("h100-sxm", 1.2, 0.8, 3)
    plain = evaluate(make("llama-3.1-8b", gpus=8, layout={"zero": 3}))
    cal = evaluate(make("llama-3.1-8b", gpus=8, layout={"zero": 3},
                        hardware={"calibration": str(tmp_path / "runs.sqlite3")}))
    assert cal["memory"]["total"] == pytest.approx(1.2 * plain["memory"]["total"])
    assert cal["time"]["compute_s"] == pytest.approx(plain["time"]["compute_s"] / 0.8, rel=0.05)


def test_bisection_finds_the_largest_micro_batch():
    tried = []

    def attempt(mb):
        tried.append(mb)
        return [{"oom": mb > 13}], None

    assert _bisect(attempt, 1, 64) == 13
    assert len(tried) <= 8


@pytest.mark.parametrize(("name", "gpu"), [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
                                           ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"), ("NVIDIA L4", "l4"),
                                           ("AMD Instinct MI300X", "mi300x")])
def test_device_names_map_to_the_catalogue(name, gpu):
    assert _gpu_of(name, "?") == gpu


def test_no_gpu_is_one_clear_line():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    out = _cli("profile", "--model", TINY, "--gpu", "h100-sxm", "--device", "cuda")
    assert out.returncode == 2 and "no CUDA GPU" in out.stderr and "Traceback" not in out.stderr


def test_timeout_stops_the_run_and_its_ranks():
    pytest.importorskip("torch")
    import os
    import uuid
    from pathlib import Path

    tag = uuid.uuid4().hex  # inherited by torchrun and its ranks: finds exactly this run's processes
    out = subprocess.run([*CLI, "profile", "--model", TINY, "--gpu", "h100-sxm", "--device", "cpu", "--nproc", "2",
                          "--steps", "1000", "--timeout", "8", "--seq-len", "128", "--no-store"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "GPUPLAN_TEST_TAG": tag})
    assert out.returncode == 2 and "did not finish within 8 s" in out.stderr
    left = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if tag.encode() in environ.read_bytes():
                left.append(environ.parent.name)
        except OSError:
            continue
    assert left == []


def test_an_unsupported_model_fails_in_the_rank_with_a_clear_message():
    pytest.importorskip("torch")
    out = _cli("profile", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--device", "cpu", "--nproc", "1",
               "--no-store", "--seq-len", "64")
    assert out.returncode == 2 and "rank 0 failed" in out.stderr and "dense" in out.stderr
