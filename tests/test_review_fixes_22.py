"""Fixes from the session-22 expert reviews: what each framework recomputes, what a checkpointed attention core costs,
the plan's layout line, Megatron's ZeRO-2."""

from __future__ import annotations

import pytest
from conftest import make

import gpuplan
from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario as plan
from gpuplan.catalog.refusals import why_not
from gpuplan.export import megatron_args
from gpuplan.report.text import layout_str
from gpuplan.spec.options import PlanOptions


@pytest.mark.parametrize(("framework", "refused"), [
    # Megatron's --recompute-granularity is full or selective (by module); no per-op SAC
    ("megatron-core", {"selective-op"}), ("megatron-lm", {"selective-op"}),
    # whole decoder layers only: an HF client model under DeepSpeed, nanotron's recompute_layer
    ("deepspeed", {"selective", "selective-op"}), ("nanotron", {"selective", "selective-op"}),
    ("torchtitan", set()),
])
def test_each_framework_recomputes_what_it_offers(framework, refused):
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"framework": framework})
    for mode in ("none", "selective", "selective-op", "full"):
        zero = 2 if framework == "torchtitan" else 1  # a stage each runs
        assert bool(why_not(framework, {"recompute": mode, "pp": 1, "tp": 1, "zero": zero, "dp": 8}, sc.training)) \
            == (mode in refused), mode


def test_fit_under_megatron_core_never_recomputes_per_op():
    # the reviewer's case: fit of a 70B at 8K on H100 under Megatron-Core picked selective-op, which Megatron cannot run
    sc = make("llama-3.1-70b", "h100-sxm", None, training={"framework": "megatron-core", "seq_len": 8192,
                                                           "global_batch": 512})
    res = plan(sc, PlanOptions(top=10))
    assert res.best is not None and all(c.layout.recompute != "selective-op" for c in res.candidates)


def test_a_checkpointed_flash_attention_core_is_run_again():
    # Megatron-Core attention.py: with checkpoint_core_attention the core (flash or not) runs in
    # _checkpointed_attention_forward, its forward repeated in backward; HFU counted it, the step did not
    kw = dict(model="llama-3.1-70b", gpu="h100-sxm", gpus=64, tp=8, pp=2, zero=1, micro_batch=1, seq_len=8192,
              global_batch=64, framework="megatron-core", tokens=1e9)
    none, sel = (gpuplan.evaluate(**kw, recompute=r).time for r in ("none", "selective"))
    assert sel.step.recompute_s > 0 and sel.step.step_s > none.step.step_s


def test_the_plan_line_carries_every_setting_the_step_was_timed_with():
    lay = {"dp": 64, "tp": 1, "pp": 1, "cp": 1, "ep": 8, "zero": 3, "zero_group": None, "micro_batch": 2,
           "recompute": "full", "recompute_modules": [], "sequence_parallel": False, "pp_schedule": "1f1b",
           "virtual_stages": 1, "offload": "none", "dp_overlap": False, "zero3_gather": "module",
           "tp_overlap": False, "ep_overlap": True, "recompute_every": 2, "etp": 1}
    line = layout_str(lay)
    for word in ("recompute=full/every 2", "ep-overlap", "etp=1", "dp-overlap=off", "gather=module"):
        assert word in line


def test_megatron_zero2_is_megatron_fsdp_and_under_a_pipeline_the_distributed_optimizer():
    # Megatron-Core docs, Megatron FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads
    flat = evaluate(make("llama-3.1-8b", "h100-sxm", 64, training={"framework": "megatron-core", "seq_len": 4096,
                                                                    "global_batch": 512}, layout={"zero": 2, "pp": 1}))
    args, notes = megatron_args(flat.to_json(), flat.scenario.model)
    assert "--use-megatron-fsdp" in args and args[args.index("--data-parallel-sharding-strategy") + 1] == "optim_grads"
    piped = evaluate(make("llama-3.1-70b", "h100-sxm", 64, training={"seq_len": 4096, "global_batch": 512},
                          layout={"zero": 2, "pp": 4, "tp": 4}))
    args, notes = megatron_args(piped.to_json(), piped.scenario.model)
    assert "--use-megatron-fsdp" not in args and "--use-distributed-optimizer" in args
    assert any("zero=2 with a pipeline" in n for n in notes)


def test_an_amp_full_fine_tune_says_its_weights_are_fp32_and_how_bf16_pure_differs():
    from gpuplan.model.estimate import Note

    kw = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=1, framework="hf-trainer", seq_len=2048, global_batch=8,
              micro_batch=1, recompute="full", tokens=1e8)
    amp, pure = gpuplan.evaluate(**kw, precision="bf16"), gpuplan.evaluate(**kw, precision="bf16-pure")
    assert Note.AMP_WEIGHTS in amp.notes and Note.AMP_WEIGHTS not in pure.notes
    assert any("give precision bf16-pure" in n for n in amp.to_json()["notes"])
    # 16 B of model state per parameter against 8 (bf16 weights, gradients and AdamW moments)
    assert amp.memory.peak.states.total - pure.memory.peak.states.total == pytest.approx(8 * 8_030_261_248, rel=0.01)
