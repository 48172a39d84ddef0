"""What a plan is asked besides the scenario: ONE value, parsed once at the edge (io/options.py) from the
command line, the Python API and the web API alike, checked on construction (SI units inside)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpuplan.errors import GpuplanError

Objective = Literal["time", "cost"]
OBJECTIVES = ("time", "cost")
MAX_COUNT = 2**20        # GPUs a search may reach, candidates an answer may list
MAX_GPU_TYPES = 64       # more than the catalogue holds


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions:
    """``objective`` ranks inside the rule; ``deadline_s`` (seconds) and ``budget_usd`` constrain it;
    ``max_gpus`` bounds an open GPU count only (None: spec/defaults.MAX_GPUS; a fixed hardware.gpus is
    the answer's count); ``top`` candidates are listed; ``threshold`` is the parallel efficiency the
    compute equilibrium keeps; ``gpu_types``: () the scenario's own GPU type, ("all",) every catalogue
    type with a compute peak, else the types named. ``providers``, ``region`` (a provider's region code or
    a geography: eu, us, asia) and ``pricing`` (on_demand, spot, reserved_1y) price each GPU type at its
    cheapest matching row of the price catalogue (catalog/prices.py) instead of its one list price."""

    objective: Objective = "time"
    deadline_s: float | None = None
    budget_usd: float | None = None
    max_gpus: int | None = None
    top: int = 5
    threshold: float = 0.8
    gpu_types: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    region: str | None = None
    pricing: str | None = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise GpuplanError(f"objective must be time or cost, got {self.objective!r}")
        for name, value in (("deadline", self.deadline_s), ("budget", self.budget_usd)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise GpuplanError(f"{name} must be positive, got {value!r}")
        for name, n in (("max_gpus", self.max_gpus), ("top", self.top)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT):
                raise GpuplanError(f"{name} must be a whole number from 1 to {MAX_COUNT:,}, got {n!r}")
        if not (math.isfinite(self.threshold) and 0 < self.threshold <= 1):
            raise GpuplanError(f"threshold must be in (0, 1], got {self.threshold}")
        if len(self.gpu_types) > MAX_GPU_TYPES or not all(isinstance(g, str) and g for g in self.gpu_types):
            raise GpuplanError(f"gpu must be a GPU type, a list of at most {MAX_GPU_TYPES} of them, or 'all'")

    @property
    def several(self) -> bool:
        """More than one GPU type is compared (a list, or 'all')."""
        return len(self.gpu_types) > 1 or self.gpu_types == ("all",)

    @property
    def market(self) -> bool:
        """The plan prices GPU types from the price catalogue (a provider, region or pricing is given)."""
        return bool(self.providers) or self.region is not None or self.pricing is not None

    @property
    def priced(self) -> bool:
        """Cost ranks the plan: a GPU type without a price cannot be ranked."""
        return self.objective == "cost" or self.budget_usd is not None or self.market


# The rule a plan's headline answer follows (issue 22): the question is "how many GPUs?", and with no
# deadline and no budget more GPUs are always "faster", so fastest-first would send every run to the
# largest count searched. The rules, in the order they apply:
RULES = {
    "fixed": "the count is given: the best layout on it",
    "pareto": "a deadline and a budget: the cheapest run that finishes in time within the budget (the runs that "
              "meet both, on their time/cost frontier)",
    "deadline": "a deadline: the cheapest run that finishes in time",
    "budget": "a budget: the fastest run within it",
    "equilibrium": "no deadline and no budget: the compute equilibrium — the largest count whose parallel "
                   "efficiency stays at or above the threshold — never a count past it",
}
