"""layout.etp, the experts' tensor parallelism as a run states it (Megatron-Core --expert-tensor-parallel-size,
torchtitan's expert_tensor_parallel_degree): 1 is MoE parallel folding (experts whole, ep over tp × dp × cp; Liu et
al. 2025, arXiv:2504.14960), tp splits the experts like the attention; open, the degrees decide (tp where ep divides
dp × cp)."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario
from gpuplan.errors import GpuplanError
from gpuplan.export.to_megatron import _parallel_args
from gpuplan.spec.layout import Layout

MOE = dict(model="mixtral-8x7b", gpu="h100-sxm", gpus=32)


def test_etp_one_folds_where_the_degrees_alone_would_split_the_experts():
    split, folded = Layout(dp=16, tp=2, ep=8), Layout(dp=16, tp=2, ep=8, etp=1)
    assert (split.expert_tp, split.folded_etp, split.expert_dp) == (2, None, 2)
    # folded: each expert whole on one rank of ep, its replicas over tp × dp / ep = 4
    assert (folded.expert_tp, folded.folded_etp, folded.expert_dp) == (1, 1, 4)
    assert Layout(dp=16, tp=2, ep=8, etp=2) == Layout(dp=16, tp=2, ep=8, etp=2)  # etp = tp: the default reading
    assert Layout(dp=16, tp=2, ep=8, etp=2).expert_tp == split.expert_tp


def test_a_rank_holds_whole_experts_under_etp_one():
    def weights(etp: int | None) -> float:
        lay = {"dp": 16, "tp": 2, "ep": 8, "zero": 1, "micro_batch": 1, **({"etp": etp} if etp else {})}
        return evaluate(make(**MOE, training={"seq_len": 4096}, layout=lay)).memory.peak.states.weights

    m = make(**MOE).model
    expert_bytes = m.n_layers * (m.n_experts // 8) * 3 * m.hidden * m.moe_ffn * 2  # bf16, this rank's 1 expert
    # tp 2 splits each expert in two; folded, the rank holds it whole: half an expert's bytes more per layer
    assert weights(1) - weights(None) == pytest.approx(expert_bytes / 2)
    assert weights(2) == weights(None)


@pytest.mark.parametrize("layout, words", [
    ({"dp": 8, "tp": 4, "ep": 8, "etp": 2}, "modelled as 1"),
    ({"dp": 4, "tp": 8, "ep": 8, "etp": 8}, "must divide dp×cp = 4"),
    ({"dp": 32, "tp": 1, "ep": 8, "etp": 0}, "layout.etp"),
])
def test_an_expert_tp_the_model_does_not_run_is_one_error(layout, words):
    with pytest.raises(GpuplanError, match=words):
        evaluate(make(**MOE, layout=layout))


@pytest.mark.parametrize("key", ["etp", "expert_tensor_parallel_size", "expert_tensor_parallel_degree"])
def test_the_frameworks_keys_read_as_etp(key):
    assert make(**MOE, layout={"dp": 16, "tp": 2, "ep": 8, key: 1}).layout["etp"] == 1


def test_the_planner_keeps_a_given_etp_one_and_the_export_writes_it():
    sc = make(**MOE, training={"seq_len": 4096, "tokens": 1e9}, layout={"ep": 8, "etp": 1})
    best = plan_scenario(sc).result.best
    assert best is not None and best.layout.etp == 1 and best.layout.expert_tp == 1
    lay = {"dp": 16, "tp": 2, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "pp_schedule": "1f1b", "virtual_stages": 1,
           "sequence_parallel": True, "tp_overlap": False}
    assert "--expert-tensor-parallel-size" in _parallel_args(lay, None, [])
