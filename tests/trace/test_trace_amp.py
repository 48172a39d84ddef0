"""PyTorch AMP (fp32 parameters under torch.autocast), as the generic stack and PyTorch-FSDP's plain-DDP path run
one GPU or ZeRO-0 (frameworks.json memory.autocast_fp32_weights): the traced step against the formula — the fp32
states, the fp32 stream into the norms, each linear's own bf16 cast of its input and autocast's bf16 weight casts
(model/memory.py activation_parts)."""

import pytest

pytest.importorskip("torch")

from gpuplan.io.scenario import parse_scenario  # noqa: E402
from gpuplan.trace import trace_scenario  # noqa: E402

# Llama-3.2-1B's block shapes at hidden 512 (GQA 8/2, tied embeddings), 2 layers
LLAMA = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
         "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 2048, "vocab_size": 8192,
         "tie_word_embeddings": True}


def rows(framework="generic", gpus=1, seq_len=512, **layout):
    sc = parse_scenario({"model": LLAMA, "hardware": {"gpu": "h100-sxm", "gpus": gpus},
                         "training": {"seq_len": seq_len, "framework": framework}, "layout": layout})
    return {r["component"].split(" (")[0]: r for r in trace_scenario(sc)["compare"]}


@pytest.mark.parametrize("framework", ["generic", "pytorch-fsdp"])
def test_amp_states_and_activations_agree_with_the_formula(framework):
    r = rows(framework, micro_batch=2)
    n = r["weights"]["predicted"] / 4
    # fp32 weights (the master copy itself), fp32 gradients, 8 B of AdamW moments: 16 B per parameter
    assert [r[k]["predicted"] for k in ("weights", "gradients", "optimizer")] == [4 * n, 4 * n, 8 * n]
    for k in ("weights", "gradients", "optimizer"):
        assert r[k]["measured"] - r[k]["predicted"] in range(0, 4 * 32 + 1), k  # + torch AdamW's step counters
    assert r["activations"]["measured"] == pytest.approx(r["activations"]["predicted"], rel=0.01)


def test_amp_peak_of_a_one_gpu_step_agrees_with_the_formula():
    # Llama-3.2-1B itself, seq 2048: the start of backward (states without gradients, the AMP activations and
    # weight casts, the loss's buffers) — to 0.1% for one micro-batch and for two
    for mb in (1, 2):
        sc = parse_scenario({"model": "llama-3.2-1b", "hardware": {"gpu": "h100-sxm", "gpus": 1},
                             "training": {"seq_len": 2048, "global_batch": mb}, "layout": {"micro_batch": mb}})
        r = {x["component"].split(" (")[0]: x for x in trace_scenario(sc)["compare"]}
        assert r["allocated peak"]["measured"] == pytest.approx(r["allocated peak"]["predicted"], rel=1e-3)


def test_amp_under_full_recompute_keeps_the_fp32_inputs_and_rebuilds_one_block_with_its_casts():
    r = rows(recompute="full", micro_batch=2)
    # the formula never below the trace, and within 10% of it
    assert 0.9 < r["activations"]["measured"] / r["activations"]["predicted"] <= 1.0


def test_sharded_or_model_parallel_runs_keep_bf16_weights_beside_an_fp32_master():
    r = rows(gpus=2, zero=1)
    n = r["weights"]["predicted"] / 2
    assert r["weights"]["measured"] == pytest.approx(2 * n, rel=1e-6)
