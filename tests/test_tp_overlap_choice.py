"""The planner overlaps tensor-parallel collectives with the matmuls where the framework offers it (frameworks.json
``tp_comm_overlap.supported``) and its rules allow it, and keeps the overlap only where it is faster; a scenario that
states ``tp_overlap`` keeps it; ``evaluate`` leaves it at the framework's default (off) unless told."""

from __future__ import annotations

import pytest

import gpuplan

_RUN = dict(model="llama-3.1-70b", gpu="h100-sxm", gpus=64, tokens=1e11, seq_len=4096)


def _best(**kw):
    res = gpuplan.plan(**{**_RUN, **kw})
    return res.best


def test_megatron_core_plans_take_the_overlap_where_it_is_faster():
    best = _best(framework="megatron-core")
    lay = best.layout
    assert lay.tp > 1 and lay.sequence_parallel and lay.tp_overlap
    # the same layout without the overlap is slower: the planner kept the faster of the two
    fields = {k: v for k, v in lay.values().items() if k not in ("dp",)}
    off = gpuplan.evaluate(**{**_RUN, "framework": "megatron-core", **{**fields, "tp_overlap": False}})
    on = gpuplan.evaluate(**{**_RUN, "framework": "megatron-core", **fields})
    assert on.time.step.step_s == pytest.approx(best.time.step.step_s, rel=1e-12)
    assert off.time.step.step_s > on.time.step.step_s


def test_a_stated_tp_overlap_is_kept():
    assert not _best(framework="megatron-core", tp_overlap=False).layout.tp_overlap


def test_no_overlap_where_the_framework_has_none_or_refuses_it():
    # the typical stack (Hugging Face eager) has no TP communication overlap; torchtitan's async TP needs
    # torch.compile (its cannot-run rule), and Megatron-LM's profile refuses it
    assert not _best().layout.tp_overlap
    assert not _best(framework="torchtitan").layout.tp_overlap
    assert not _best(framework="megatron-lm", gpu="a100-80gb-sxm").layout.tp_overlap  # the 2020-22 code's era
    assert _best(framework="torchtitan", compile="model").layout.tp_overlap


def test_evaluate_keeps_the_framework_default():
    est = gpuplan.evaluate(**{**_RUN, "framework": "megatron-core", "tp": 4, "pp": 2, "zero": 1})
    assert est.layout.sequence_parallel and not est.layout.tp_overlap


def test_the_text_says_so():
    from gpuplan.report.text import layout_str

    lay = _best(framework="megatron-core").layout.values()
    assert "tp-overlap" in layout_str(lay).split()
    assert "tp-overlap" not in layout_str({**lay, "tp_overlap": False}).split()
