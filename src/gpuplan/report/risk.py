"""The risks of a plan's answer beside its rule: a run chosen on its predicted time or cost whose 80 % interval reaches
past the deadline or budget, and the first run of the answer's order that meets it even at the interval's upper end
(report/advice.py words the recommendation with them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.units import fmt_duration, fmt_usd

if TYPE_CHECKING:
    from gpuplan.search.enumerate import Candidate
    from gpuplan.search.plan import PlanResult


def _upper_train_s(c: Candidate) -> float | None:
    """The upper end of a run's 80 % interval of time-to-train (None where the corpus gives no interval)."""
    iv = c.time.intervals() if c.time is not None else None
    return iv["train_s"]["p90"] if iv and "train_s" in iv else None


def _first_within(r: PlanResult, best: Candidate, limit: float | None, upper_of: Callable[[Candidate], float | None]
                  ) -> tuple[float, Candidate | None, float | None] | None:
    """(the chosen run's upper end, the first run of the answer's order within ``limit`` even at its upper end and
    that end) where the chosen run's upper end passes ``limit``; None where it does not (or no interval is known)."""
    upper = upper_of(best)
    if limit is None or upper is None or upper <= limit:
        return None
    safe = next((c for c in r.ranked if (u := upper_of(c)) is not None and u <= limit), None)
    return upper, safe, upper_of(safe) if safe is not None else None


def deadline_risk(r: PlanResult, best: Candidate) -> dict[str, Any] | None:
    """A run chosen on its predicted time whose 80 % interval reaches past the deadline: how far, and the
    first run of the answer's order (cheapest first) that meets the deadline even at its interval's upper
    end — None when the chosen run meets it there too (or no interval is known)."""
    found = _first_within(r, best, r.options.deadline_s, _upper_train_s)
    if found is None:
        return None
    upper, safe, su = found
    text = f"; at the upper end of its 80% interval it takes {fmt_duration(upper)}, past the deadline"
    if safe is None or su is None:
        return {"train_s_p90": upper, "safe": None, "text": text + " — no run searched meets the deadline there"}
    text += (f" — {safe.gpus}× {safe.gpu} meets it even there ({fmt_duration(su)} at most"
             + (f", {fmt_usd(safe.usd)}" if safe.usd is not None else "") + ")")
    return {"train_s_p90": upper, "text": text,
            "safe": {"gpu": safe.gpu, "gpus": safe.gpus, "train_s_p90": su, "usd": safe.usd}}


def _upper_usd(c: Candidate) -> float | None:
    """The upper end of a run's 80 % cost interval: its GPU-hours' upper end at its price (report/render.py)."""
    iv = c.time.intervals() if c.time is not None else None
    price = c.cost.usd_per_gpu_hour
    return iv["gpu_hours"]["p90"] * price if iv and "gpu_hours" in iv and price is not None else None


def budget_risk(r: PlanResult, best: Candidate) -> dict[str, Any] | None:
    """A run chosen on its predicted cost whose 80 % interval reaches past the budget: how far, and the first run of
    the answer's order (fastest first) that stays within the budget even at its interval's upper end — None when the
    chosen run stays within it there too (or no interval is known): ``deadline_risk``'s twin."""
    found = _first_within(r, best, r.options.budget_usd, _upper_usd)
    if found is None:
        return None
    upper, safe, su = found
    text = f"; at the upper end of its 80% interval it costs {fmt_usd(upper)}, over the budget"
    if safe is None or su is None:
        return {"usd_p90": upper, "safe": None, "text": text + " — no run searched stays within it there"}
    text += (f" — {safe.gpus}× {safe.gpu} stays within it even there ({fmt_usd(su)} at most"
             + (f", {fmt_duration(safe.train_s)}" if safe.train_s is not None else "") + ")")
    return {"usd_p90": upper, "text": text,
            "safe": {"gpu": safe.gpu, "gpus": safe.gpus, "usd_p90": su, "train_s": safe.train_s}}
