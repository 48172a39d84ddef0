"""Golden parameter counts of more decoder families read from config.json: Aria's text decoder (aria_text), Emu3
(emu3), HyperCLOVA X (hyperclovax), DiffLlama (diffllama), RecurrentGemma (recurrent_gemma), GPT-1 (openai-gpt),
GPT-NeoX-Japanese (gpt_neox_japanese) and MiniMax-Text-01 (minimax). The reference count is transformers' own:
``AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **keys))`` on the meta device with transformers
5.24.0 (torch 2.13 CPU), ``sum(p.numel() for p in model.parameters())``. The released models' shape keys are written
as their config.json has them (no network); the small configs exercise each family's flags."""

from __future__ import annotations

import pytest
from conftest import evaluate_config_json

from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError

# small configs (hidden 256, 4 layers, 8 heads, 4 kv heads, MLP 512, vocab 40,000)
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "intermediate_size": 512, "vocab_size": 40000, "max_position_embeddings": 4096}
# Emu3TextConfig's token ids lie outside a 40,000-token vocabulary: transformers refuses them
IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

# rhymes-ai/Aria config.json text_config shape keys (with its 438M-parameter vision encoder, the 25.3B of the model
# card)
ARIA = {"model_type": "aria_text", "hidden_size": 2560, "intermediate_size": 1664, "num_hidden_layers": 28,
        "num_attention_heads": 20, "num_key_value_heads": 20, "moe_num_experts": 64, "moe_topk": 6,
        "moe_num_shared_experts": 2, "vocab_size": 100352, "max_position_embeddings": 65536,
        "tie_word_embeddings": False}
# google/recurrentgemma-2b config.json (its "_block_types" key is not read: the class default cycle applies)
RECURRENTGEMMA_2B = {"model_type": "recurrent_gemma", "attention_bias": False, "attention_window_size": 2048,
                     "conv1d_width": 4, "head_dim": 256, "hidden_size": 2560, "intermediate_size": 15360,
                     "lru_width": 2560, "num_attention_heads": 10, "num_hidden_layers": 26, "num_key_value_heads": 1,
                     "partial_rotary_factor": 0.5, "vocab_size": 256000}
# google/recurrentgemma-9b config.json shape keys
RECURRENTGEMMA_9B = {**RECURRENTGEMMA_2B, "hidden_size": 4096, "intermediate_size": 24576, "lru_width": 4096,
                     "num_attention_heads": 16, "num_hidden_layers": 38}
# MiniMaxAI/MiniMax-Text-01-hf config.json shape keys (model card: 456B total, 45.9B active); softmax attention on
# every 8th layer, lightning attention on the others
MINIMAX_TEXT_01 = {"model_type": "minimax", "hidden_size": 6144, "intermediate_size": 9216, "num_attention_heads": 64,
                   "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 80, "num_local_experts": 32,
                   "num_experts_per_tok": 2, "vocab_size": 200064, "tie_word_embeddings": False,
                   "layer_types": ["full_attention" if (i + 1) % 8 == 0 else "linear_attention" for i in range(80)]}


