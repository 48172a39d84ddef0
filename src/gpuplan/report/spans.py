"""The 80 % intervals of an answer, in words: ``tokens/s 1,030 (80%: 870–1,160)``, and the verdict on a
peak whose interval straddles the capacity (the contract: ``"interval": {"p10", "p90"}`` per quantity)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.catalog.intervals import CLUSTER_SCALE, LARGE_GPUS, LONG, LONG_CONTEXT, NODE_SCALE, STANDARD_CONTEXT
from gpuplan.units import fmt_gib


def span(section: dict[str, Any], key: str, fmt: Callable[[float], str]) -> str:
    """`` (80%: low–high)`` for ``key`` of an answer's section, or "" without an interval."""
    iv = (section.get("interval") or {}).get(key)
    if not iv or iv.get("p10") is None:
        return ""
    return f" (80%: {fmt(iv['p10'])}–{fmt(iv['p90'])})"


def peak_span(mem: dict[str, Any]) -> str:
    iv = (mem.get("interval") or {}).get("total")
    if not iv or iv["p10"] == iv["p90"] == mem["total"]:
        return ""
    return f" (80%: {fmt_gib(iv['p10'])}–{fmt_gib(iv['p90'])})"


def tight_line(mem: dict[str, Any]) -> str:
    """A peak whose interval straddles the usable memory: it may run, and it may not."""
    usable, high = mem["usable"], mem["interval"]["total"]["p90"]
    share = mem.get("headroom_share", 0.0)
    kept = f" with {share:.0%} kept free (training.headroom)" if share else ""
    return (f"TIGHT: predicted {fmt_gib(mem['total'])} GiB{peak_span(mem)} of {fmt_gib(mem['capacity'])} GiB; the "
            f"interval's upper end is {fmt_gib(high - usable)} GiB over the {fmt_gib(usable)} GiB usable{kept} — "
            "runs like it have run and have run out of memory: free memory (recompute, a smaller micro-batch, more "
            "sharding) or measure it with `gpuplan profile`")


def alternatives_line(est: dict[str, Any]) -> str:
    """No framework named: how much a named one would change the throughput."""
    alts = est.get("framework_alternatives") or {}
    if not alts:
        return ""
    ranked = sorted(alts.items(), key=lambda kv: kv[1]["ratio"])
    return ("\nframework not named: the typical stack is assumed (training.framework); named, the throughput would "
            "be " + ", ".join(f"×{v['ratio']:.2f} {k}" for k, v in ranked))


# a regime's parts in words, their bounds the regime's own (catalog/intervals.py)
_REGIME_WORDS = {LONG: f"sequences past {LONG_CONTEXT:,} tokens",
                 STANDARD_CONTEXT: f"sequences up to {LONG_CONTEXT:,} tokens",
                 "named": "the framework named", "generic": "the framework not named", NODE_SCALE: "one node",
                 CLUSTER_SCALE: f"2 to {LARGE_GPUS:,} GPUs over nodes", "large": f"more than {LARGE_GPUS:,} GPUs",
                 "all": "every run"}


def basis_line(time: dict[str, Any]) -> str:
    """Which held-out runs an answer's throughput interval comes from (catalog/intervals.py's regime, in words)."""
    basis = time.get("interval_basis")
    if not basis:
        return ""
    key, _, rest = basis["regime"].partition(", ")
    words = [_REGIME_WORDS.get(part, f"{part.capitalize()} GPUs") for part in key.split("|")]
    extra = f"; widened: {rest}" if rest else ""
    return (f"\n80% intervals: from {basis['runs']} leave-one-source-out predictions of published runs like this one "
            f"({', '.join(words)}){extra}")


def peak_of(est: dict) -> str:
    """Which peak an MFU is of where it is not the run's own: an fp8 (or 4-bit) run's is of the 16-bit peak, as
    published runs state theirs — so it can pass what an fp8 kernel reaches of its own peak."""
    precision = est.get("scenario", {}).get("training", {}).get("precision")
    return " (of the 16-bit peak)" if precision == "fp8" else ""
