"""Mixture-of-experts physics: DualPipe, expert all-to-all overlap where the framework offers it,
the busiest expert rank's load, and grouped vs looped expert GEMMs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import expert_imbalance
from gpuplan.model.memory import stage_peak
from gpuplan.model.pipeline import DUALPIPE_BUBBLE_SHARE, bubble_s
from gpuplan.model.runtime import step_time
from gpuplan.spec.scenario import complete_layout

MOE = "mixtral-8x7b"


def _sc(framework: str = "generic", **layout):
    return make(MOE, gpus=32, training={"global_batch": 256, "seq_len": 4096, "framework": framework},
                layout=layout)


def test_dualpipe_holds_two_stages_of_states_and_pp_plus_one_microbatches():
    # source: DeepSeek-V3 (arXiv:2412.19437) Table 2: DualPipe parameters 2×, activation PP + 1
    sc = _sc()
    one = complete_layout(sc, tp=2, pp=4, ep=4, zero=1)
    dual = complete_layout(sc, tp=2, pp=4, ep=4, zero=1, pp_schedule="dualpipe")
    a, b = stage_peak(sc.model, sc.training, one, 1), stage_peak(sc.model, sc.training, dual, 1)
    assert b.states.weights == pytest.approx(2 * a.states.weights)
    assert b.states.gradients == pytest.approx(2 * a.states.gradients)
    assert a.microbatches_in_flight == 3 and b.microbatches_in_flight == 5


def test_dualpipe_bubble_is_two_thirds_of_a_slot_per_half_pipeline():
    # source: arXiv:2412.19437 Table 2, (PP/2 − 1)(F&B + B − 3W) with B = 2F, W = F, F&B = F + B
    sc = _sc()
    lay = complete_layout(sc, tp=2, pp=4, ep=4, zero=1, pp_schedule="dualpipe")
    assert DUALPIPE_BUBBLE_SHARE == pytest.approx(2 / 3)
    assert bubble_s(lay, 3.0) == pytest.approx((4 / 2 - 1) * 3.0 * 2 / 3)
    one = complete_layout(sc, tp=2, pp=4, ep=4, zero=1)
    assert bubble_s(one, 3.0) == pytest.approx(3 * 3.0)


def test_dualpipe_needs_an_even_pipeline_and_megatron_refuses_it():
    with pytest.raises(GpuplanError, match="even pp"):
        complete_layout(_sc(), tp=1, pp=1, ep=4, zero=1, dp=32, pp_schedule="dualpipe")
    from gpuplan.api import evaluate_scenario as evaluate
    sc = make(MOE, gpus=32, training={"global_batch": 256, "seq_len": 4096, "framework": "megatron-core"},
              layout={"tp": 2, "pp": 4, "ep": 4, "zero": 1, "pp_schedule": "dualpipe"})
    with pytest.raises(GpuplanError, match="DualPipe"):
        evaluate(sc)


def test_dualpipe_and_ep_overlap_hide_the_all_to_all():
    sc = _sc()
    plain = complete_layout(sc, tp=2, pp=4, ep=4, zero=1)
    hidden = complete_layout(sc, tp=2, pp=4, ep=4, zero=1, ep_overlap=True, pp_schedule="interleaved")
    dual = complete_layout(sc, tp=2, pp=4, ep=4, zero=1, pp_schedule="dualpipe")
    st = {k: step_time(sc.model, sc.hardware, sc.training, lay) for k, lay in
          (("plain", plain), ("hidden", hidden), ("dual", dual))}
    assert "ep_exposed" not in st["plain"].comm_detail
    assert st["hidden"].comm_detail["ep_exposed"] < st["plain"].comm_detail["ep"]
    assert st["dual"].comm_detail["ep_exposed"] < st["dual"].comm_detail["ep"]


def test_dualpipe_all_to_all_costs_the_compute_only_its_20_sms():
    # source: arXiv:2412.19437 Sec. 3.2.2: DeepSeek-V3's all-to-all kernels run on 20 SMs; on a 132-SM H100 the
    # compute beside them runs on the other 112: 20 / 112 s lost per hidden second, below the fitted share
    from gpuplan.catalog.constants import constant

    sc = _sc()
    dual = complete_layout(sc, tp=2, pp=4, ep=4, zero=1, pp_schedule="dualpipe")
    st = step_time(sc.model, sc.hardware, sc.training, dual)
    d = st.comm_detail
    share = constant("comm_interference")
    others = share * (d["dp_total"] - d["dp_exposed"] + d["tp"] - d["tp_exposed"] + d["pp"])  # DualPipe hides pp
    assert sc.hardware.gpu.sm_count == 132 and 20 / 112 < share
    assert st.interference_s == pytest.approx(others + 20 / 112 * (d["ep"] - d["ep_exposed"]), rel=1e-9)
    assert d["ep"] - d["ep_exposed"] > 0


def test_plan_overlaps_the_all_to_all_only_where_the_framework_offers_it():
    for framework, want in (("generic", True), ("megatron-core", None), ("deepspeed", False)):
        sc = make(MOE, gpus=32, training={"global_batch": 256, "seq_len": 4096, "framework": framework},
                  layout={"ep": 8, "pp": 1})
        best = plan_scenario(sc, max_gpus=32).result.best
        assert best is not None and best.layout.ep == 8
        if want is not None:
            assert best.layout.ep_overlap is want, framework
    # Megatron-Core: only with virtual stages when pp > 1 (its cannot_run rule), so never under 1F1B
    sc = make(MOE, gpus=32, training={"global_batch": 256, "seq_len": 4096, "framework": "megatron-core"},
              layout={"ep": 8, "pp": 2, "pp_schedule": "1f1b"})
    best = plan_scenario(sc, max_gpus=32).result.best
    assert best is not None and best.layout.ep_overlap is False


def test_expert_imbalance_is_the_gaussian_extreme_of_a_binomial_share():
    assert expert_imbalance(4096, 8, 1) == 1.0
    assert expert_imbalance(4096, 8, 64) == pytest.approx(1 + math.sqrt(2 * math.log(64) * (63 / 64) / 32768))
    # fewer tokens per rank: a larger relative spread
    assert expert_imbalance(256, 2, 8) > expert_imbalance(4096, 2, 8) > 1.0


def test_looped_expert_gemms_cost_launches_that_a_grouped_gemm_saves():
    # Megatron-Core's SequentialMLP (moe_grouped_gemm False, its CLI default) loops over the experts; the MoE runs
    # published on it (Megatron-Bridge's MoE model providers, slime's scripts) and torchtitan group them
    from gpuplan.model.compute import _layer_time, matmul_s
    from gpuplan.model.runtime import device
    from gpuplan.model.software import software
    core = _sc("megatron-core")
    sw = software("megatron-core", False, core.model)
    assert sw.grouped_experts and software("torchtitan", False, core.model).grouped_experts
    moe = next(lg for lg in core.model.layers if lg.moe)
    dev = device(core.hardware, core.training)
    args = (core.model, moe, 4096.0, 4096, 1, 1, False, "none", "flash", 0.0, "full")
    looped = _layer_time(*args, replace(sw, grouped_experts=False), False, False, None, dev, None)  # no AMP, no fp8
    grouped = _layer_time(*args, sw, False, False, None, dev, None)
    # ep=1: all 8 experts local, one GEMM each (each kernel with its own fixed time and waves) instead
    # of one grouped GEMM per matrix over the 8 experts' tokens (4096 tokens x top-2 / 8 experts each)
    m = core.model
    tokens = 4096.0 * m.top_k / m.n_experts
    expected = sum(8 * matmul_s(tokens, w.shape[0], w.shape[1], dev) - matmul_s(tokens, w.shape[0], w.shape[1], dev,
                                                                               batch=8)
                   for w in moe.weights if w.is_matrix and w.group == "expert")
    assert expected > 0
    assert looped.fwd - grouped.fwd == pytest.approx(expected)


def test_expert_parallelism_past_the_data_parallel_ranks_is_read_as_moe_parallel_folding():
    # Qwen3-235B-A22B at tp 2, pp 8 on 256 GPUs leaves dp 16; ep 32 runs under Megatron-Core's MoE parallel folding
    # (arXiv:2504.14960): experts over the tp × dp ranks with expert tensor parallel 1
    from gpuplan.model.estimate import Note
    from gpuplan.model.params import rank_params

    sc = make("qwen3-235b-a22b", gpus=256, training={"framework": "megatron-core", "global_batch": 512},
              layout={"tp": 2, "pp": 8, "ep": 32, "dp": 16, "recompute": "full"})
    est = evaluate(sc)
    lay = est.layout
    assert (lay.expert_tp, lay.folded_etp, lay.expert_dp) == (1, 1, 1)
    assert Note.EXPERT_FOLDING in est.notes
    # each rank holds 128 / 32 = 4 whole experts: the expert parameters of tp 2 × ep 32 unfolded, ×2
    m = sc.model
    folded = rank_params(m, 2, 32, 8, 1, 0, None, 0, 1)
    split = rank_params(m, 2, 32, 8, 1, 0, None, 0)
    assert folded.expert == pytest.approx(2 * split.expert) and folded.dense == split.dense
    # an unfolded layout keeps Megatron's default: experts over the data-parallel ranks, split over tp
    classic = complete_layout(sc, tp=2, pp=8, ep=16, dp=16)
    assert (classic.expert_tp, classic.folded_etp, classic.expert_dp) == (2, None, 1)
    # a MoE block's MLP runs no tensor-parallel collective folded (Qwen3 has no shared expert): only the attention's;
    # unfolded (etp = tp) its dispatcher all-gathers and reduce-scatters the routed tokens over the expert-tensor
    # ranks, top_k (8) copies of each (Megatron-Core token_dispatcher.py): about 8x the attention's pair
    from gpuplan.model.runtime import _pipeline

    p = _pipeline(m, sc.hardware, est.scenario.training, lay, sc.corrections, False)
    unfolded = _pipeline(m, sc.hardware, est.scenario.training, replace(lay, ep=16), sc.corrections, False)
    attention_only = p.sc.params.sublayers - p.sc.params.moe_layers
    assert m.shared_ffn == 0 and p.ep_s > 0
    per_attention = p.tp_s / attention_only
    routed = (unfolded.tp_s - per_attention * attention_only) / (per_attention * unfolded.sc.params.moe_layers)
    assert 0.5 * m.top_k < routed < 1.3 * m.top_k  # each call's latency does not grow with its bytes


def test_expert_parallelism_that_no_folding_runs_is_refused():
    sc = make("qwen3-235b-a22b", gpus=256, training={"framework": "megatron-core", "global_batch": 512},
              layout={"tp": 2, "pp": 8, "ep": 64, "dp": 16})
    with pytest.raises(GpuplanError, match=r"ep=64 must divide dp×cp = 16 .* or tp×dp×cp = 32 \(MoE parallel "
                                           r"folding: expert tensor parallel 1\)"):
        evaluate(sc)


def test_folded_experts_cast_whole_matrices_for_their_token_shard():
    # folded (expert tensor parallel 1), a rank casts whole expert weights (tp × the split ones) and the routed
    # activations of its own sequence-parallel shard (1/tp of the group's tokens, each row tp × as wide)
    from gpuplan.model.fp8 import fp8_cast_bytes, fp8_scheme

    m = make("qwen3-235b-a22b", gpus=256).model
    moe = next(lg for lg in m.layers if lg.moe)
    s = fp8_scheme("tensorwise", "megatron-core", False, 2, True, 4)
    tokens = 4096.0
    split = fp8_cast_bytes(m, moe, tokens, 2, 32, s)
    folded = fp8_cast_bytes(m, moe, tokens, 2, 32, s, etp=1)
    assert split == fp8_cast_bytes(m, moe, tokens, 2, 32, s, etp=2)  # etp = tp is the unfolded layout
    assert folded != split and all(f > 0 for f in folded)
