"""A global batch given in tokens, read against the layout it runs on: a round figure ("4M tokens") that does not
split over the data-parallel replicas is read as the nearest batch that does, within 5 % (``evaluate`` and ``plan``
both ask here)."""

from __future__ import annotations

from dataclasses import replace

from gpuplan.spec.scenario import Scenario

TOKENS_SLACK = 0.05  # a batch given in tokens ("4M") is a round figure: read within 5 % of it (io/user_keys.py)


def tokens_batch(sc: Scenario, multiple: int, near: int | None = None) -> Scenario:
    """A global batch given in tokens that does not split into ``multiple`` (dp × micro-batch) sequences: the
    multiple nearest it — or ``near``, a batch the caller chose — when within 5 % of the tokens read, with the
    reading listed under `read as`; else the scenario as it is (its check names the problem)."""
    tr = sc.training
    gb = tr.global_batch
    if "training.global_batch_tokens" not in sc.given or gb is None or (near is None and gb % multiple == 0):
        return sc
    sides = (gb // multiple * multiple, -(-gb // multiple) * multiple)
    best = near if near is not None else min((m for m in sides if m), key=lambda m: (abs(m - gb), -m))
    if abs(best / gb - 1) > TOKENS_SLACK:
        return sc
    reading = ("training.global_batch_tokens", f"{gb * tr.seq_len:,} tokens", best * tr.seq_len,
               f"{gb:,} sequences of {tr.seq_len:,} tokens split over no layout here: read as {best:,}, the "
               f"nearest batch that does, {best / gb - 1:+.1%} (a batch in tokens is a round figure)")
    return replace(sc, training=replace(tr, global_batch=best), read_as=sc.read_as + (reading,))
