"""Golden parameter counts from a sweep of every decoder-only model_type gpuplan reads against transformers 5.25.0
(torch 2.13, CPU): ``AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type))`` on the meta device,
``sum(p.numel() for p in model.parameters())``. 132 of 135 types matched exactly; these are the ones that did not,
kept as tests of the config keys that misled the count."""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model

# Qwen3MoeConfig().to_dict()'s shape keys (transformers 5.25): no head_dim
QWEN3_MOE_DEFAULT = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                     "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 4,
                     "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                     "tie_word_embeddings": False, "attention_bias": False}


@pytest.mark.parametrize("cfg, params", [
    # Qwen3MoeConfig() (transformers 5.25): the class has no head_dim field, and Qwen3MoeAttention takes
    # getattr(config, "head_dim", hidden_size // num_attention_heads) = 2048 // 32 = 64 (it was read as 128)
    (QWEN3_MOE_DEFAULT, 15_350_731_776),
    # published Qwen3-30B-A3B (config.json: head_dim 128 given): transformers' count
    ({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
      "num_experts_per_tok": 8, "moe_intermediate_size": 768, "vocab_size": 151936, "tie_word_embeddings": False},
     30_532_122_624),
])
def test_each_config_holds_transformers_count(cfg, params):
    m = load_model(cfg)
    assert m.params + m.extra_params == params


def test_qwen3_moe_without_head_dim_takes_hidden_over_heads():
    m = load_model(QWEN3_MOE_DEFAULT)
    assert m.head_dim == 64
    assert not any("head_dim not given" in a for a in m.assumed)
