"""A global batch given in tokens, read against the layout it runs on: a round figure ("4M tokens") that does not
split over the data-parallel replicas is read as the nearest batch that does, within 5 % (``evaluate`` and ``plan``
both ask here). A batch given in sequences is read the same way: a published batch is often a rounded one
(GPT-NeoX-20B's "1538 contexts" on 12 replicas; OPT-175B's 1,000 on 992 GPUs), and the framework ran the multiple
of dp × micro-batch nearest it. Further than 5 % off, ``evaluate``'s check names the problem and ``plan`` answers
which batches and counts split it."""

from __future__ import annotations

from dataclasses import replace

from gpuplan.spec.scenario import Scenario

TOKENS_SLACK = 0.05  # a batch given in tokens ("4M") is a round figure: read within 5 % of it (io/user_keys.py)


def batch_for_layout(sc: Scenario, multiple: int) -> Scenario:
    """A given global batch that does not split into ``multiple`` (dp × micro-batch) sequences: read as the multiple
    nearest it (``read_batch``); else the scenario as it is (its check names the problem)."""
    gb = sc.training.global_batch
    if gb is None or gb % multiple == 0:
        return sc
    sides = (gb // multiple * multiple, -(-gb // multiple) * multiple)
    return read_batch(sc, min((m for m in sides if m), key=lambda m: (abs(m - gb), -m))) or sc


def read_batch(sc: Scenario, best: int) -> Scenario | None:
    """The scenario with its global batch read as ``best`` sequences, the reading listed under `read as` — when the
    batch was given (in tokens or sequences) and ``best`` is within 5 % of it; else None."""
    tr = sc.training
    gb = tr.global_batch
    if gb is None or abs(best / gb - 1) > TOKENS_SLACK:
        return None
    if "training.global_batch_tokens" in sc.given:
        reading = ("training.global_batch_tokens", f"{gb * tr.seq_len:,} tokens", best * tr.seq_len,
                   f"{gb:,} sequences of {tr.seq_len:,} tokens split over no layout here: read as {best:,}, the "
                   f"nearest batch that does, {best / gb - 1:+.1%} (a batch in tokens is a round figure)")
    elif "training.global_batch" in sc.given:
        reading = ("training.global_batch", f"{gb:,} sequences", best,
                   f"{gb:,} sequences split over no layout here (data-parallel replicas × micro-batch): read as "
                   f"{best:,}, the nearest batch that does, {best / gb - 1:+.1%} (a published batch is often a "
                   "rounded figure)")
    else:
        return None
    return replace(sc, training=replace(tr, global_batch=best), read_as=sc.read_as + (reading,))
