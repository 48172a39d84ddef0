"""The 80 % intervals' regimes (validation/intervals.py): a regime answers only with rows from two sources or
more — one source's rows cannot tell how far sources differ — except the coarsest, which always answers."""

from __future__ import annotations

import math

import pytest

from gpuplan.validation.intervals import MIN_ROWS, Z80, interval, table


def _rows(source: str, attrs: dict[str, str], residual: float, n: int) -> list[tuple[str, dict[str, str], float]]:
    return [(source, attrs, residual)] * n


def test_a_regime_of_one_source_gives_way_to_the_coarser_one():
    one = {"parallel": "model"}
    two = {"parallel": "data"}
    n = MIN_ROWS["memory"]
    rows = _rows("a", one, 0.0, n) + _rows("a", two, 0.1, n) + _rows("b", two, -0.1, n)
    regimes = table(rows, "memory")
    assert "model" not in regimes  # n rows, but all from source a
    assert regimes["data"]["sources"] == 2 and regimes["data"]["n"] == 2 * n
    assert regimes["all"]["n"] == 3 * n


def test_the_coarsest_regime_answers_even_from_one_source():
    regimes = table(_rows("a", {"parallel": "model"}, 0.05, MIN_ROWS["memory"]), "memory")
    assert set(regimes) == {"all"}


def test_the_spread_adds_the_sources_difference():
    # two sources whose medians sit at +-0.1 of the centre 0, no spread inside either: sigma = 0.1
    lo, hi = interval([("a", 0.1), ("a", 0.1), ("b", -0.1), ("b", -0.1)])
    assert hi == pytest.approx(math.exp(Z80 * 0.1) - 1)
    assert lo == pytest.approx(math.exp(-Z80 * 0.1) - 1)
