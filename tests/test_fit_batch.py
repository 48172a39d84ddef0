"""``fit`` takes the global batch ``plan`` takes at a given count (search/batch.py ``batch_at_count``): a default batch
that a count splits over no layout moves to one it does, a given one that splits nowhere is answered with the
nearest batches and counts that do — never "no valid layout keeps the fixed layout fields" for fields not given."""

from __future__ import annotations

import json

import gpuplan
from gpuplan.api import plan_scenario
from gpuplan.io.scenario import parse_scenario


def test_a_given_count_the_default_batch_does_not_split_moves_the_batch_as_plan_does():
    # 24 H100 = 3 nodes: dp × tp × pp with tp ≤ 8 and pp a divisor of 80 or a power of two needs dp 3 — 1,024
    # sequences do not split over it; plan at 24 takes 1,032 (docs/search.md)
    f = gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm", gpus=24)
    p = plan_scenario(parse_scenario({"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "gpus": 24}}))
    assert f.min_gpus == 24 and f.result.global_batch == p.result.global_batch == 1032
    row = f.to_json()
    assert row["batch_moved"] == {"from": 1024, "to": 1032, "why": row["batch_moved"]["why"]}
    assert row["best"]["scenario"]["training"]["global_batch"] == 1032
    assert row["best"]["memory"]["fits"] and f.best.layout.dp * f.best.layout.tp * f.best.layout.pp == 24


def test_a_given_batch_no_layout_of_the_count_splits_names_what_would(capsys):
    from gpuplan.cli import main

    # docs/search.md: 100 sequences on 328 GPUs of a 70B (dp 41, 82, 164 or 328 beside tp ≤ 8 and pp | 80 or a
    # power of two): the nearest batches 82 and 123, the nearest counts 320 and 400 — plan's own answer
    f = gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm", gpus=328, global_batch=100)
    assert f.min_gpus is None and f.result.tried == 0
    g = f.result.no_split
    assert (g.batches, g.counts) == ((82, 123), (320, 400))
    assert main(["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "328", "--global-batch", "100"]) \
        == 0
    out = capsys.readouterr().out
    assert "no layout of 328 GPUs splits a global batch of 100 sequences" in out and "320 or 400 GPUs" in out
    assert "fixed layout fields" not in out
    assert main(["fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "328", "--global-batch", "100",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    row = row[0] if isinstance(row, list) else row
    assert row["no_split"]["batches"] == [82, 123] and row["no_split"]["counts"] == [320, 400]


def test_an_open_count_climbs_the_counts_plan_searches():
    # fit and plan agree on the smallest count (tests/test_plan.py): open, the counts whose layouts split the
    # default batch — 32 for a 70B on H100; 24, asked, fits at the batch plan takes there
    open_fit = gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm")
    assert open_fit.min_gpus == 32 and open_fit.result.global_batch == 1024
    assert "batch_moved" not in open_fit.to_json()
    assert gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm", gpus=24).best.layout.offload == "none"
