"""gpuplan trace where real runs need it (issue 26 item 3): one pipeline stage with its micro-batches in
flight (1F1B and interleaved), and ZeRO-1/2 over simulated ranks — traced states and activations within
5 % of ``evaluate`` on a small Llama (Llama-3.2-1B's shapes, 8 layers)."""

from __future__ import annotations

from functools import partial

import pytest

torch = pytest.importorskip("torch")

from gpuplan.errors import GpuplanError  # noqa: E402
from gpuplan.io.scenario import parse_scenario  # noqa: E402
from gpuplan.model.pipeline import flight_of  # noqa: E402
from gpuplan.trace import trace_scenario  # noqa: E402
from gpuplan.trace.stage import in_flight_peak, stage_schedule  # noqa: E402

# Llama-3.2-1B (hidden 2048, 32 heads of 64, 8 K/V heads, SwiGLU 8192, vocab 128,256, tied) with 8 layers
LLAMA_1B_8L = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
               "tie_word_embeddings": True}
UNTIED = {**LLAMA_1B_8L, "tie_word_embeddings": False}
LLAMA_1B_4L = {**LLAMA_1B_8L, "num_hidden_layers": 4}


def trace(gpus, global_batch, model=LLAMA_1B_8L, stage=None, seq_len=512, **layout):
    sc = parse_scenario({"model": model, "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                         "training": {"seq_len": seq_len, "global_batch": global_batch}, "layout": layout})
    return trace_scenario(sc, stage=stage)


def rows(res):
    return {r["component"].split(" (")[0]: r for r in res["compare"]}


def assert_states_exact(r, rel=1e-6):
    for k in ("weights", "gradients", "optimizer", "states"):
        assert r[k]["measured"] == pytest.approx(r[k]["predicted"], rel=rel), k


@pytest.mark.parametrize(("gpus", "pp", "stage", "model"), [
    (2, 2, None, LLAMA_1B_8L),  # the most loaded stage: the last (its own copy of the tied matrix, the logits)
    (2, 2, 0, LLAMA_1B_8L),     # the first: the embedding, 2 micro-batches in flight
    (4, 4, 0, LLAMA_1B_8L),     # 4 in flight
    (3, 3, 1, UNTIED),          # a middle stage of an uneven split (3, 3, 2 layers), 2 in flight
    (4, 4, None, UNTIED),       # the last stage holding the untied LM head
])
def test_pipeline_1f1b_stage_agrees_with_evaluate(gpus, pp, stage, model):
    res = trace(gpus, 8, model, stage, pp=pp)
    t, r = res["trace"], rows(res)
    chosen = res["predicted"]["memory"]
    assert t["pp"] == pp and t["stage"] == (stage if stage is not None else pp - 1)
    # 1F1B (PipeDream-flush): stage s holds min(p − s, m) micro-batches at its peak — traced and predicted
    assert t["in_flight_traced"] == t["in_flight_predicted"] == min(pp - t["stage"], 8)
    assert t["microbatches_per_step"] == 8 and t["microbatches_traced"] == min(8, pp - t["stage"] + 1)
    assert_states_exact(r)  # that stage's layers (+ embedding / head) only, exact in bytes
    assert abs(r["activations"]["ratio"] - 1) < 0.05
    assert abs(r["allocated peak"]["ratio"] - 1) < 0.05
    assert r["model FLOPs per token"]["ratio"] == pytest.approx(1.0, abs=1e-3)  # the stage's share of the model's
    # what is left of the activation difference is named and sized: the stage's outputs kept for backward
    left = r["activations"]["measured"] - r["activations"]["predicted"] - res["measured"]["memory"]["detail"][
        "stage_outputs_kept"]
    assert abs(left) < 0.005 * r["activations"]["predicted"]
    assert chosen["stage"] == t["stage"]


def test_first_stage_holds_p_micro_batches_and_the_timeline_shows_the_schedule():
    res = trace(4, 8, pp=4, stage=0)
    events = [ev for ev, _ in res["measured"]["memory"]["timeline"]]
    assert events[:10] == ["start", "F0", "F1", "F2", "F3", "B0", "F4", "B1", "B2", "B3"]
    per_mb = res["predicted"]["memory"]["activations_per_microbatch"]  # 2 layers, one micro-batch
    assert rows(res)["activations"]["measured"] == pytest.approx(4 * per_mb, rel=0.05)
    assert any("pipeline stage 0 of 4" in e for e in res["explanations"])


@pytest.mark.parametrize(("gpus", "layout"), [
    (4, {"zero": 1}),
    (8, {"zero": 2}),
    (8, {"zero": 1, "pp": 2}),            # dp 4 × pp 2: the last stage's ranks
    (8, {"zero": 1, "pp": 2, "tp": 2}),   # dp 2 × tp 2 × pp 2: 4 ranks of the stage simulated
])
def test_zero_1_and_2_agree_with_evaluate(gpus, layout):
    res = trace(gpus, 16, LLAMA_1B_4L, **layout)
    r, t = rows(res), res["trace"]
    tp, pp = layout.get("tp", 1), layout.get("pp", 1)
    nd = gpus // (tp * pp)
    assert t["zero"] == layout["zero"] and t["world"] == nd * tp
    # per parameter, rank 0's slice is ceil(n/nd) elements: within nd elements per tensor of the formula's 1/nd
    for k in ("weights", "gradients", "optimizer", "states"):
        assert r[k]["measured"] == pytest.approx(r[k]["predicted"], rel=1e-4), k
    if tp == 1:  # weights (and with ZeRO-1 gradients) whole; fp32 master + 2 moments (and ZeRO-2 gradients) 1/nd
        n = res["model"]["params_traced"]
        assert r["weights"]["measured"] == 2 * n
        assert r["gradients"]["measured"] == pytest.approx(2 * n / (nd if layout["zero"] == 2 else 1), rel=1e-4)
        assert r["optimizer"]["measured"] == pytest.approx(12 * n / nd, rel=1e-4)
    assert abs(r["activations"]["ratio"] - 1) < 0.05 or tp > 1
    detail = res["measured"]["memory"]["detail"]
    act_explained = r["activations"]["measured"] - detail["sp_gathered_inputs"] - detail["stage_outputs_kept"]
    assert abs(act_explained / r["activations"]["predicted"] - 1) < 0.01
    assert any(e.startswith(f"zero {layout['zero']} over {nd} simulated ranks") for e in res["explanations"])
    if tp == 1:  # PyTorch's vocab-parallel embedding returns a replicated gradient: its transient is tp× larger
        assert abs(r["allocated peak"]["ratio"] - 1) < 0.05


def test_interleaved_first_stage_agrees_with_evaluate():
    res = trace(4, 8, pp=2, stage=0, pp_schedule="interleaved", virtual_stages=2)
    r, t = rows(res), res["trace"]
    # Korthikanti et al. 2022 Sec. 4.2.3: the first stage holds p + (p − 1)/v micro-batches' worth
    assert t["in_flight_traced"] == t["in_flight_predicted"] == 2.5
    assert_states_exact(r)
    assert abs(r["activations"]["ratio"] - 1) < 0.05
    assert abs(r["allocated peak"]["ratio"] - 1) < 0.05


# Megatron's and torch's warm-up, (v−1)·p + 2(p−1−s) chunk passes + 1: p + (p − 1 − 2s)/v micro-batches' worth
@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (3, 2), (4, 4), (4, 3), (8, 4)])
def test_interleaved_in_flight_of_every_stage_matches_the_schedule(p, v):
    m = 2 * p
    for s in range(p):
        assert in_flight_peak(stage_schedule(p, s, v, m), v) == pytest.approx(flight_of(p, "interleaved", v, s, m))


