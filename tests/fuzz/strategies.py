"""Hypothesis strategies for hostile inputs: every choice the case builders of ``hostile.py`` make
(command, scenario field, file kind, flag, value) is a hypothesis draw, and the values themselves
come from hypothesis' own generators mixed with the hand-picked list of known breakers — huge and
non-decimal integers, NaN and infinities, arbitrary Unicode text with control characters and
newlines, number-like strings with any suffix, nested lists and mappings, safetensors shapes.
``boundary.py`` adds a builder per defect class of issue 25 (lone surrogates and suffixes that overflow
their number, drawn here too; big documents; safetensors headers at the cap; output targets; HTTP
bodies and Host headers).

So a failing case shrinks to a minimal one (hypothesis minimises the draws), and a fixed seed gives
the same cases on every machine. ``cases()`` is the strategy; ``draw_cases(seed, n)`` draws ``n``
cases in chunks (a case may carry a 20 MB value: the parent holds one chunk at a time).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import boundary
import hostile
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

HUGE_INT = st.integers(min_value=-(10**400), max_value=10**400)
NUMBER_TEXT = st.from_regex(r"[-+]?[0-9_]{0,60}(\.[0-9]{0,20})?(e[-+]?[0-9]{1,6})?"
                            r"(k|K|M|B|T|P|G|GiB|GB|TB|d|h|s|%|x)?", fullmatch=True)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)  # control chars, RTL marks, newlines
# lone surrogates among other text (what a JSON escape \ud800 or argv's undecodable bytes give)
SURROGATE_TEXT = st.text(st.characters(categories=("Cs", "Ll", "Nd", "Pd")), min_size=1, max_size=20).filter(
    lambda t: any("\ud800" <= ch <= "\udfff" for ch in t))
# finite as written, infinite once the suffix (at least 1,000) multiplies it: 1e308k
HUGE_SUFFIX = {family: st.from_regex(rf"[-+]?[1-9](\.[0-9]{{1,5}})?e30[6-8]({suffixes})", fullmatch=True)
               for family, suffixes in (("count", "k|M|B|T|P|G"), ("bytes", "GiB|TiB|TB"), ("duration", "y|w|d|h"))}
SCALAR = st.one_of(st.none(), st.booleans(), HUGE_INT, st.floats(allow_nan=True, allow_infinity=True),
                   NUMBER_TEXT, TEXT)
NESTED = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=25)
SHAPE = st.lists(st.one_of(HUGE_INT, st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
                           st.none()), max_size=5)
HOSTILE = st.one_of(SCALAR, NESTED)
# a uniform number in [0, 1) from three drawn bytes: hypothesis' float draws lean hard on 0, 1/3,
# 1/2 and tiny values (a quarter of them are 0.0 inside a composite), its bytes are near uniform
# and still shrink toward 0 — so branches keep their weights and a failure shrinks to first choices
UNIT = st.binary(min_size=3, max_size=3).map(lambda b: int.from_bytes(b, "big") / 2**24)


class Draws:
    """The source of choices that ``hostile.make_case`` takes (``choice``, ``random``, ``randint``),
    each one a hypothesis draw, plus ``value()`` and ``shape()``: a fresh hostile value or
    safetensors shape from the strategies above."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self._draw = draw

    def choice(self, seq: Sequence[Any]) -> Any:
        # an index from a uniform draw (a sampled_from index leans on the first items); shrinking
        # moves toward the first item
        return seq[min(int(self.random() * len(seq)), len(seq) - 1)]

    def random(self) -> float:
        return self._draw(UNIT)

    def randint(self, low: int, high: int) -> int:
        return self._draw(st.integers(min_value=low, max_value=high))

    def value(self) -> Any:
        return self._draw(HOSTILE)

    def shape(self) -> list[Any]:
        return self._draw(SHAPE)

    def surrogate(self) -> str:
        return self._draw(SURROGATE_TEXT)

    def huge_count(self, family: str) -> str:
        return self._draw(HUGE_SUFFIX[family])


