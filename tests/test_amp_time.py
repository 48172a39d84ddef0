"""The time PyTorch AMP over fp32 parameters adds to a layer (model/amp.py): the weight and input casts around
each linear, as memory-bound bytes and kernels, and only on the runs that train so (model/kept.py amp_fp32)."""

from dataclasses import replace

import pytest
from conftest import make

from gpuplan.model.amp import amp_cast_bytes
from gpuplan.model.compute import device, layer_time, streamed_s
from gpuplan.spec.scenario import complete_layout


def test_llama_8b_layer_casts_in_bytes():
    m = make("llama-3.1-8b").model
    lg = next(g for g in m.layers if not g.moe)
    h, f, kv, T = 4096, 14336, 1024, 4096
    P = 2 * h * h + 2 * kv * h + 3 * f * h  # q, o; k, v; gate, up, down
    stream = T * h
    # forward: each matrix cast fp32 -> bf16 (4 + 2 B), q/k/v and gate/up each cast their fp32 input (5 casts)
    c = amp_cast_bytes(m, lg, T, accumulating=True)
    assert c.fwd_bytes == 6 * (P + 5 * stream) and c.fwd_kernels == 7 + 5
    # backward: each bf16 gradient cast back (6 B), added into the kept fp32 .grad (12 B), the five input
    # gradients cast back and summed into the stream's (3 more fp32 adds of 12 B)
    assert c.bwd_bytes == 6 * (P + 5 * stream) + 12 * 3 * stream + 12 * P and c.bwd_kernels == 2 * 7 + 2 * 5 - 2
    # one micro-batch per step: the first gradient is the kept one, no add
    assert amp_cast_bytes(m, lg, T, accumulating=False).bwd_bytes == c.bwd_bytes - 12 * P


@pytest.mark.parametrize("framework, layout, amp", [
    ("generic", {"zero": 0}, True), ("pytorch-fsdp", {"zero": 0}, True), ("generic", {"zero": 0, "tp": 2}, False),
    ("generic", {"zero": 0, "offload": "optimizer"}, False), ("megatron-core", {"zero": 0}, False)])
def test_only_plain_ddp_amp_runs_pay_the_casts(framework, layout, amp):
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"seq_len": 4096, "global_batch": 64, "framework": framework})
    lay = complete_layout(sc, **layout)
    sharded = replace(lay, zero=1)  # the same layer under ZeRO-1: 16-bit weights beside an fp32 master, no AMP
    dev = device(sc.hardware, sc.training)
    m, tokens = sc.model, lay.micro_batch * 4096
    lg = next(g for g in m.layers if not g.moe)
    with_amp = layer_time(m, lg, tokens, 4096, lay, sc.training, dev, microbatches=8)
    without = layer_time(m, lg, tokens, 4096, sharded, sc.training, dev, microbatches=8)
    c = amp_cast_bytes(m, lg, tokens / lay.tp, accumulating=True)
    fwd, bwd = (streamed_s(c.fwd_bytes, c.fwd_kernels, dev), streamed_s(c.bwd_bytes, c.bwd_kernels, dev)) if amp \
        else (0.0, 0.0)
    assert with_amp.fwd - without.fwd == pytest.approx(fwd, abs=1e-12)
    assert with_amp.bwd - without.bwd == pytest.approx(bwd, abs=1e-12)
