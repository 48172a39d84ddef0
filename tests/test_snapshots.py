"""Snapshot tests: today's CLI output, pinned so a behaviour-preserving restructure can be checked.

Each invocation in tests/snapshots/scenarios.py runs in-process through ``gpuplan.cli.main`` and is
compared with the file that tests/snapshots/make.py stored: JSON with the same keys in the same order,
the same nesting and list lengths, equal strings, bools, None and ints, floats within a relative 1e-9
(absolute 1e-12); ``--help`` and ``validate`` text exactly. A failure names the JSON path of the first
difference. If a change of behaviour is intended, regenerate with
``PYTHONPATH=src python tests/snapshots/make.py`` and review the diff.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

SNAP_DIR = Path(__file__).parent / "snapshots"
DATA = SNAP_DIR / "data"


def _load_scenarios() -> Any:
    spec = importlib.util.spec_from_file_location("gpuplan_snapshot_scenarios", SNAP_DIR / "scenarios.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SC = _load_scenarios()

REL_TOL = 1e-9
ABS_TOL = 1e-12

# Keys left out of the comparison because their values depend on the machine or the moment. None today:
# the JSON of these invocations holds no paths, times or versions (checked when the snapshots were made).
# `export --json` has "written_to", which is null here since no invocation uses -o.
IGNORED_KEYS: frozenset[str] = frozenset()


def first_difference(got: Any, want: Any, path: str = "$") -> str | None:
    """None when ``got`` matches ``want``; else the JSON path of the first difference and what differs."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{path}: expected an object, got {type(got).__name__}"
        gk, wk = [k for k in got if k not in IGNORED_KEYS], [k for k in want if k not in IGNORED_KEYS]
        missing, extra = [k for k in wk if k not in got], [k for k in gk if k not in want]
        if missing or extra:
            return f"{path}: keys differ: missing {missing}, extra {extra}"
        if gk != wk:
            return f"{path}: key order differs: got {gk}, expected {wk}"
        for k in wk:
            diff = first_difference(got[k], want[k], f"{path}.{k}")
            if diff:
                return diff
        return None
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"{path}: expected a list, got {type(got).__name__}"
        if len(got) != len(want):
            return f"{path}: list length {len(got)}, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            diff = first_difference(g, w, f"{path}[{i}]")
            if diff:
                return diff
        return None
    # bool before numbers (bool is an int); None, strings and bools must be equal and of the same type
    if isinstance(want, str) and isinstance(got, str):
        return None if got == want else f"{path}: {_text_difference(got, want)}"
    if want is None or isinstance(want, bool | str) or isinstance(got, bool | str) or got is None:
        if type(got) is not type(want) or got != want:
            return f"{path}: got {got!r}, expected {want!r}"
        return None
    if isinstance(want, int) and isinstance(got, int):
        return None if got == want else f"{path}: got {got!r}, expected {want!r}"
    if isinstance(want, float) and isinstance(got, float):
        if math.isclose(got, want, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return None
        return f"{path}: got {got!r}, expected {want!r} (relative difference {abs(got - want) / abs(want or 1):.3g})"
    # an int where a float was (or the reverse) is a change in the printed JSON: 3 vs 3.0
    return f"{path}: got {got!r} ({type(got).__name__}), expected {want!r} ({type(want).__name__})"


def _text_difference(got: str, want: str) -> str:
    """The first differing line of two texts (a short string is shown whole)."""
    if "\n" not in got and "\n" not in want:
        return f"got {got!r}, expected {want!r}"
    got_lines, want_lines = got.splitlines(), want.splitlines()
    for i, (g, w) in enumerate(zip(got_lines, want_lines, strict=False)):
        if g != w:
            return f"line {i + 1}: got {g!r}, expected {w!r}"
    if len(got_lines) != len(want_lines):
        return f"{len(got_lines)} lines, expected {len(want_lines)}"
    return "differs in trailing whitespace or newlines"


@pytest.fixture(autouse=True)
def _fixed_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", SC.HELP_COLUMNS)  # argparse wraps help to $COLUMNS when the parser is built
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.mark.parametrize("name", list(SC.SCENARIOS))
def test_json_snapshot(name: str) -> None:
    rc, out, err = SC.run(SC.SCENARIOS[name])
    assert rc == SC.EXPECTED_RC.get(name, 0), f"exit {rc}: {err.strip()}"
    want = json.loads((DATA / f"{name}.json").read_text())
    diff = first_difference(json.loads(out), want)
    assert diff is None, f"{name}: {diff}"


@pytest.mark.parametrize("name", list(SC.TEXTS))
def test_text_snapshot(name: str) -> None:
    rc, out, err = SC.run(SC.TEXTS[name])
    assert rc == 0, f"exit {rc}: {err.strip()}"
    want = (DATA / f"{name}.txt").read_text()
    assert out == want, f"{name}.txt: {_text_difference(out, want)}"


def test_every_snapshot_file_is_checked() -> None:
    """A stored file with no invocation (renamed or dropped) is stale: regenerate with make.py."""
    expected = {f"{n}.json" for n in SC.SCENARIOS} | {f"{n}.txt" for n in SC.TEXTS}
    assert {p.name for p in DATA.iterdir()} == expected


def test_comparer_catches_differences() -> None:
    want = {"a": 1, "b": [1.0, "x", None, True], "c": {"d": 2.5}}
    assert first_difference(json.loads(json.dumps(want)), want) is None
    assert first_difference({"a": 1, "b": [1.0 + 1e-12, "x", None, True], "c": {"d": 2.5}}, want) is None
    assert "$.b[0]" in first_difference({"a": 1, "b": [1.001, "x", None, True], "c": {"d": 2.5}}, want)
    assert "$.b[3]" in first_difference({"a": 1, "b": [1.0, "x", None, 1], "c": {"d": 2.5}}, want)
    assert "$.c" in first_difference({"a": 1, "b": [1.0, "x", None, True], "c": {"e": 2.5}}, want)
    assert "$.b" in first_difference({"a": 1, "b": [1.0, "x", None], "c": {"d": 2.5}}, want)
    assert "order" in first_difference({"b": [1.0, "x", None, True], "a": 1, "c": {"d": 2.5}}, want)
    assert "$.a" in first_difference({"a": 1.0, "b": [1.0, "x", None, True], "c": {"d": 2.5}}, want)
    assert "line 2" in first_difference({"t": "a\nb\nc"}, {"t": "a\nB\nc"})