@st.composite
def command_cases(draw: Callable[[st.SearchStrategy[Any]], Any]) -> hostile.Case:
    """One hostile case: a command line and the files it reads (see ``hostile.make_case``)."""
    return hostile.make_case(Draws(draw))


@st.composite
def boundary_cases(draw: Callable[[st.SearchStrategy[Any]], Any], builder: Any = None) -> hostile.Case:
    """One case of a defect class of issue 25 (``builder``, or one drawn from ``boundary.BUILDERS``)."""
    r = Draws(draw)
    case = hostile.Case([])
    (builder or r.choice(boundary.BUILDERS))(r, case)
    return case


def cases() -> st.SearchStrategy[hostile.Case]:
    """Any hostile case, one in four from ``boundary.py``."""
    return st.one_of(command_cases(), command_cases(), command_cases(), boundary_cases())


CHUNK = 250
BOUNDARY_EVERY = 8  # a seeded sample adds a case of boundary.py after every 8th, its six classes in turn


def _key(case: hostile.Case) -> str:
    files = sorted((k, hashlib.sha1(v).hexdigest() if isinstance(v, bytes) else repr(v))
                   for k, v in case.files.items())
    return hashlib.sha1(repr((case.argv, files)).encode("utf-8", "backslashreplace")).hexdigest()


def draw_cases(seed_value: int, n: int) -> Iterator[hostile.Case]:
    """``n`` distinct command cases, deterministic for ``seed_value`` and the same as before issue 25
    (``command_cases()``, ``CHUNK`` at a time: a case may carry a 20 MB value, the parent holds one
    chunk), and after every ``BOUNDARY_EVERY``-th a case of the next defect class of ``boundary.py``:
    ``n + n // BOUNDARY_EVERY`` in all."""
    seen: set[str] = set()
    commands = _stream(command_cases(), seed_value, seen)
    classes = [_stream(boundary_cases(b), seed_value * 7 + k, seen, chunk=8) for k, b in enumerate(boundary.BUILDERS)]
    for i in range(n):
        case = next(commands, None)
        if case is None:
            return
        yield case
        if i % BOUNDARY_EVERY == BOUNDARY_EVERY - 1:
            extra = next(classes[(i // BOUNDARY_EVERY) % len(classes)], None)
            if extra is not None:
                yield extra


def _stream(strategy: st.SearchStrategy[hostile.Case], seed_value: int, seen: set[str],
            chunk: int = CHUNK) -> Iterator[hostile.Case]:
    """Distinct cases of ``strategy``, ``chunk`` drawn at a time under seeds from ``seed_value``
    (hypothesis repeats some examples, its simplest above all: a repeat is skipped)."""
    for k in range(1000):
        got: list[hostile.Case] = []
        _collect(strategy, got, seen, seed_value * 100_003 + k, chunk)
        yield from got


def _collect(strategy: st.SearchStrategy[hostile.Case], got: list[hostile.Case], seen: set[str], seed_value: int,
             chunk: int) -> None:
    """Append to ``got`` the new cases among ``chunk`` drawn under ``seed_value``."""

    @settings(max_examples=chunk, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(seed_value)
    @given(strategy)
    def collect(case: hostile.Case) -> None:
        key = _key(case)
        if key not in seen:
            seen.add(key)
            got.append(case)

    with _seed_only():
        collect()


@contextmanager
def _seed_only() -> Iterator[None]:
    """Draws that depend on the seed alone. Hypothesis also draws, now and then, literals it finds in
    the source of every local module imported so far (gpuplan's included), so the same seed gave
    other cases after any edit of gpuplan, or when more of it was imported (the whole test suite):
    that pool is kept empty while a seeded sample is drawn. (An internal of hypothesis: where it is
    missing, the draws stay as they are.)"""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        yield
        return
    real, cache = getattr(providers, "_get_local_constants", None), getattr(providers, "CONSTANTS_CACHE", None)
    if real is None or cache is None or not hasattr(providers, "Constants"):
        yield
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = real
        cache.cache.clear()
