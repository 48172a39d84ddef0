"""fp32 against tf32: PyTorch leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32 = False since 1.12,
https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices), so an fp32 run's
matmuls run on the vector units at the fp32 peak; the precision word tf32 puts them on the TF32 tensor cores."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate_scenario
from gpuplan.catalog.hardware import make_hardware
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.compute import device
from gpuplan.spec import Training

RUN = {"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 1},
       "training": {"seq_len": 2048, "global_batch": 4, "framework": "hf-trainer"},
       "layout": {"micro_batch": 4, "recompute": "none"}}


def _run(precision: str):
    raw = {**RUN, "training": {**RUN["training"], "precision": precision}}
    return evaluate_scenario(parse_scenario(raw)).to_json()


def test_fp32_runs_at_the_vector_peak_and_tf32_at_the_tensor_cores():
    # NVIDIA H100 SXM datasheet (dense): FP32 67 TFLOPS, TF32 494.7 TFLOPS
    hw = make_hardware("h100-sxm", 8)
    assert device(hw, Training(precision="fp32")).peak == pytest.approx(67e12)
    assert device(hw, Training(precision="fp32", tf32=True)).peak == pytest.approx(494.7e12)


def test_the_word_tf32_is_fp32_on_the_tensor_cores_and_an_answer_read_back_keeps_it():
    sc = parse_scenario({**RUN, "training": {**RUN["training"], "precision": "tf32"}})
    assert sc.training.precision == "fp32" and sc.training.tf32
    fp32, tf32 = _run("fp32"), _run("tf32")
    assert tf32["scenario"]["training"]["precision"] == "fp32" and tf32["scenario"]["training"]["tf32"] is True
    assert "tf32" not in fp32["scenario"]["training"]
    again = parse_scenario({k: v for k, v in tf32["scenario"].items() if k != "layout"})
    assert again.training.tf32 and again.training.precision == "fp32"
    # the same bytes either way; the matmuls 494.7 / 67 = 7.4x faster on the tensor cores, the rest as it was
    assert tf32["memory"]["total"] == fp32["memory"]["total"]
    assert 3 < tf32["time"]["tokens_per_s"] / fp32["time"]["tokens_per_s"] < 494.7 / 67
    said = {a["field"]: a for a in fp32["assumed"]}
    assert said["training.tf32"]["value"] is False and "allow_tf32" in said["training.tf32"]["rule"]
    assert "training.tf32" not in {a["field"] for a in tf32["assumed"]}


def test_tf32_beside_another_precision_is_one_error():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="TF32 tensor cores; precision is bf16: set precision: fp32"):
        parse_scenario({**RUN, "training": {**RUN["training"], "precision": "bf16", "tf32": True}})
