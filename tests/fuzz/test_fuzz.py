"""Hostile inputs across every command (cases drawn by the hypothesis strategies of strategies.py,
built by hostile.py): a seeded sample in every CI run, a shrinking property test, the full 10,000
behind ``-m fuzz``. Each input must end in an answer (exit 0; valid JSON with ``--json``)
or one error line (exit 2), within 10 s and 1 GiB, without clobbering a file or leaving one behind."""

from __future__ import annotations

import os

import hostile
import pytest
import strategies
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the runner forks one child per input")
CI_CASES = 200  # command cases, and 25 of boundary.py's classes: ~60 s on two shared cores (README, "Hostile inputs")
DRAWN = CI_CASES + CI_CASES // strategies.BOUNDARY_EVERY


def _check(outcomes: list[hostile.Outcome]) -> None:
    bad = [o for o in outcomes if o.verdict not in ("answer", "error")]
    assert not bad, "\n".join(f"{o.verdict} {[a[:60] for a in o.case.argv[:10]]}: {o.detail[-300:]}" for o in bad[:10])
    verdicts = {o.verdict for o in outcomes}
    assert verdicts == {"answer", "error"}  # the sample holds both: it is not all refused


def test_a_seeded_sample_of_hostile_inputs():
    outcomes = hostile.run_cases(hostile.iter_cases(seed=14, n=CI_CASES), jobs=2, limit_s=10.0)
    assert len(outcomes) == DRAWN
    _check(outcomes)


@settings(max_examples=25, derandomize=True, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.cases())
def test_any_drawn_case_answers_or_fails_in_one_line(case):
    # one case at a time, so that a failure shrinks to the smallest case that shows it
    (outcome,) = hostile.run_cases([case], jobs=1, limit_s=10.0)
    assert outcome.verdict in ("answer", "error"), f"{outcome.verdict}: {case.argv[:8]} {outcome.detail[-300:]}"


def test_the_generator_covers_every_command_and_input_kind():
    cases = hostile.generate(seed=14, n=CI_CASES)
    commands = {c.argv[0] for c in cases}
    assert {"evaluate", "fit", "plan", "export", "trace", "profile"} <= commands
    files = [spec for c in cases for spec in c.files.values()]
    assert any(isinstance(s, tuple) and s[0] == "fifo" for s in files)
    assert any(isinstance(s, tuple) and s[0] == "symlink" for s in files)
    names = {name.rsplit("/", 1)[-1] for c in cases for name in c.files}
    assert {"config.json", "model.safetensors", "model.safetensors.index.json", "sc.yaml", "sc.json"} <= names
    # a generator per defect class of issue 25 (boundary.py), each in the CI sample
    kinds = {c.kind for c in cases}
    assert {f"boundary:{k}" for k in ("surrogate", "huge-count", "big-document", "safetensors", "output-target",
                                      "http")} <= kinds
    assert any(isinstance(s, tuple) and s[0] == "repeat" and s[3] * len(s[2]) > 8 * 2**20 for s in files)
    assert any(isinstance(s, tuple) and s[0] == "socket" for s in files)


@pytest.mark.fuzz
def test_ten_thousand_hostile_inputs():
    outcomes = hostile.run_cases(hostile.iter_cases(seed=14, n=10_000), jobs=2, limit_s=10.0)
    print(hostile.summary(outcomes))
    _check(outcomes)
