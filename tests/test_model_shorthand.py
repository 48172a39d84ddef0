"""A model name where the scenario file goes: ``gpuplan evaluate llama-3.1-8b --gpu h100-sxm`` and
``gpuplan.plan("llama-3.1-8b", gpu="h100-sxm")`` read it as the scenario's model; a file that exists wins, and a
model given twice is refused."""

from __future__ import annotations

import json

import pytest

import gpuplan
from gpuplan.cli import main
from gpuplan.errors import GpuplanError


def test_the_cli_reads_a_model_name_as_the_model(capsys):
    assert main(["evaluate", "llama-3.1-8b", "--gpu", "h100-sxm", "--method", "lora", "--tokens", "1e7",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["model"] == "llama-3.1-8b"
    assert out["memory"]["total"] == gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", method="lora",
                                                      tokens=1e7).to_json()["memory"]["total"]


def test_the_python_api_reads_it_too():
    a = gpuplan.evaluate("mistral-7b", gpu="a100-80gb-sxm", gpus=8, method="lora", tokens=1e7).to_json()
    b = gpuplan.evaluate(model="mistral-7b", gpu="a100-80gb-sxm", gpus=8, method="lora", tokens=1e7).to_json()
    assert a["memory"] == b["memory"] and a["time"]["step_s"] == b["time"]["step_s"]
    # plan with no GPU named searches the catalogue, as plan(model=...) does
    p = gpuplan.plan("llama-3.2-1b", method="lora", tokens=1e6, gpu="l4")
    assert p.best is not None and p.best.layout.dp * p.best.layout.tp * p.best.layout.pp >= 1


def test_a_model_given_twice_is_refused():
    with pytest.raises(GpuplanError, match="names a model and the model is also given as 'qwen2.5-7b'"):
        gpuplan.evaluate("llama-3.1-8b", model="qwen2.5-7b", gpu="h100-sxm")


def test_a_file_that_exists_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llama-3.1-8b").write_text("model: qwen2.5-7b\nhardware: {gpu: h100-sxm}\n"
                                           "training: {method: lora, tokens: 1e7}\n")
    assert gpuplan.evaluate("llama-3.1-8b").to_json()["scenario"]["model"] == "qwen2.5-7b"


def test_neither_a_file_nor_a_model_says_both(capsys):
    assert main(["evaluate", "no-such-thing"]) == 2
    err = capsys.readouterr().err
    assert "scenario file 'no-such-thing' not found" in err and "or a model id the catalogue knows" in err


def test_a_name_with_its_stated_size_is_the_model_of_that_size():
    from gpuplan.catalog.models import load_model

    # a paper's "StarCoder 15.5B": the catalogue's StarCoder, whose count the size states (within a paper's rounding)
    spec = load_model("StarCoder 15.5B")
    assert spec.name == "StarCoder" and "15.5B" in spec.assumed[-1]
    # a size the model does not have is not read as it
    with pytest.raises(GpuplanError, match="unknown model 'StarCoder 7B'"):
        load_model("StarCoder 7B")
    # NeMo's GPT-3 configs and MT-NLG as NVIDIA's pages name them
    assert load_model("NeMo Megatron GPT 5B").name == "GPT-3 5B (NeMo)"
    assert load_model("Megatron 530B").name == "Megatron-Turing NLG 530B"
