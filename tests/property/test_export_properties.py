"""Every export of 50 generated plans loads in its framework's own parser, or is refused with a reason;
none is written invalid (issue 13, item 6). The plans are drawn from a fixed seed, so a failure names
one reproducible scenario; the parsers are those of tests/export_parsers.py (Megatron-LM: its documented
argument names, test_export.megatron_parser)."""

from __future__ import annotations

import random
import shlex

import pytest
from conftest import make
from export_parsers import load_accelerate, load_deepspeed, load_torchrun, load_torchtitan
from test_export import megatron_parser

from gpuplan.errors import GpuplanError
from gpuplan.export import export_scenario
from gpuplan.export.common import FRAMEWORK_TARGETS as TARGETS  # schedulers: tests/test_export_schedulers.py

MODELS = ["llama-3.2-1b", "llama-3.1-8b", "qwen2.5-0.5b", "qwen3-8b", "mistral-7b", "mixtral-8x7b", "phi-3-mini",
          "gpt2", "gemma-2-2b", "pythia-6.9b", "opt-6.7b", "mpt-7b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b"]
GPUS = ["h100-sxm", "a100-80gb", "h200", "mi300x"]
FIXED = [{}, {}, {"tp": 2}, {"pp": 2}, {"tp": 2, "pp": 2}, {"zero": 3}, {"recompute": "full"}, {"zero": 1},
         {"pp": 4, "pp_schedule": "interleaved"}]
METHODS = ["full"] * 6 + ["lora", "qlora"]
N_PLANS = 50


def _scenarios() -> list[tuple[str, dict]]:
    rng = random.Random(13)
    out = []
    for i in range(N_PLANS):
        model, gpu, gpus = rng.choice(MODELS), rng.choice(GPUS), rng.choice([8, 16, 32, 64])
        layout, method = dict(rng.choice(FIXED)), rng.choice(METHODS)
        training = {"seq_len": rng.choice([2048, 4096]), "tokens": 1e10, "method": method}
        out.append((f"{i:02d}-{model}-{gpus}x{gpu}-{method}-{'-'.join(f'{k}{v}' for k, v in layout.items())}",
                    dict(model=model, gpu=gpu, gpus=gpus, training=training, layout=layout)))
    return out


SCENARIOS = _scenarios()
REASONS = ("cannot export to", "cannot run", "nothing to export")


def _load(target: str, ex, tmp_path) -> object:
    """The framework's own reading of the export; raises when the framework refuses it."""
    if target == "deepspeed":
        cfg = ex.config
        dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])
        return load_deepspeed(cfg, dp * cfg.get("sequence_parallel_size", 1))
    if target == "accelerate":
        return load_accelerate(ex.text, tmp_path)
    if target == "torchtitan":
        return load_torchtitan(ex.text, tmp_path)
    if target == "megatron":
        body = ex.text.split("MEGATRON_ARGS=(")[1].split(")")[0]
        return megatron_parser().parse_args(shlex.split(body, comments=True))
    return load_torchrun(ex.config)


@pytest.mark.parametrize(("name", "case"), SCENARIOS, ids=[n for n, _ in SCENARIOS])
def test_every_export_loads_or_is_refused_with_a_reason(name, case, tmp_path):
    c = dict(case)
    sc = make(c.pop("model"), c.pop("gpu"), c.pop("gpus"), training=c["training"], layout=c["layout"])
    outcome = {}
    for target in TARGETS:
        try:
            ex, _ = export_scenario(sc, target, max_gpus=sc.hardware.gpus)
        except GpuplanError as e:
            assert any(r in str(e) for r in REASONS), f"{target}: refused without a reason: {e}"
            outcome[target] = "refused"
            continue
        parsed = _load(target, ex, tmp_path)
        outcome[target] = "loaded" if parsed is not None else "parser missing"
    assert set(outcome) == set(TARGETS)
    # torch is always there: the launcher line always parses — unless the layout the scenario fixes is one no stack
    # runs (QLoRA's 4-bit weights split by tensor parallelism: frameworks.json qlora-no-tensor-parallel)
    qlora_tp = c["training"]["method"] == "qlora" and c["layout"].get("tp", 1) > 1
    assert outcome["torchrun"] == ("refused" if qlora_tp else "loaded")


def test_the_generated_plans_exercise_refusals_and_loads():
    """The 50 plans are not all alike: the seed covers refusals (ALiBi, parallel blocks, GeGLU, PEFT
    limits) and multi-dimensional layouts."""
    models = {c["model"] for _, c in SCENARIOS}
    assert {"mpt-7b", "pythia-6.9b", "gemma-2-2b"} <= models
    assert any(c["layout"].get("pp") for _, c in SCENARIOS) and any(c["training"]["method"] == "qlora"
                                                                     for _, c in SCENARIOS)