@pytest.mark.parametrize("cfg, params", [
    # transformers 5.24: AriaTextForCausalLM(AriaTextConfig()) 18,517,069,824
    ({"model_type": "aria_text"}, 18_517_069_824),
    # transformers 5.24: AriaTextForCausalLM(Aria's text_config) 24,869,091,840
    (ARIA, 24_869_091_840),
    # transformers 5.24: one shared expert, q/k/v/o and shared-expert biases
    ({"model_type": "aria_text", **SMALL, "moe_num_experts": 4, "moe_topk": 2, "moe_num_shared_experts": 1,
      "attention_bias": True, "mlp_bias": True}, 29_145_344),
    # transformers 5.24: Emu3ForCausalLM(Emu3Config()) 8,492,011,520 (Emu3-Gen/Chat's text shapes)
    ({"model_type": "emu3"}, 8_492_011_520),
    # transformers 5.24: Emu3ForCausalLM of a small text_config 22,841,600; tied 12,601,600; with biases 22,849,792
    ({"model_type": "emu3", "text_config": {**SMALL, **IDS}}, 22_841_600),
    ({"model_type": "emu3", "text_config": {**SMALL, **IDS, "tie_word_embeddings": True}}, 12_601_600),
    ({"model_type": "emu3", "text_config": {**SMALL, **IDS, "attention_bias": True, "mlp_bias": True}}, 22_849_792),
    # transformers 5.24: HyperCLOVAXForCausalLM(HyperCLOVAXConfig()) 6,738,677,760
    ({"model_type": "hyperclovax"}, 6_738_677_760),
    # transformers 5.24: post-norms on (the default) 22,843,648; off, with biases and head_dim 64: 23,638,272
    ({"model_type": "hyperclovax", **SMALL}, 22_843_648),
    ({"model_type": "hyperclovax", **SMALL, "use_post_norm": False, "attention_bias": True, "mlp_bias": True,
      "head_dim": 64}, 23_638_272),
    # transformers 5.24: DiffLlamaForCausalLM(DiffLlamaConfig()) 1,204,885,504
    ({"model_type": "diffllama"}, 1_204_885_504),
    # transformers 5.24: 22,842,112; with q/k/v/o biases and tied embeddings 12,605,184
    ({"model_type": "diffllama", **SMALL}, 22_842_112),
    ({"model_type": "diffllama", **SMALL, "attention_bias": True, "tie_word_embeddings": True}, 12_605_184),
    # transformers 5.24: RecurrentGemmaForCausalLM(RecurrentGemmaConfig()) 2,010,263,040
    ({"model_type": "recurrent_gemma"}, 2_010_263_040),
    # transformers 5.24: recurrentgemma-2b 2,682,862,080 (model card: 2.7B); recurrentgemma-9b 8,579,977,216
    (RECURRENTGEMMA_2B, 2_682_862_080),
    (RECURRENTGEMMA_9B, 8_579_977_216),
    # transformers 5.24: a recurrent/attention cycle, a wider LRU, attention biases, an untied head 22,338,304
    ({"model_type": "recurrent_gemma", **SMALL, "lru_width": 384, "attention_bias": True,
      "block_types": ["recurrent", "attention"], "tie_word_embeddings": False}, 22_338_304),
    # transformers 5.24: OpenAIGPTLMHeadModel(OpenAIGPTConfig()) 116,534,784 (openai-community/openai-gpt's shapes)
    ({"model_type": "openai-gpt"}, 116_534_784),
    # transformers 5.24: a small untied GPT-1 3,703,808
    ({"model_type": "openai-gpt", "n_embd": 256, "n_layer": 4, "n_head": 8, "vocab_size": 1000, "n_positions": 128,
      "tie_word_embeddings": False}, 3_703_808),
    # transformers 5.24: GPTNeoXJapaneseForCausalLM(GPTNeoXJapaneseConfig()) 2,598,837,760
    # (abeja/gpt-neox-japanese-2.7b's shapes)
    ({"model_type": "gpt_neox_japanese"}, 2_598_837_760),
    # transformers 5.24: MLP 2 x hidden, untied embed_out 22,582,016
    ({"model_type": "gpt_neox_japanese", **SMALL, "intermediate_multiple_size": 2, "tie_word_embeddings": False},
     22_582_016),
    # transformers 5.24: MiniMaxForCausalLM(MiniMaxConfig()) 47,373,946,880
    ({"model_type": "minimax"}, 47_373_946_880),
    # transformers 5.24: MiniMax-Text-01 456,089,655,296 (model card: 456B)
    (MINIMAX_TEXT_01, 456_089_655_296),
    # transformers 5.24: three lightning blocks and one softmax block, head_dim 16, 4 experts 27,368,064
    ({"model_type": "minimax", **SMALL, "num_local_experts": 4,
      "layer_types": ["linear_attention"] * 3 + ["full_attention"], "head_dim": 16}, 27_368_064),
])
def test_each_family_holds_transformers_count(cfg, params):
    assert load_model(cfg).params == params


