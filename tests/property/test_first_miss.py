"""``search.order.first_miss``: the first micro-batch index that does not fit, from a prefix of fitting ones —
right for every guess, and cheap for a right one (the planner's peaks are its cost)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuplan.search.order import first_miss


def _probe(answer: int, host_ok: bool = True):
    calls: list[int] = []

    def fits(i: int) -> bool | None:
        calls.append(i)
        return None if not host_ok else i < answer

    return fits, calls


@given(st.integers(0, 40).flatmap(lambda hi: st.tuples(st.just(hi), st.integers(0, hi),
                                                       st.none() | st.integers(-3, hi + 3))))
def test_any_hint_gives_the_exact_first_miss(case):
    hi, answer, hint = case
    fits, calls = _probe(answer)
    assert first_miss(fits, hi, hint) == answer
    assert all(0 <= i < hi for i in calls)
    assert len(calls) == len(set(calls))  # no peak asked twice


@given(st.integers(1, 40).flatmap(lambda hi: st.tuples(st.just(hi), st.integers(0, hi))))
def test_a_right_hint_costs_at_most_two_peaks(case):
    hi, answer = case
    fits, calls = _probe(answer)
    assert first_miss(fits, hi, answer) == answer
    assert len(calls) <= 2
    # the ends cost one: all fit, or none does
    if answer in (0, hi):
        assert len(calls) == 1


@given(st.integers(1, 40), st.none() | st.integers(0, 40))
def test_out_of_host_memory_is_none_whatever_the_hint(hi, hint):
    fits, calls = _probe(0, host_ok=False)
    assert first_miss(fits, hi, hint) is None
    assert len(calls) == 1


def test_without_a_hint_the_ends_come_first():
    fits, calls = _probe(7)
    assert first_miss(fits, 10) == 7
    assert calls[:2] == [9, 0]
