"""Help that teaches (issue 13, item 8): every flag's help shows its allowed values, default and unit,
generated from the scenario schema (io/schema.py FIELD_DOCS + the spec types); the equilibrium sentence
says what the equilibrium computes (parallel efficiency against the smallest count that fits) and
states the marginal gain of its last step; efficiency above 100% is explained where it is shown."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

from gpuplan.flags import build_parser
from gpuplan.io.schema import FIELD_DOCS, FLAG_KEYS, field_help
from gpuplan.report.advice import efficiency_note, equilibrium_json
from gpuplan.search.rank import marginal_efficiency, scaling_curve
from gpuplan.spec import Layout, Training


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_scenario_key_is_documented():
    assert set(FLAG_KEYS.values()) <= set(FIELD_DOCS)


@pytest.mark.parametrize("key", sorted(FLAG_KEYS.values()))
def test_scenario_flag_help_shows_values_default_and_unit(key):
    text = field_help(key)
    assert "default: " in text and text.endswith(f"[{key}]")
    section, _, name = key.partition(".")
    cls = {"training": Training, "layout": Layout}.get(section)
    hint = get_type_hints(cls).get(name) if cls else None
    if get_origin(hint) is Literal:
        for value in get_args(hint):  # every allowed value is listed, from the type itself
            assert value in text, (key, value)
    if hint is bool:
        assert "true | false" in text
    if FIELD_DOCS[key].unit:
        assert f"unit: {FIELD_DOCS[key].unit}" in text


def test_defaults_come_from_the_spec_types():
    assert "default: 4096; unit: tokens" in field_help("training.seq_len")
    assert "default: 16" in field_help("training.lora_rank")
    assert "default: flash" in field_help("training.attention")
    assert "unit: USD per GPU-hour" in field_help("hardware.price_per_gpu_hour")


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_option_of_every_command_says_its_default(command):
    for action in _subparsers()[command]._actions:
        if not action.option_strings or isinstance(action, argparse._StoreTrueAction | argparse._HelpAction):
            continue
        assert action.help and ("default" in action.help or "required" in action.help), \
            f"{command} {action.option_strings[0]}: {action.help!r}"


def test_help_text_renders_with_percent_signs():
    text = _subparsers()["plan"].format_help()
    assert "--tp TP" in text and "default: 1 (plan searches it)" in " ".join(text.split())


# ---- the equilibrium measures what its sentence says ---------------------------------------------

@dataclass(eq=False)
class _C:  # what scaling_curve reads of a candidate
    gpus: int
    tokens_per_s: float


def _curve(points: list[tuple[int, float]], threshold: float = 0.8):
    best = {("g", n): _C(n, t) for n, t in points}
    return scaling_curve(best, "g", threshold)  # type: ignore[arg-type]


def test_marginal_efficiency_is_the_share_the_added_gpus_bring():
    # 8 → 16 GPUs, 8 → 15 tokens/s: the 8 added GPUs bring 7, where at 1/GPU they would bring 8: 87.5%
    assert marginal_efficiency(_C(8, 8.0), _C(16, 15.0)) == pytest.approx(0.875)  # type: ignore[arg-type]
    assert marginal_efficiency(_C(8, 8.0), _C(12, 12.0)) == pytest.approx(1.0)  # type: ignore[arg-type]


def test_equilibrium_states_what_it_measures_and_the_marginal_gain():
    # overall efficiency vs 8 GPUs: 16 → 15/16 = 94%, 32 → 26/32 = 81%, 64 → 30/64 = 47%; threshold 80%:
    # the equilibrium is 32. The step 16 → 32 gives the 16 added GPUs (26/15 − 1)/1 = 73% of what they
    # would have at 16's per-GPU rate; the next, 32 → 64, (30/26 − 1)/1 = 15%
    curve, eq = _curve([(8, 8.0), (16, 15.0), (32, 26.0), (64, 30.0)])
    assert eq.gpus == 32 and eq.from_gpus == 16 and eq.marginal == pytest.approx(11 / 15)
    assert eq.next_gpus == 64 and eq.next_efficiency == pytest.approx(30 / 64) and eq.next_marginal == \
        pytest.approx(4 / 26)
    assert curve[1].marginal == pytest.approx(0.875) and curve[2].efficiency == pytest.approx(0.8125)
    why = equilibrium_json(eq)["why"]
    assert "parallel efficiency (throughput per GPU against the smallest count that fits, 8 GPUs) stays ≥80%" in why
    assert "81% at 32" in why and "the 16 GPUs added from 16 to 32 bring 73% of the throughput per GPU at 16" in why \
        and "at 64 it falls to 47% (15% marginal)" in why
    assert "each added GPU still buys" not in why


def test_equilibrium_at_the_smallest_count_says_so():
    _, eq = _curve([(8, 8.0), (16, 10.0)])
    assert eq.gpus == 8 and eq.marginal is None and eq.next_gpus == 16
    assert "the smallest count that fits" in equilibrium_json(eq)["why"]


def _row(gpus: int, eff: float, **layout) -> dict:
    lay = {"recompute": "none", "micro_batch": 1, "offload": "none", "zero": 1, "pp": 1, "tp": 1, "cp": 1,
           "pp_schedule": "1f1b", **layout}
    return {"gpus": gpus, "efficiency": eff, "best": {"scenario": {"layout": lay}}}


def test_efficiency_above_100_percent_is_explained_with_the_layout_change():
    rows = [_row(8, 1.0, recompute="full", tp=2), _row(16, 1.12), _row(32, 0.97)]
    note = efficiency_note(rows)
    assert note is not None and "above 100% (at 16 GPUs)" in note
    assert "recompute full→none" in note and "tp 2→1" in note
    assert efficiency_note([_row(8, 1.0), _row(16, 0.9)]) is None
