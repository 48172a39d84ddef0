"""A fine-tune is a one-node job (issue 22): where its predicted peak fits one node but no layout's 80 % interval
does, the answer is that node, TIGHT — not the many nodes whose layouts hold the interval's upper end. QLoRA of an
8B at 8,192 tokens on RTX 4090s (24 GB; the fp32 logits of a 128K vocabulary) was answered on 128 GPUs over
10 GbE at MFU 3 %; it is tight now on L4s (24 GB, less of it usable)."""

from __future__ import annotations

from gpuplan.api import plan_scenario
from gpuplan.io.scenario import parse_scenario


def _plan(gpu: str):
    return plan_scenario(parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": gpu},
                                         "training": {"method": "qlora", "seq_len": 8192, "tokens": 5e7}})).result


def test_a_fine_tune_that_fits_one_node_at_its_point_estimate_is_answered_there_tight():
    r = _plan("l4")
    assert r.tight and r.best is not None and r.best.gpus <= 8 and r.widened == ()
    assert r.best.time is not None and r.best.time.mfu > 0.1


def test_a_fine_tune_that_fits_surely_is_not_tight():
    r = _plan("h100-sxm")
    assert not r.tight and r.best is not None and r.best.gpus <= 8
