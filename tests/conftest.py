from __future__ import annotations

from typing import Any

import pytest

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.io.scenario import parse_scenario


def make(model: Any = "llama-3.1-8b", gpu: str = "h100-sxm", gpus: int | None = None, **sections: dict) -> Any:
    """A parsed scenario; ``gpus`` left out unless given (a given count is fixed for plan and fit)."""
    count = {} if gpus is None else {"gpus": gpus}
    raw = {"model": model, "hardware": {"gpu": gpu, **count, **sections.get("hardware", {})},
           "training": sections.get("training", {}), "layout": sections.get("layout", {})}
    return parse_scenario(raw)


def mem(model: Any = "llama-3.1-8b", gpu: str = "h100-sxm", gpus: int | None = None, **sections: dict) -> dict:
    return evaluate(make(model, gpu, gpus, **sections)).to_json()["memory"]


@pytest.fixture
def mk():
    return make
