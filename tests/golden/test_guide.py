"""The practitioners' guide's worked examples (shared/GUIDE_EXAMPLES.md)."""

import pytest
from conftest import make, mem

from gpuplan.api import Fit
from gpuplan.search.fit import fit

# The guide counts 2 B of gradients per parameter: gradients in the parameters' bf16, as PyTorch
# FSDP and DeepSpeed keep them. gpuplan's generic (unknown-stack) profile assumes fp32 gradients
# (Megatron's 18 B/param, the larger typical case), so these tests state the guide's accounting.
GUIDE = {"grad_dtype": "param"}

def test_7b_bf16_adamw_needs_16_bytes_per_param_112_gb():
    # source: the guide — "Training with Adam needs 16-20 bytes per parameter: weights 2 B,
    # gradients 2 B, optimizer states 12 B ... a 7B model needs roughly 112-140 GB".
    m = mem({"params": 7e9}, training=GUIDE)
    assert m["weights"] == 14e9
    assert m["gradients"] == 14e9
    assert m["optimizer"] == 84e9
    assert m["weights"] + m["gradients"] + m["optimizer"] == 112e9


LLAMA2_7B = 6_738_415_616


def test_7b_with_realistic_activations_lands_in_16_to_20_bytes_per_param():
    # source: the guide — "16-20 bytes per parameter ... plus activations that depend on sequence
    # length and batch". Llama-2-7B, micro-batch 1, flash attention, fused AdamW, one 256 GB GPU
    # (nothing sharded): seq 2048 without recompute, and seq 4096 with full recompute.
    short = mem("llama-2-7b", gpu="mi325x", training={**GUIDE, "seq_len": 2048})
    assert 16 < short["total"] / LLAMA2_7B < 20
    long_full = mem("llama-2-7b", gpu="mi325x", training={**GUIDE, "seq_len": 4096}, layout={"recompute": "full"})
    assert 16 < long_full["total"] / LLAMA2_7B < 20


def test_7b_at_4096_without_recompute_past_the_guide_range_only_when_gradients_persist():
    # Llama 2's own 4096 context, no recompute: the activations (45.5·s·h bytes per layer:
    # 16·sh + 8·s·f with f = 11008, and 4 B more per element for each of the two norms — the generic
    # stack's Hugging Face RMSNorm keeps an fp32 copy and the normalized tensor, 6 B, where a fused
    # norm keeps its 2-byte input) are large. With gradient accumulation (8 micro-batches) the
    # gradients persist beside them and the peak passes 20 B/param — where gpuplan corrects the guide.
    acc = mem("llama-2-7b", gpu="mi325x", training={**GUIDE, "seq_len": 4096, "global_batch": 8})
    assert 20 < acc["total"] / LLAMA2_7B < 21
    assert acc["gradients"] == 2 * LLAMA2_7B and acc["detail"]["backward_timing"] == 0
    per_layer = 45.5 * 4096 * 4096
    # + the final norm (6 B) and the LM head's input (2 B)
    assert acc["activations"] == pytest.approx(32 * per_layer + (6 + 2) * 4096 * 4096, rel=1e-3)
    # One micro-batch per step on one GPU (set_to_none gradients): the peak is the start of
    # backward, before any gradient exists (measured to the MiB by `gpuplan trace` on Llama 3.x),
    # so all 2 B/param of gradients drop out of the peak: 18.9 B/param, inside the guide's range.
    one = mem("llama-2-7b", gpu="mi325x", training={**GUIDE, "seq_len": 4096, "global_batch": 1})
    assert one["gradients"] == 2 * LLAMA2_7B and one["detail"]["backward_timing"] == -2 * LLAMA2_7B
    assert one["activations"] == acc["activations"]
    assert 18.5 < one["total"] / LLAMA2_7B < 19
    assert acc["total"] - one["total"] == pytest.approx(1.05 * 2 * LLAMA2_7B, rel=1e-9)  # + 5% fragmentation


def test_70b_does_not_fit_one_h100():
    # source: the guide — "A 70B model does not fit one 80 GB H100 even for weights + optimizer".
    m = mem("llama-3.1-70b")
    assert not m["fits"]
    assert m["weights"] + m["gradients"] + m["optimizer"] > 16 * 70e9


def test_70b_needs_on_the_order_of_16_h100_with_fsdp():
    # source: the guide — "a minimum of 16 GPUs just to fit the model into memory".
    res = Fit(fit(make("llama-3.1-70b", training=GUIDE)))
    # the guide's 16 is the count whose peak's point estimate fits; the sure count (the peak's
    # interval upper end fits) can only be that or more
    assert (res.result.at_point or res.min_gpus) == 16
    assert res.min_gpus >= 16 and res.best.memory.fits
    # the next test: FSDP over 16 spreads the 16 B/param of model state 16 ways


def test_70b_fsdp_model_state_on_16_gpus_is_one_sixteenth():
    # 16 B/param × 70,553,706,496 params / 16 ranks
    m = mem("llama-3.1-70b", gpus=16, layout={"zero": 3}, training=GUIDE)
    assert m["weights"] + m["gradients"] + m["optimizer"] == pytest.approx(70_553_706_496, rel=1e-9)
