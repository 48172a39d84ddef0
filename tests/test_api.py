"""The public Python API: keyword arguments are the scenario fields, the answers equal the CLI's
JSON, bad input is the CLI's one-line GpuplanError, and the README's example runs as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import gpuplan
from gpuplan.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _cli_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_equals_the_cli(capsys):
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, micro_batch=2)
    cli = _cli_json(capsys, "evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--zero", "3",
                    "--seq-len", "8192", "--micro-batch", "2")
    assert est.to_json() == cli
    assert est.memory.total == cli["memory"]["total"] and est.time is not None
    assert est.time.step_s == cli["time"]["step_s"] and est.layout.dp == 8


def test_fit_and_plan_agree_with_the_cli(capsys):
    f = gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm")
    # the guide's 16 is at its 16 B/param (tests/golden/test_guide.py); a sure fit under the generic
    # stack's fp32 gradients is one power of two above
    assert f.min_gpus == 32
    assert f.to_json() == _cli_json(capsys, "fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm")
    p = gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", tokens="1T", max_gpus=64)
    cli = _cli_json(capsys, "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "1T",
                    "--max-gpus", "64")
    assert p.to_json() == cli
    assert p.best is not None and p.best.scenario.hardware.gpus == cli["best"]["scenario"]["hardware"]["gpus"]
    assert p.equilibrium.gpus == cli["equilibrium"]["gpus"]
    assert [pt.gpus for pt in p.scaling] == [r["gpus"] for r in cli["scaling"]]


def test_plan_options_take_units_as_the_cli_does(capsys):
    # one parser for plan options (io/options.py): the CLI's units work in the Python API too
    p = gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", tokens="1T", max_gpus="64", deadline_s="14d",
                     budget="$50k", top="3", threshold="80%")
    assert p.result.options.deadline_s == 14 * 86400 and p.result.options.budget_usd == 50_000
    assert p.result.options.threshold == 0.8 and p.result.options.max_gpus == 64
    cli = _cli_json(capsys, "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--max-gpus",
                    "64", "--deadline", "14d", "--budget", "$50k", "--top", "3", "--threshold", "0.8")
    assert p.to_json() == cli
    # seconds and USD as plain numbers, as the names say
    q = gpuplan.plan(model="llama-3.1-8b", gpu="h100-sxm", tokens="1T", max_gpus=64, deadline_s=14 * 86400,
                     budget=50_000, top=3)
    assert q.to_json() == cli


def test_a_scenario_file_with_keyword_overrides(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.2-1b\nhardware: {gpu: h100-sxm, gpus: 2}\n")
    est = gpuplan.evaluate(str(f), gpus=4)
    assert est.scenario.hardware.gpus == 4 and est.scenario.model.name == "Llama-3.2-1B"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"model": "llama-3.1-8b", "gpu": "h100-sxm", "zero": 7}, "layout.zero must be 0, 1, 2 or 3, got 7"),
    ({"model": "llama-3.1-8b", "gpu": "no-such-gpu"}, "unknown GPU 'no-such-gpu'"),
    ({"model": "llama-3.1-8b", "gpu": "h100-sxm", "colour": "red"}, "unknown scenario field 'colour'"),
    ({"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 3, "tp": 3},
     "layout.tp=3 does not divide the 32 attention heads"),
])
def test_bad_input_is_the_clis_one_line_error(kwargs, message):
    with pytest.raises(gpuplan.GpuplanError) as err:
        gpuplan.evaluate(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_catalogue_lookups():
    assert gpuplan.get_gpu("H100").id == "h100-sxm"
    # source: Llama 3.1 8B model card / safetensors index, 8,030,261,248 parameters
    assert gpuplan.load_model("llama-3.1-8b").params == 8_030_261_248


def test_readme_python_example_runs():
    code = re.search(r"## Python API.*?```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[2] == "32" and lines[3] == "layout.zero must be 0, 1, 2 or 3, got 7"


def test_python_dash_m_gpuplan():
    out = subprocess.run([sys.executable, "-m", "gpuplan", "evaluate", "--example", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["scenario"]["hardware"]["gpus"] == 64


def test_mypy_passes_on_the_public_api():
    pytest.importorskip("mypy")
    root = README.parent
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(("gpu", "message"), [
    ("{base: h100-sxm, memory_gib: .inf}", "hardware.gpu.memory_gib must be a positive number"),
    ("{bf16_dense_tflops: 125}", "needs base"),
    ("{base: a10g, colour: red}", "hardware.gpu.colour is not a GPU field"),
    ("{oops", "looks like a mapping but does not parse"),
    ("{base: [1]}", "hardware.gpu.base must be a name"),
])
def test_an_inline_gpu_is_checked(gpu, message, capsys):
    assert main(["evaluate", "--model", "llama-3.1-8b", "--gpu", gpu]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_inline_gpu_replaces_a_peak():
    # source: NVIDIA A10 datasheet — 125 TFLOPS dense BF16 (the catalogue's a10g, AWS's variant, lists 70)
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu={"base": "a10g", "bf16_dense_tflops": 125}, gpus=1,
                           method="qlora")
    assert est.time is not None and est.scenario.hardware.gpu.peak_flops["bf16"] == 125e12
    assert est.scenario.hardware.gpu.memory_bytes == gpuplan.get_gpu("a10g").memory_bytes


def _readme_commands() -> list[list[str]]:
    """The README's `gpuplan evaluate|fit|plan --model …` example lines, as argument lists (flags only:
    output files and scenario files left out)."""
    out = []
    for line in README.read_text(encoding="utf-8").splitlines():
        line = line.split("  #")[0].strip()
        if re.match(r"gpuplan (evaluate|fit|plan) --model ", line) and " -o " not in line:
            out.append(shlex.split(line)[1:])
    return out


def _readme_bodies() -> list[tuple[str, dict]]:
    """The README's curl examples for /api/evaluate, /api/fit and /api/plan, with their JSON bodies."""
    found = re.findall(r"curl -s localhost:8000/api/(evaluate|fit|plan)\s+-d '(\{.*?\})'",
                       README.read_text(encoding="utf-8"))
    return [(cmd, json.loads(body)) for cmd, body in found]


def test_readme_examples_answer_with_layouts_that_fit(capsys):
    # issue 22 item 8: every CLI example and API body in the README answers with a plan that fits
    commands = _readme_commands()
    assert len(commands) >= 4
    for args in commands:
        args = [a for i, a in enumerate(args) if a not in ("--plot", "--report")
                and args[i - 1] not in ("--plot", "--report")]
        assert main([*args, "--json"]) == 0, args
        res = json.loads(capsys.readouterr().out)
        for r in res if isinstance(res, list) else [res]:
            if args[0] == "evaluate":
                assert r["memory"]["fits"], args
            else:
                assert r["best"] is not None and r["best"]["memory"]["fits"], args
    bodies = _readme_bodies()
    assert {cmd for cmd, _ in bodies} == {"evaluate", "fit", "plan"}
    for cmd, body in bodies:
        gpus = body["gpu"].split(",") if cmd == "fit" else [body["gpu"]]  # the server answers fit per type
        for gpu in gpus:
            res = getattr(gpuplan, cmd)(**(body | {"gpu": gpu})).to_json()
            mem = res["memory"] if cmd == "evaluate" else res["best"]["memory"]
            assert mem["fits"], (cmd, body)
