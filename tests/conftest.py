from __future__ import annotations

import os
import time
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


def pytest_xdist_auto_num_workers(config: Any) -> int:
    """``-n auto`` (pyproject addopts): one worker per core, at most 4 — each worker holds its own imports
    (torch for the trace tests), and past 4 the longest test modules bound the run."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


@pytest.fixture
def mk():
    return make


def one_line(capsys, argv: list[str], limit_s: float = 5.0) -> str:
    """Run the CLI in-process on hostile input: exit 2 and one printable error line, no internal error, no
    traceback, within ``limit_s``; the line."""
    from gpuplan.cli import main

    t0 = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert rc == 2, (rc, err[-500:])
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error: ") and lines[0].isprintable(), err[-500:]
    assert len(lines[0]) <= 1100 and "internal error" not in lines[0] and "Traceback" not in err
    assert took < limit_s, took
    return lines[0]


def evaluate_config_json(cfg: dict, tmp_path: Any, seq_len: int) -> dict:
    """Evaluate a model given as its config.json file (as a user has it) on 8 H100s, ZeRO-3, 64 sequences;
    checks the answer counts the config's parameters and has a memory and an MFU; the JSON answer."""
    import json

    from gpuplan.api import evaluate_scenario
    from gpuplan.catalog.models import load_model

    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    est = evaluate_scenario(make(str(path), "h100-sxm", 8, training={"seq_len": seq_len, "global_batch": 64},
                                 layout={"zero": 3})).to_json()
    assert est["model"]["params"] == load_model(cfg).params
    assert 0 < est["memory"]["total"] and 0 < est["time"]["mfu"] < 1
    return est
