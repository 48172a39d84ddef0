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


def test_a_stack_that_accumulates_only_when_told_runs_the_per_replica_batch_whole_where_it_fits():
    # 512 sequences over dp 8: 64 per replica. torchtitan (local batch = the per-rank batch) fits it whole
    est = evaluate(_sc("torchtitan"))
    assert est.layout.micro_batch == 64 and est.memory.fits
    (rule,) = _assumed(est, "layout.micro_batch")
    assert "accumulates no gradients unless told to" in rule["rule"]
    # the typical stack keeps fp32 weight casts and norm copies: 64 does not fit, so the run accumulated — the
    # fastest power of two that fits, as under a script-sized stack
    assert not evaluate(_sc("generic", micro_batch=64)).memory.fits
    est = evaluate(_sc("generic"))
    assert est.layout.micro_batch == 32 and est.memory.fits
    for mb in (1, 2, 4, 8, 16, 32):
        other = evaluate(_sc("generic", micro_batch=mb))
        assert not other.memory.fits or other.time.tokens_per_s <= est.time.tokens_per_s * (1 + 1e-12)
    # under a pipeline the stack's own micro-batch count is not read: the layout default
    assert evaluate(_sc("torchtitan", pp=2, tp=4)).layout.micro_batch == 1


def test_a_given_micro_batch_and_an_open_batch_stay():
    assert evaluate(_sc(micro_batch=2)).layout.micro_batch == 2
    # without a given global batch the per-replica batch is not the run's: the default
    open_batch = make("llama-2-13b", "a100-80gb-sxm", 64, training={"framework": "megatron-core", "seq_len": 4096},
                      layout={"tp": 8, "recompute": "full"})
    assert evaluate(open_batch).layout.micro_batch == 1
