"""An open layout field is searched over every value the framework runs, given the fixed ones (issue 22
item 6): for each framework and each way of fixing one field, whenever some layout with the fixed
value fits (found by evaluating every combination of the small space below), ``plan`` finds one too —
and it never returns a layout that breaks the fixed value or that ``evaluate`` refuses."""

from __future__ import annotations

import itertools

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario as plan
from gpuplan.catalog.frameworks import FRAMEWORKS
from gpuplan.errors import GpuplanError
from gpuplan.spec.options import PlanOptions

SPACE = {"zero": (0, 1, 2, 3), "tp": (1, 2), "pp": (1, 2), "micro_batch": (1, 2), "recompute": ("none", "full")}
FIXED = [(k, v) for k in ("zero", "tp", "pp", "recompute") for v in SPACE[k]]
TRAINING = {"seq_len": 2048, "global_batch": 32, "tokens": 1e9}


def _some_layout_fits(framework: str, field: str, value) -> bool:
    keys = [k for k in SPACE if k != field]
    for combo in itertools.product(*(SPACE[k] for k in keys)):
        layout = {field: value, **dict(zip(keys, combo, strict=True))}
        sc = make("llama-3.2-1b", "l4", 8, training={**TRAINING, "framework": framework}, layout=layout)
        try:
            if evaluate(sc).memory.fits:
                return True
        except GpuplanError:
            continue  # not a layout this framework runs, or not one of this model
    return False


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize(("field", "value"), FIXED)
def test_an_open_field_is_searched_over_every_value_the_framework_runs(framework, field, value):
    # an L4 (24 GB) so that the fixed values matter: ZeRO-0 of a 1B model does not fit every layout
    sc = make("llama-3.2-1b", "l4", 8, training={**TRAINING, "framework": framework}, layout={field: value})
    try:
        res = plan(sc, PlanOptions())
    except GpuplanError as err:  # a fixed value the framework never runs: refused up front, with the reason
        assert not _some_layout_fits(framework, field, value), str(err)
        return
    if res.best is None:
        assert not _some_layout_fits(framework, field, value)
        return
    lay = res.best.layout
    assert getattr(lay, field) == value
    assert evaluate(sc, lay).memory.fits  # the plan's layout is one evaluate accepts and fits
