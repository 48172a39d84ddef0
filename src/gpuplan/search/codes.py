"""Why the search left something out, as typed values: report/ says them in words (report/words.py),
and nothing matches on a sentence. A ``Rejection`` keys the search's counts; equal rejections are the
same key."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Reason(Enum):
    OUT_OF_MEMORY = "out_of_memory"              # the peak (with the headroom kept free) is above the GPU's memory
    OUT_OF_HOST_MEMORY = "out_of_host_memory"    # offloaded state is above the node's host memory
    FRAMEWORK = "framework"                      # the framework cannot run the layout (a cited rule)
    ZERO_GROUP = "zero_group"                    # a fixed layout.zero_group does not divide dp×cp of a split
    NO_COMPUTE_PEAK = "no_compute_peak"          # a GPU type with no published 16-bit peak: not searched
    PRECISION = "precision"                      # a GPU type without tensor cores for training.precision
    DISPATCHER = "dispatcher"                    # a GPU type whose nodes cannot run training.moe_dispatcher
    NO_PRICE = "no_price"                        # a GPU type without a price, where cost ranks the plan
    WORK_LIMIT = "work_limit"                    # past the search's bound on work: counted, not searched


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason, with what it names: the GPU type skipped, the framework and its rule."""

    reason: Reason
    gpu: str | None = None        # NO_COMPUTE_PEAK, PRECISION, DISPATCHER, NO_PRICE
    framework: str | None = None  # FRAMEWORK
    rule: str | None = None       # FRAMEWORK: the rule's id in catalog/frameworks.json
    detail: str | None = None     # FRAMEWORK: the rule's cited reason (catalogue data); PRECISION, DISPATCHER: the
    #                               model's check of the GPU against the precision or the expert exchange (the error
    #                               ``evaluate`` raises)
    _h: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:  # the search's counts key on rejections ~10^5 times a plan: hashed once
        object.__setattr__(self, "_h", hash((self.reason, self.gpu, self.framework, self.rule, self.detail)))

    def __hash__(self) -> int:
        return self._h


OUT_OF_MEMORY = Rejection(Reason.OUT_OF_MEMORY)
OUT_OF_HOST_MEMORY = Rejection(Reason.OUT_OF_HOST_MEMORY)
ZERO_GROUP = Rejection(Reason.ZERO_GROUP)
WORK_LIMIT = Rejection(Reason.WORK_LIMIT)
