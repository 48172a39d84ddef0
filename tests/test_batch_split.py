"""A global batch that does not split over the GPUs as data-parallel replicas, degrees open (model/batch_split.py)."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.model.batch_split import batch_widths


def _sc(gpus=96, gb=512, **layout):
    return make("llama-3.1-70b", "h100-sxm", gpus, training={"seq_len": 4096, "global_batch": gb, "tokens": 1e9},
                layout=layout)


def _assumed(est, field):
    return [a for a in est.to_json()["assumed"] if a["field"] == field]


def test_a_batch_no_replica_count_splits_reads_the_fastest_width_that_fits():
    # 512 sequences over 96 replicas: 480 and 576 are both beyond the 5 % a rounded batch is read within; the
    # widths that split 512 as given are read (48 would read it as 528)
    est = evaluate(_sc())
    lay = est.layout
    assert lay.world == 96 and lay.dp < 96 and 512 % (lay.dp * lay.micro_batch) == 0 and est.memory.fits
    widths = batch_widths(_sc(), {})
    assert [w["dp"] for w in widths] == [32, 16, 8, 4, 2, 1]  # the divisors of 96 below it that divide 512
    for w in widths:  # each width read as evaluate reads a layout given only its dp
        other = evaluate(_sc(dp=w["dp"]))
        assert not other.memory.fits or other.time.tokens_per_s <= est.time.tokens_per_s * (1 + 1e-12)
        if w["dp"] == lay.dp:
            assert other.layout == lay and other.time.tokens_per_s == est.time.tokens_per_s
    (rule,) = _assumed(est, "layout.dp")
    assert rule["value"] == lay.dp and "batch_split.py" in rule["rule"] and "512 sequences" in rule["rule"]
    assert all("with dp" in a["rule"] for f in ("layout.tp", "layout.pp") for a in _assumed(est, f))


def test_fewer_sequences_than_gpus():
    # Llama 3 405B's pre-training shape (Llama Team 2024, Table 4: 16,384 GPUs, 16M tokens of 8,192 = 2,048
    # sequences): at most 2,048 replicas
    est = evaluate(make("llama-3.1-405b", "h100-sxm", 16384, training={"seq_len": 8192, "global_batch": 2048}))
    assert est.layout.world == 16384 and 2048 % (est.layout.dp * est.layout.micro_batch) == 0


def test_one_degree_given_the_other_fills_the_gpus():
    # tp 2 given: 48 replicas do not split 70 sequences (48: -31 %, 96: +37 %); 24 do, within 5 % (72)
    est = evaluate(_sc(gb=70, tp=2))
    lay = est.layout
    assert lay.tp == 2 and lay.dp * lay.pp * 2 == 96 and lay.dp < 48
    (pp_rule,) = _assumed(est, "layout.pp")
    assert "dp" in pp_rule["rule"]


def test_a_batch_that_splits_and_given_widths_are_read_as_before():
    # 768 = 8 × 96: every GPU a replica, nothing read
    est = evaluate(_sc(gb=768))
    assert est.layout.dp == 96 and all("batch_split" not in a["rule"] for a in _assumed(est, "layout.dp"))
    assert batch_widths(_sc(gb=768), {}) == []
    # dp given: the layout's own check names the problem
    with pytest.raises(GpuplanError, match="not a multiple of dp"):
        evaluate(_sc(dp=96))
    # tp and pp both given: dp is what they leave
    with pytest.raises(GpuplanError, match="not a multiple of dp"):
        evaluate(_sc(gb=70, tp=2, pp=1))
    # no batch given: the default batch follows the layout
    assert batch_widths(make("llama-3.1-70b", "h100-sxm", 96, training={"seq_len": 4096}), {}) == []


def test_the_batch_error_names_a_fix_that_works():
    # dp given, 512 over 96 replicas: the multiples of 96 either side, or fewer replicas
    with pytest.raises(GpuplanError, match=r"multiple of 96 \(e\.g\. 480 or 576\), or fewer data-parallel replicas"):
        evaluate(_sc(dp=96))
    # 24 over 8 replicas splits; a micro-batch of 2 does not divide the 3 sequences per replica
    with pytest.raises(GpuplanError, match="choose a micro_batch that divides global_batch / dp = 3"):
        evaluate(make("llama-3.1-8b", "h100-sxm", 8, training={"seq_len": 4096, "global_batch": 24},
                      layout={"dp": 8, "micro_batch": 2}))
