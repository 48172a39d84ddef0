"""An open micro-batch under a stack whose launch script must give it (model/micro_batch_open.py)."""

from __future__ import annotations

from conftest import make

from gpuplan.api import evaluate_scenario as evaluate


def _sc(framework="megatron-core", **layout):
    # a run described as a Megatron paper table gives it: tp and dp, the global batch, recomputation; no micro-batch
    return make("llama-2-13b", "a100-80gb-sxm", 64, training={"framework": framework, "seq_len": 4096,
                                                              "global_batch": 512},
                layout={"tp": 8, "recompute": "full", **layout})


def _assumed(est, field):
    return [a for a in est.to_json()["assumed"] if a["field"] == field]


def test_a_script_sized_stack_runs_the_fastest_micro_batch_that_fits():
    est = evaluate(_sc())
    one = evaluate(_sc(micro_batch=1))
    assert est.layout.micro_batch > 1 and est.memory.fits
    assert est.time.tokens_per_s > one.time.tokens_per_s
    # no power of two up to the per-replica batch (512 / 8 = 64) that fits is faster
    for mb in (1, 2, 4, 8, 16, 32, 64):
        other = evaluate(_sc(micro_batch=mb))
        assert not other.memory.fits or other.time.tokens_per_s <= est.time.tokens_per_s * (1 + 1e-12)
    (rule,) = _assumed(est, "layout.micro_batch")
    assert rule["value"] == est.layout.micro_batch and "micro_batch_open.py" in rule["rule"]


def test_a_given_or_documented_micro_batch_and_an_open_batch_stay():
    assert evaluate(_sc(micro_batch=2)).layout.micro_batch == 2
    # the generic stack is not script-sized: its layout default
    assert evaluate(_sc("generic")).layout.micro_batch == 1
    # torchtitan documents its own (frameworks.json defaults.micro_batch)
    assert evaluate(_sc("torchtitan")).layout.micro_batch == 1
    # without a given global batch the per-replica batch is not the run's: the default
    open_batch = make("llama-2-13b", "a100-80gb-sxm", 64, training={"framework": "megatron-core", "seq_len": 4096},
                      layout={"tp": 8, "recompute": "full"})
    assert evaluate(open_batch).layout.micro_batch == 1
