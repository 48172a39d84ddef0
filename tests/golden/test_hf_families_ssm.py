"""Decoders of state-space blocks (issue 21, item 5): Mamba-1 (``mamba``, ``falcon_mamba``), Mamba-2 (``mamba2``)
and Jamba (``jamba``: Mamba-1 and attention blocks, MoE on every other). Counts are transformers 5.24.0's own,
``AutoModelForCausalLM.from_config(config)`` on the meta device; the released models' shape keys are written as
their config.json has them (no network). Mamba-1's selective scan is costed in model/selective_scan.py."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model import selective_scan, ssm
from gpuplan.model.activations import ActShape, layer_terms
from gpuplan.model.compute import kernel_device
from gpuplan.model.flops import flops_per_token

# tiiuae/falcon-mamba-7b: d_inner 8192 (intermediate_size given beside expand 16: the config class keeps it), N 16,
# Δ rank 256, 64 layers, untied
FALCON_MAMBA_7B = {"model_type": "falcon_mamba", "hidden_size": 4096, "intermediate_size": 8192, "expand": 16,
                   "num_hidden_layers": 64, "vocab_size": 65024, "state_size": 16, "time_step_rank": 256,
                   "tie_word_embeddings": False}
# ai21labs/AI21-Jamba-1.5-Mini (Jamba-v0.1's shapes) and -Large: JambaConfig's periods (attention 4 of 8, MoE odd)
JAMBA = {"model_type": "jamba", "num_key_value_heads": 8, "vocab_size": 65536, "num_experts": 16,
         "num_experts_per_tok": 2}
JAMBA_MINI = {**JAMBA, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32}
JAMBA_LARGE = {**JAMBA, "hidden_size": 8192, "intermediate_size": 24576, "num_hidden_layers": 72,
               "num_attention_heads": 64}
# mistralai/Mamba-Codestral-7B-v0.1
CODESTRAL = {"model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64, "vocab_size": 32768,
             "num_heads": 128, "head_dim": 64, "n_groups": 8, "state_size": 128, "tie_word_embeddings": False}
FM = load_model(FALCON_MAMBA_7B)


@pytest.mark.parametrize("cfg, params, active", [
    (FALCON_MAMBA_7B, 7_272_665_088, 7_272_665_088),            # TII: "7.27B"
    # AI21: Jamba 1.5 Mini "12B active, 52B total", Large "94B active, 398B total"
    (JAMBA_MINI, 51_570_323_328, 12_110_311_296),
    (JAMBA_LARGE, 398_555_145_696, 94_149_338_592),
    (CODESTRAL, 7_285_403_648, 7_285_403_648),
    # small configs: MambaConfig's defaults (expand 2, N 16, Δ rank ceil(h/16), tied); FalconMamba with biases off
    # and on, untied; Jamba with 4 experts, N 8, Δ rank given; Jamba dense (num_experts 1), tied, attention 4 in 4
    ({"model_type": "mamba", "hidden_size": 256, "num_hidden_layers": 3, "vocab_size": 1000}, 1_570_304, None),
    ({"model_type": "falcon_mamba", "hidden_size": 256, "num_hidden_layers": 3, "vocab_size": 1000,
      "tie_word_embeddings": False, "use_bias": True, "use_conv_bias": False, "state_size": 8, "time_step_rank": 20,
      "expand": 3}, 2_449_152, None),
    ({"model_type": "jamba", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
      "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 4, "mamba_d_state": 8,
      "mamba_dt_rank": 16}, 11_527_136, 8_381_408),
    ({"model_type": "jamba", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
      "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 1,
      "tie_word_embeddings": True, "attn_layer_period": 4, "attn_layer_offset": 1}, 6_360_608, None),
    ({"model_type": "mamba2", "hidden_size": 256, "num_heads": 8, "head_dim": 64, "n_groups": 2, "state_size": 32,
      "num_hidden_layers": 3, "vocab_size": 1000}, 1_808_328, None),
])
def test_counts_as_transformers_does(cfg, params, active):
    m = load_model(cfg)
    assert m.params == params
    assert m.params_active == (params if active is None else active)


def test_jamba_blocks_follow_the_periods():
    m = load_model(JAMBA_MINI)
    # attention on layers 4, 12, 20, 28; experts on the odd layers; no positional encoding
    assert m.attention_layers == 4 and m.position == "none" and m.n_experts == 16
    assert [(lg.count, lg.mixer, lg.moe) for lg in m.layers[:6]] == [
        (1, "mamba1", False), (1, "mamba1", True), (1, "mamba1", False), (1, "mamba1", True), (1, "attention", False),
        (1, "mamba1", True)]


def test_mamba_sizes_must_agree():
    with pytest.raises(GpuplanError, match="num_heads x head_dim = 8 x 32 is not expand x hidden_size = 512"):
        load_model({"model_type": "mamba2", "hidden_size": 256, "num_heads": 8, "head_dim": 32, "n_groups": 2,
                    "num_hidden_layers": 2, "vocab_size": 100})


def test_selective_scan_time_is_its_arithmetic_at_the_fp32_peak_or_its_bytes():
    # Falcon Mamba 7B on an H100 SXM at burst rates: per token 8192 channels x 16 states, 7 fp32 issue slots each
    # forward and 16 backward (model/selective_scan.py) at 67 TFLOP/s / 2 slots per FMA; the forward's bytes
    # (u, Δ, z and the output, 2 B x 8192 each; B and C; the chunk states) at streaming bandwidth are less
    dev = kernel_device(get_gpu("h100-sxm"), "bf16")
    tokens = 8192.0
    fwd, bwd = ssm.scan_s(FM, "mamba1", tokens, 1, dev)
    elements = tokens * 8192 * 16
    assert fwd == pytest.approx(elements * 7 / (67e12 / 2) + dev.floor_s, rel=1e-12)
    assert bwd == pytest.approx(elements * 16 / (67e12 / 2) + dev.floor_s, rel=1e-12)
    io = tokens * (8 * 8192 + 4 * 16 + 8 * 16 * 8192 / 2048)
    assert io / dev.bw < fwd - dev.floor_s
    # no tensor-core FLOPs: the scan adds nothing to the model FLOPs (6·N·D's matmuls and the head)
    assert ssm.scan_flops(FM, "mamba1") == 0.0
    f = flops_per_token(FM, 8192, "none")
    assert f.forward_attention == 0.0


def test_a_mamba1_block_keeps_what_mamba_inner_fn_saves():
    x = ActShape(s=4096, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    terms = layer_terms(FM, 0, x)
    # norm and in_proj inputs (h each), x and z (2·8192), x_proj's output (256 + 2·16), out_proj's input (8192):
    # 2 B each; the chunk states: 2·16 fp32 per channel per 2,048 tokens
    per_token = 2 * (2 * 4096 + 2 * 8192 + 288 + 8192) + 8 * 16 * 8192 / 2048
    assert sum(terms.values()) == pytest.approx(4096 * per_token, rel=1e-12)
    assert selective_scan.dt_rank(FM) == 256
    # under LoRA the scan's output stays (the gated output the frozen out_proj reads is rebuilt from it)
    lora = layer_terms(FM, 0, ActShape(s=4096, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2,
                                       method="lora", lora_targets=("in_proj", "out_proj"), lora_rank=16))
    assert lora["scan_output"] == terms["scan_output"] == 2 * 4096 * 8192


def test_tensor_parallelism_over_mamba1_is_refused_with_the_reason():
    sc = {"model": FALCON_MAMBA_7B, "hardware": {"gpu": "h100-sxm", "gpus": 8},
          "training": {"seq_len": 4096, "global_batch": 64}, "layout": {"dp": 4, "tp": 2}}
    with pytest.raises(GpuplanError, match="Mamba-1 layers make Δ, B and C from the whole inner width"):
        gpuplan.evaluate(sc)
    # the planner searches tp 1 only, and answers
    best = gpuplan.plan({**sc, "layout": {}}).result.ranked[0]
    assert best.layout.tp == 1
