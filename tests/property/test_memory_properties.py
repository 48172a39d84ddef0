"""Invariants of the memory model (hypothesis)."""

import pytest
from conftest import make
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gpuplan.errors import GpuplanError
from gpuplan.model.memory import memory
from gpuplan.spec.scenario import complete_layout

MODELS = ["llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "gpt2", "gemma-2-9b", "deepseek-v3", "falcon-7b"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _mem(model, gpus, training=None, **layout):
    sc = make(model, gpu="h100-sxm", gpus=gpus, training=training or {})
    try:
        lay = complete_layout(sc, **layout)
    except GpuplanError:
        reject()  # e.g. tp does not divide this model's heads: not a case of the property
    return memory(sc.model, sc.hardware, sc.training, lay).to_json()


def _state(m):
    return m["weights"] + m["gradients"] + m["optimizer"]


@SETTINGS
@given(model=st.sampled_from(MODELS), dp=st.sampled_from([2, 4, 8, 16]),
       precision=st.sampled_from(["bf16", "bf16-pure", "fp32", "fp8"]),
       optimizer=st.sampled_from(["adamw", "adamw-8bit", "sgd-momentum", "adafactor", "lion"]))
def test_more_sharding_never_raises_model_state(model, dp, precision, optimizer):
    tr = {"precision": precision, "optimizer": optimizer}
    states = [_state(_mem(model, dp, tr, zero=z)) for z in (0, 1, 2, 3)]
    assert states == sorted(states, reverse=True)
    bigger = _state(_mem(model, dp * 2, tr, zero=3))
    assert bigger <= states[3]


@SETTINGS
@given(model=st.sampled_from(MODELS), seq=st.sampled_from([512, 2048, 8192]),
       attention=st.sampled_from(["flash", "eager"]), dropout=st.sampled_from([0.0, 0.1]),
       tp=st.sampled_from([1, 2, 8]))
def test_full_le_selective_le_none(model, seq, attention, dropout, tp):
    tr = {"seq_len": seq, "attention": attention, "dropout": dropout}
    acts = [_mem(model, tp, tr, tp=tp, recompute=r)["activations_per_microbatch"]
            for r in ("full", "selective-op", "selective", "none")]
    assert acts[0] <= acts[1] <= acts[2] <= acts[3]


@SETTINGS
@given(model=st.sampled_from(MODELS), mb=st.integers(1, 16), seq=st.sampled_from([256, 1024, 4096]))
def test_activations_linear_in_micro_batch(model, mb, seq):
    one = _mem(model, 1, {"seq_len": seq}, micro_batch=1)["activations_per_microbatch"]
    many = _mem(model, 1, {"seq_len": seq}, micro_batch=mb)["activations_per_microbatch"]
    assert many == pytest.approx(mb * one, rel=1e-12)


@SETTINGS
@given(model=st.sampled_from(MODELS), gpus=st.sampled_from([1, 2, 8, 16, 64]), zero=st.integers(0, 3),
       recompute=st.sampled_from(["none", "selective", "full"]), method=st.sampled_from(["full", "lora", "qlora"]),
       offload=st.sampled_from(["none", "optimizer", "params"]))
def test_every_component_non_negative_and_sums_to_total(model, gpus, zero, recompute, method, offload):
    if gpus == 1:
        zero = 0
    if offload == "params" and zero != 3:
        offload = "optimizer"
    m = _mem(model, gpus, {"method": method}, zero=zero, recompute=recompute, offload=offload)
    parts = [m[k] for k in ("weights", "gradients", "optimizer", "activations", "other")]
    # the one signed term: on one GPU the peak can come before backward allocates the gradients
    # (memory.stage_peak); it never takes back more than the gradients, and "other" stays
    # non-negative without it
    timing = m["detail"]["backward_timing"]
    assert -m["gradients"] <= min(timing, 0.0)
    assert all(p >= 0 for p in parts[:4]) and m["other"] - min(timing, 0.0) >= 0
    assert all(v >= 0 for k, v in m["detail"].items() if k != "backward_timing")
    assert sum(parts) == pytest.approx(m["total"], rel=1e-12)


@SETTINGS
@given(model=st.sampled_from(MODELS), seq=st.sampled_from([128, 1024, 4096, 16384]),
       recompute=st.sampled_from(["none", "selective", "full"]), accumulation=st.integers(2, 16))
def test_one_gpu_peak_lies_between_backwards_ends_and_the_sum(model, seq, recompute, accumulation):
    # One micro-batch per step: the peak holds no more than all states + activations + logits (the
    # sum that gradient accumulation forces) and no less than either end of backward.
    one = _mem(model, 1, {"seq_len": seq, "global_batch": 1}, recompute=recompute)
    acc = _mem(model, 1, {"seq_len": seq, "global_batch": accumulation}, recompute=recompute)
    # gradients kept over the micro-batches: the peak is the sum, or (short sequences) the embedding's
    # backward that ends each micro-batch, its V×h gradient made beside every kept one (tied: the head's
    # gradient and their sum too; backward_peak.embedding_backward, measured by gpuplan trace)
    m = make(model).model
    # fp32 gradients: the generic stack trains one GPU as PyTorch AMP does (fp32 parameters under autocast)
    made = m.vocab * m.hidden * 4 * (3 if m.tied_embeddings else 1)
    assert acc["detail"]["backward_timing"] in (0, pytest.approx(made))
    # a tied embedding's second V×h gradient and the sum (2 × its gradient bytes) can top the end of
    # backward; nothing else lifts one micro-batch above the accumulating sum
    tied = one["detail"]["backward_timing"] if one["detail"]["backward_timing"] > 0 else 0.0
    assert one["total"] <= acc["total"] + 1.05 * tied * (1 + 1e-12)
    fixed = one["detail"]["runtime"]
    alloc = (one["total"] - fixed) / 1.05  # without fragmentation (5% of the allocated peak)
    w, g, o = one["weights"], one["gradients"], one["optimizer"]
    assert alloc >= w + o + g * 0.999999  # the end of backward holds every gradient
    assert alloc >= w + o + one["activations_per_microbatch"] * 0.999999 or one["peak_phase"] != "forward/backward"


@SETTINGS
@given(model=st.sampled_from(MODELS), nd=st.sampled_from([2, 4, 8, 32, 128]))
def test_shards_sum_to_the_unsharded_total(model, nd):
    # a stack whose ZeRO-0 keeps the same states as its ZeRO-3 (the generic stack's ZeRO-0 is PyTorch AMP)
    full = _mem(model, nd, {"framework": "deepspeed"}, zero=0)
    sharded = _mem(model, nd, {"framework": "deepspeed"}, zero=3)
    for key in ("weights", "gradients", "optimizer"):
        assert sharded[key] * nd == pytest.approx(full[key], rel=1e-9)


@SETTINGS
@given(model=st.sampled_from(["llama-3.1-8b", "qwen2.5-7b", "gpt2"]), tp=st.sampled_from([2, 4]),
       pp=st.sampled_from([2, 4]))
def test_tensor_and_pipeline_shards_cover_the_model(model, tp, pp):
    from gpuplan.model.params import rank_params

    sc = make(model)
    total = sum(rank_params(sc.model, tp, 1, pp, 1, s, None, 16).dense for s in range(pp)) * tp
    extra = 0 if not sc.model.tied_embeddings else sc.model.params_by_group()["embedding"]
    # replicated norms/positions are counted tp times; the tied LM head is a second copy
    replicated = sc.model.params_by_group()["norm"] + sc.model.params_by_group()["position"]
    expected = sc.model.params + (extra if pp > 1 else 0) + replicated * (tp - 1)
    assert total == pytest.approx(expected, rel=1e-9)
