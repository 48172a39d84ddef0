"""The search's peak tables (search/book.py ``peak_table``): a plan asked again after an edit that no peak reads
(tokens, deadline, GPU types, max_gpus) finds its peaks sized, and answers exactly as a fresh process would."""

from __future__ import annotations

import pytest

from gpuplan.api import plan_scenario
from gpuplan.io.scenario import parse_scenario
from gpuplan.search import book


def _scenario(tokens: str, gpus: int | None = None, **layout: object) -> object:
    hardware = {"gpu": "h100-sxm"} if gpus is None else {"gpu": "h100-sxm", "gpus": gpus}
    return parse_scenario({"model": "llama-3.1-8b", "hardware": hardware,
                           "training": {"seq_len": 4096, "tokens": tokens}, "layout": layout})


def _answer(res: object) -> tuple:
    best = res.best  # type: ignore[attr-defined]
    return (res.searched, sorted((r.reason.value, n) for r, n in res.rejected.items()),  # type: ignore[attr-defined]
            best.gpus, best.layout, best.time.step_s)


@pytest.fixture(autouse=True)
def _fresh_tables() -> None:
    book.clear_peak_tables()


def test_an_edit_no_peak_reads_reuses_the_sized_peaks() -> None:
    first = plan_scenario(_scenario("100B"), max_gpus=64).result
    ((peaks, floors),) = book._tables.values()
    sized, timed = len(peaks), len(floors)
    assert sized > 0 and timed > 0
    again = plan_scenario(_scenario("300B", ), max_gpus=32, deadline_s="30d").result
    # nothing sized or floored anew: 32 GPUs are a part of 64's space
    assert len(book._tables) == 1 and len(peaks) == sized and len(floors) == timed
    book.clear_peak_tables()
    fresh = plan_scenario(_scenario("300B"), max_gpus=32, deadline_s="30d").result
    assert _answer(again) == _answer(fresh)
    assert first.searched > again.searched  # the wider count range searched more layouts


def test_a_fixed_field_the_peak_reads_keeps_a_table_of_its_own() -> None:
    plan_scenario(_scenario("100B"), max_gpus=16)
    plan_scenario(_scenario("100B", recompute_every=2), max_gpus=16)
    assert len(book._tables) == 2


def test_the_oldest_tables_are_dropped() -> None:
    for seq in range(book.PEAK_TABLES + 2):
        plan_scenario(parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm"},
                                      "training": {"seq_len": 1024 * (seq + 1)}}), max_gpus=8)
    assert len(book._tables) == book.PEAK_TABLES


def test_the_step_model_caches_hold_across_a_token_edit() -> None:
    from dataclasses import replace

    from gpuplan.model import runtime
    from gpuplan.model.runtime import step_time
    from gpuplan.spec.job import per_step
    from gpuplan.spec.scenario import complete_layout

    sc = _scenario("100B", gpus=8, tp=2, pp=2)
    lay = complete_layout(sc)
    first = step_time(sc.model, sc.hardware, sc.training, lay)
    sizes = tuple(len(t) for t in runtime._memo())
    other = replace(sc.training, tokens=3e11)
    assert step_time(sc.model, sc.hardware, other, lay) == first
    assert tuple(len(t) for t in runtime._memo()) == sizes  # nothing timed anew
    assert per_step(other) == per_step(sc.training) and per_step(other).tokens is None
    assert per_step(per_step(other)) is per_step(other)
