"""The installed command, run as a user would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "gpuplan.cli"]
# a user's GPU with no published compute peak (tests/data/no_peak_gpu.yaml)
NO_PEAK = str(Path(__file__).parent / "data" / "no_peak_gpu.yaml")


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_console_script_is_installed():
    assert shutil.which("gpuplan") is not None
    out = subprocess.run(["gpuplan", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "evaluate" in out.stdout


def test_evaluate_example_json_has_the_contract_keys():
    out = run("evaluate", "--example", "--json")
    assert out.returncode == 0, out.stderr
    est = json.loads(out.stdout)
    assert set(est) >= {"scenario", "model", "memory", "time", "cost"}
    assert set(est["memory"]) >= {"weights", "gradients", "optimizer", "activations", "other", "total",
                                  "capacity", "fits"}
    assert set(est["time"]) >= {"step_s", "compute_s", "comm_exposed_s", "bubble_s", "tokens_per_s",
                                "tokens_per_s_per_gpu", "model_flops_per_token", "mfu", "hfu", "train_s",
                                "gpu_hours"}
    assert set(est["cost"]) >= {"usd", "usd_per_gpu_hour"}
    assert set(est["scenario"]["layout"]) >= {"dp", "tp", "pp", "cp", "ep", "zero", "micro_batch", "recompute",
                                              "sequence_parallel", "pp_schedule", "offload"}
    assert est["scenario"]["layout"]["dp"] == 4  # derived: 64 GPUs / (tp 4 × pp 4)
    assert est["memory"]["fits"] is True


def test_evaluate_human_output_names_units():
    out = run("evaluate", "--example")
    assert out.returncode == 0, out.stderr
    assert "GiB" in out.stdout and "FITS" in out.stdout


def test_fit_70b_h100_flags_only():
    # source: the guide — a 70B model with Adam needs on the order of 16 H100s
    out = run("fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # generic stack: fp32 gradients (18 B/param of model state, Megatron's accounting) and a sure fit
    # (the peak's 80 % interval's upper end) — one power of two above the guide's 16 (16 B/param, at
    # the point estimate: tests/golden/test_guide.py)
    assert res["min_gpus"] == 32 and res["min_gpus_at_point"] <= 32
    assert res["best"]["memory"]["fits"]
    assert res["best"]["memory"]["interval"]["total"]["p90"] <= res["best"]["memory"]["capacity"]
    assert res["best"]["scenario"]["hardware"]["gpus"] == 32


def test_fit_several_gpu_types_gives_one_answer_each():
    out = run("fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,mi300x", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert [r["gpu"] for r in res] == ["h100-sxm", "mi300x"]
    assert res[1]["min_gpus"] <= res[0]["min_gpus"]  # 192 GB holds what 80 GB holds


def test_list_file_gives_list_with_error_entry(tmp_path):
    f = tmp_path / "many.yaml"
    f.write_text(
        "- {model: llama-3.1-8b, hardware: {gpu: h100-sxm, gpus: 8}, layout: {zero: 3}}\n"
        "- {model: llama-3.1-8b, hardware: {gpu: h100-sxm, gpus: 8}, layout: {tp: 3}}\n"
        "- {model: no-such-model, hardware: {gpu: h100-sxm}}\n")
    out = run("evaluate", str(f), "--json")
    # issue 22 item 7: the others are answered, and the exit status says that some item failed
    assert out.returncode == 1, out.stderr
    res = json.loads(out.stdout)
    assert len(res) == 3
    assert res[0]["memory"]["total"] > 0
    assert "tp×pp×cp = 3" in res[1]["error"]
    assert "no-such-model" in res[2]["error"]
    text = run("evaluate", str(f))
    assert text.returncode == 1 and "2 of 3 items failed: items 2, 3" in text.stderr
    good = tmp_path / "good.yaml"
    good.write_text("- {model: llama-3.1-8b, hardware: {gpu: h100-sxm, gpus: 8}, layout: {zero: 3}}\n")
    assert run("evaluate", str(good)).returncode == 0


@pytest.mark.parametrize(("args", "needle"), [
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h1000"], "unknown GPU 'h1000'"),
    (["fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "-4"], "must be positive"),
    (["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "3"], "tp×pp×cp"),
    (["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--dp", "3", "--tp", "2"],
     "make the product equal the GPU count"),
    (["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "6", "--tp", "6"], "does not divide"),
    (["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--precision", "fp12"], "training.precision"),
    (["evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--scale-out", "nvlink4"], "scale_out"),
    (["evaluate"], "give a scenario file"),
    (["evaluate", "missing.yaml"], "not found"),
    (["evaluate", "--bogus"], "unrecognized arguments"),
])
def test_bad_input_is_one_clear_line_exit_2(args, needle):
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert needle in lines[0]


def test_unknown_gpu_suggests_closest():
    out = run("fit", "--model", "llama-3.1-8b", "--gpu", "h100-sxn")
    assert "did you mean h100-sxm" in out.stderr


def test_unknown_scenario_key_lists_valid_keys(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\nlayout: {tensor_slicing: 2}\n")
    out = run("evaluate", str(f))
    assert out.returncode == 2
    assert "unknown key layout.tensor_slicing" in out.stderr and "tp" in out.stderr


def test_malformed_yaml_names_the_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm\n")
    out = run("evaluate", str(f))
    assert out.returncode == 2 and "malformed YAML" in out.stderr and "line" in out.stderr


def test_config_json_path_relative_to_scenario(tmp_path):
    (tmp_path / "cfg.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}))
    (tmp_path / "s.yaml").write_text("model: cfg.json\nhardware: {gpu: l4}\ntraining: {seq_len: 512}\n")
    out = run("evaluate", str(tmp_path / "s.yaml"), "--json")  # cfg.json is found beside the scenario
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"]["params"] > 0


def test_gpus_and_models_catalogue_commands():
    out = run("gpus", "--json")
    assert out.returncode == 0
    ids = {g["id"] for g in json.loads(out.stdout)}
    assert {"h100-sxm", "b200", "mi300x"} <= ids
    out = run("models")
    assert out.returncode == 0 and "llama-3.1-405b" in out.stdout
    # the text table covers every GPU, also those whose source publishes no peak or TDP (a user's, as the
    # catalogue's all have a peak)
    out = run("gpus", "--catalog", NO_PEAK)
    assert out.returncode == 0, out.stderr
    lab = next(line for line in out.stdout.splitlines() if line.startswith("lab-24gb "))
    assert lab.split()[3] == "-" and lab.split()[7] == "-"  # bf16 TFLOPS and TDP not published
    assert len(out.stdout.splitlines()) == 2 + len(ids) + 1


def test_plan_with_a_gpu_that_has_no_published_peak_beside_the_user_layout():
    # the example fixes a layout; on a GPU with no published compute peak that layout has no time to
    # compare with, which must not break the advice for the other type
    out = run("plan", "--catalog", NO_PEAK, "--example", "--gpu", "lab-24gb,h100-sxm", "--objective", "cost", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert {c["scenario"]["hardware"]["gpu"] for c in res["candidates"]} == {"h100-sxm"}


def test_fit_takes_all_gpu_types_like_plan():
    out = run("fit", "--example", "--gpu", "all", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    ids = {g["id"] for g in json.loads(run("gpus", "--json").stdout)}
    assert len(rows) == len(ids)
    # types without a catalogued bf16 peak (Volta and Turing: V100, V100S, T4, RTX 2080 Ti, TITAN RTX, Quadro RTX: no
    # bf16 tensor cores) say so, the others are fitted
    no_bf16 = {"v100-32gb", "v100-16gb", "v100-pcie-32gb", "v100-pcie-16gb", "v100s-pcie", "t4", "rtx-2080-ti",
               "titan-rtx", "quadro-rtx-8000", "quadro-rtx-6000"}
    errors = [r["error"] for r in rows if "error" in r]
    assert sorted(errors) == sorted(
        f"{g} has no bf16 tensor cores in the catalogue: set training.precision: fp16" for g in no_bf16)
    assert {r["gpu"] for r in rows if "gpu" in r} == ids - no_bf16
    by_gpu = {r["gpu"]: r["min_gpus"] for r in rows if "gpu" in r}
    # the example fixes hardware.gpus: 64, so fit answers there (DESIGN §2: a given field is never
    # searched): the 70B (tp 4 × pp 4 fixed) fits 64 A100 80 GB as it is; on 64 A100 40 GB only the
    # peak's point estimate fits (its 80 % interval's upper end does not): no sure fit, TIGHT at 64
    assert by_gpu["a100-80gb-sxm"] == 64 and by_gpu["a100-40gb-sxm"] is None
    point = {r["gpu"]: r["min_gpus_at_point"] for r in rows if "gpu" in r}
    assert point["a100-40gb-sxm"] == 64
    forty = next(r for r in rows if r.get("gpu") == "a100-40gb-sxm")
    assert forty["closest_total"] <= forty["capacity"] < forty["closest_high"]
    offload = {r["gpu"]: r["best"]["scenario"]["layout"]["offload"] for r in rows if r.get("best")}
    assert offload["a100-80gb-sxm"] == "none"


def test_fabrics_lists_the_interconnect_catalogue(capsys):
    from gpuplan.cli import main

    assert main(["fabrics", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in rows}
    # the networks the README names as scale_out values are listed
    assert {"ib-ndr-400g", "roce-400g", "eth-10g", "nvlink4"} <= ids
    assert main(["fabrics"]) == 0 and "ib-ndr-400g" in capsys.readouterr().out