def test_1f1b_schedule_order():
    # torch's Schedule1F1B on stage 1 of 4 with 6 micro-batches: 3 warm-up forwards, then 1B1F
    ops = stage_schedule(4, 1, 1, 6)
    assert [f"{k}{mb}" for k, _c, mb in ops] == ["F0", "F1", "F2", "B0", "F3", "B1", "F4", "B2", "F5", "B3", "B4",
                                                 "B5"]
    for p in (2, 3, 4, 8):
        for s in range(p):
            for m in (1, 2, p, 3 * p):
                assert in_flight_peak(stage_schedule(p, s, 1, m), 1) == flight_of(p, "1f1b", 1, s, m)


def test_interleaved_schedule_is_torchs():
    """Our interleaved order equals torch's ScheduleInterleaved1F1B rank ops (its own helper functions)."""
    from torch.distributed.pipelining.schedules import _ComputationType, _get_1f1b_rank_ops, _get_warmup_ops

    for p, v, m in ((2, 2, 4), (4, 2, 8), (4, 3, 8), (3, 2, 6), (4, 2, 4)):
        per_round = m // max(1, m // p)
        for rank in range(p):
            warm = _get_warmup_ops(rank, v, per_round, p, m)
            fwd = partial(_forward_index, per_round=per_round, v=v, p=p, rank=rank)
            bwd = partial(_backward_index, per_round=per_round, v=v, p=p, rank=rank, warm=warm)
            theirs = [("F" if a.computation_type == _ComputationType.FORWARD else "B", a.stage_index // p,
                       a.microbatch_index) for a in _get_1f1b_rank_ops(v, p, warm, v * m - warm, warm, rank, fwd, bwd)
                      if a is not None]
            assert stage_schedule(p, rank, v, m) == theirs, (p, v, m, rank)


def _forward_index(step, *, per_round, v, p, rank):  # ScheduleInterleaved1F1B's forward_stage_index
    return ((step // per_round) % v) * p + rank


def _backward_index(step, *, per_round, v, p, rank, warm):  # ... and backward_stage_index
    return (v - 1 - ((step - warm) // per_round) % v) * p + rank


@pytest.mark.parametrize(("layout", "kwargs", "needle"), [
    ({"gpus": 2, "pp": 2, "pp_schedule": "zero-bubble"}, {}, "1f1b and interleaved"),
    ({"gpus": 2, "pp": 2}, {"stage": 2}, "stage 2 does not exist"),
    ({"gpus": 2, "pp": 2}, {"module": "tests.trace.userfactories:tiny_lm"}, "with --module set layout.pp: 1"),
    ({"gpus": 2, "cp": 2}, {}, "layout.cp=2 is not traced yet"),
])
def test_pipeline_errors_are_one_line(layout, kwargs, needle):
    gpus = layout.pop("gpus")
    sc = parse_scenario({"model": LLAMA_1B_8L, "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                         "training": {"seq_len": 64, "global_batch": 8}, "layout": layout})
    with pytest.raises(GpuplanError) as err:
        trace_scenario(sc, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_llama_3_2_1b_pp4_zero1_full_size():
    """The catalogue's Llama-3.2-1B (16 layers), 32 GPUs: dp 8 × pp 4 with ZeRO-1, 32 micro-batches."""
    sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 32},
                         "training": {"seq_len": 2048, "global_batch": 256}, "layout": {"pp": 4, "zero": 1}})
    for stage in (0, 3):
        res = trace_scenario(sc, stage=stage)
        r = rows(res)
        for k in ("weights", "gradients", "optimizer", "states"):
            assert r[k]["measured"] == pytest.approx(r[k]["predicted"], rel=1e-4), k
        assert abs(r["activations"]["ratio"] - 1) < 0.05
        assert abs(r["allocated peak"]["ratio"] - 1) < 0.05
