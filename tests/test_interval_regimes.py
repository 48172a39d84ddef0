"""The 80 % intervals' regimes (validation/intervals.py): a regime answers only with rows from enough sources —
two for memory, three for throughput: one source's rows cannot tell how far sources differ, two give that spread
one degree of freedom — except the coarsest, which always answers; throughput is split by context first."""

from __future__ import annotations

import math

import pytest

from gpuplan.catalog.intervals import LONG_CONTEXT, regime, spread
from gpuplan.validation.intervals import MIN_ROWS, Z80, interval, new_source_factor, table


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
    # two sources whose medians sit at +-0.1 of the centre 0, no spread inside either: the sample standard deviation
    # of the medians is 0.1·√2, and a new source's median falls within t(0.90, 1) · √(1 + 1/2) of it
    # (t(0.90, 1) = 3.078: NIST/SEMATECH e-Handbook Sec. 1.3.6.7.2)
    lo, hi = interval([("a", 0.1), ("a", 0.1), ("b", -0.1), ("b", -0.1)])
    half = 3.078 * math.sqrt(1.5) * 0.1 * math.sqrt(2)
    assert hi == pytest.approx(math.exp(half) - 1)
    assert lo == pytest.approx(math.exp(-half) - 1)


def test_one_source_spreads_by_its_rows_and_its_bias_only():
    lo, hi = interval([("a", 0.1), ("a", 0.3)])  # median 0.2, rows at +-0.1 about it
    half = Z80 * math.sqrt(0.1 ** 2 + 0.2 ** 2)
    assert hi == pytest.approx(math.exp(half) - 1)
    assert lo == pytest.approx(math.exp(-half) - 1)


def test_a_new_source_is_less_certain_the_fewer_sources_were_seen():
    factors = [new_source_factor(k) for k in range(2, 60)]
    assert all(a > b for a, b in zip(factors, factors[1:], strict=False))  # more sources: narrower
    assert factors[0] == pytest.approx(3.770, abs=1e-3)  # two sources
    assert new_source_factor(10) == pytest.approx(1.383 * math.sqrt(1.1))  # t(0.90, 9) = 1.383
    assert Z80 < new_source_factor(200) < 1.01 * Z80


def test_a_throughput_regime_of_two_sources_gives_way_to_the_coarser_one():
    fine = {"context": "long", "framework": "named", "generation": "hopper", "scale": "node"}
    n = MIN_ROWS["throughput"]
    rows = _rows("a", fine, 0.3, n) + _rows("b", fine, -0.3, n)
    regimes = table(rows, "throughput")
    assert not any(k.startswith("long") for k in regimes)  # 2n rows, two sources: the coarsest answers
    rows += _rows("c", fine, 0.0, n)
    regimes = table(rows, "throughput")
    assert regimes["long|named|hopper|node"]["sources"] == 3 and regimes["long"]["n"] == 3 * n


def test_a_sequence_past_the_llama3_pretraining_length_is_long_context():
    assert regime("torchtitan", "hopper", 8, 8, seq_len=LONG_CONTEXT)["context"] == "standard"
    assert regime("torchtitan", "hopper", 8, 8, seq_len=LONG_CONTEXT + 1)["context"] == "long"


def test_a_long_context_run_takes_the_long_context_interval():
    short = spread("throughput", "torchtitan", "hopper", 8, 8, seq_len=8192)
    long = spread("throughput", "torchtitan", "hopper", 8, 8, seq_len=131072)
    assert short is not None and long is not None
    assert short.regime.startswith("standard") and long.regime.startswith("long")