@pytest.mark.parametrize("cfg", [
    {"model_type": "aria_text", **SMALL, "moe_num_experts": 4},
    {"model_type": "emu3", "text_config": {**SMALL, **IDS}},
    {"model_type": "hyperclovax", **SMALL},
    {"model_type": "diffllama", **SMALL},
    {"model_type": "recurrent_gemma", **SMALL, "num_key_value_heads": 1},
    {"model_type": "openai-gpt", "n_embd": 256, "n_layer": 4, "n_head": 8, "vocab_size": 1000, "n_positions": 1024},
    {"model_type": "gpt_neox_japanese", **SMALL},
    {"model_type": "minimax", **SMALL, "num_local_experts": 4, "head_dim": 32},
], ids=lambda cfg: cfg["model_type"])
def test_each_family_evaluates_from_its_config_json(cfg, tmp_path):
    est = evaluate_config_json(cfg, tmp_path, 1024)
    assert est["model"]["params"] == load_model(cfg).params


def test_aria_routes_top_k_of_its_experts_beside_two_shared_ones():
    m = load_model(ARIA)
    assert (m.n_experts, m.top_k, m.moe_ffn, m.shared_ffn, m.ffn) == (64, 6, 1664, 3328, 0)
    assert all(lg.moe for lg in m.layers) and m.layers[0].count == 28


def test_minimax_text_01_is_lightning_attention_with_softmax_every_eighth_block():
    m = load_model(MINIMAX_TEXT_01)
    assert m.attention_layers == 10 and m.hybrid and m.ssm is not None
    assert [lg.mixer for lg in m.layers for _ in range(lg.count)] == \
        (["gdn"] * 7 + ["attention"]) * 10
    assert (m.n_experts, m.top_k, m.moe_ffn) == (32, 2, 9216)
    # model card: 45.9B active, the embedding and LM head left out
    assert round((m.params_active - 2 * m.vocab * m.hidden) / 1e9, 1) == 45.9
    assert any("lightning attention" in a for a in m.assumed)


def test_minimax_reads_the_original_attn_type_list_and_defaults_to_alternating():
    listed = {k: v for k, v in MINIMAX_TEXT_01.items() if k != "layer_types"}
    legacy = load_model({**listed, "attn_type_list": ([0] * 7 + [1]) * 10})
    assert legacy.params == 456_089_655_296 and any("attn_type_list" in a for a in legacy.assumed)
    default = load_model({"model_type": "minimax", **SMALL, "num_local_experts": 4})
    assert [lg.mixer for lg in default.layers for _ in range(lg.count)] == ["attention", "gdn"] * 2
    with pytest.raises(GpuplanError, match="attn_type_list"):
        load_model({**listed, "attn_type_list": [0, 1]})


def test_recurrent_gemma_alternates_rg_lru_and_local_attention():
    m = load_model(RECURRENTGEMMA_2B)
    kinds = [lg.mixer for lg in m.layers for _ in range(lg.count)]
    assert kinds == (["mamba1", "mamba1", "attention"] * 9)[:26]
    assert m.attention_layers == 8 and m.n_kv_heads == 1 and m.head_dim == 256
    assert m.sliding_window == 2048 and m.window_layers == tuple(k == "attention" for k in kinds)
    assert m.ssm is not None and (m.ssm.inner, m.ssm.state) == (2560, 1)
    assert m.tied_embeddings and any("RG-LRU" in a for a in m.assumed)


def test_post_norm_and_notes_of_the_llama_shaped_families():
    assert load_model({"model_type": "hyperclovax", **SMALL}).post_norms
    assert not load_model({"model_type": "hyperclovax", **SMALL, "use_post_norm": False}).post_norms
    assert any("differential attention" in a for a in load_model({"model_type": "diffllama", **SMALL}).assumed)
    gpt = load_model({"model_type": "openai-gpt"})
    assert gpt.post_norms and gpt.position == "learned" and gpt.tied_embeddings
    emu = load_model({"model_type": "emu3"})
    assert any("VQ-VAE" in a for a in emu.assumed) and emu.vocab == 184622


def test_an_emu3_config_with_top_level_decoder_keys_is_one_clear_error():
    with pytest.raises(GpuplanError, match="text_config"):
        load_model({"model_type": "emu3", **SMALL})
