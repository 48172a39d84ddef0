"""A global batch given in tokens, read against the layout it runs on: a round figure ("4M tokens") that does not
split over the data-parallel replicas is read as the nearest batch that does, within 5 % (``evaluate`` and ``plan``
both ask here)."""

from __future__ import annotations

from dataclasses import replace

from gpuplan.spec.scenario import Scenario

TOKENS_SLACK = 0.05  # a batch given in tokens ("4M") is a round figure: read within 5 % of it (io/user_keys.py)


def tokens_batch(sc: Scenario, multiple: int) -> Scenario:
    """A global batch given in tokens that does not split into ``multiple`` (dp × micro-batch) sequences: read as
    the multiple nearest it (``read_batch``); else the scenario as it is (its check names the problem)."""
    gb = sc.training.global_batch
    if gb is None or gb % multiple == 0:
        return sc
    sides = (gb // multiple * multiple, -(-gb // multiple) * multiple)
    return read_batch(sc, min((m for m in sides if m), key=lambda m: (abs(m - gb), -m))) or sc


def read_batch(sc: Scenario, best: int) -> Scenario | None:
    """The scenario with its global batch read as ``best`` sequences, the reading listed under `read as` — when the
    batch was given in tokens and ``best`` is within 5 % of it; else None."""
    tr = sc.training
    gb = tr.global_batch
    if "training.global_batch_tokens" not in sc.given or gb is None or abs(best / gb - 1) > TOKENS_SLACK:
        return None
    reading = ("training.global_batch_tokens", f"{gb * tr.seq_len:,} tokens", best * tr.seq_len,
               f"{gb:,} sequences of {tr.seq_len:,} tokens split over no layout here: read as {best:,}, the "
               f"nearest batch that does, {best / gb - 1:+.1%} (a batch in tokens is a round figure)")
    return replace(sc, training=replace(tr, global_batch=best), read_as=sc.read_as + (reading,))
