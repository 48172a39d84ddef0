"""The Llama-shaped decoder families (RMSNorm, RoPE, SwiGLU/GeGLU, q/k/v/o): what each ``model_type``'s
``transformers`` class builds differently, as data for ``families.llama_like``."""

from __future__ import annotations

from typing import Any

__all__ = ["LLAMA_LIKE"]

# ---- Llama-like decoders (RMSNorm, RoPE, SwiGLU/GeGLU) -----------------------------------------
# tie: transformers default of tie_word_embeddings; qkv/o: bias key or fixed bool; norms: per block;
# qk: q_norm/k_norm; hd: default head_dim of the config class (None: hidden // heads)
LLAMA_LIKE: dict[str, dict[str, Any]] = {
    "llama": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias"),
    "mistral": dict(tie=False, win=4096),
    "mixtral": dict(tie=False, moe="mixtral", win=None),
    "qwen2": dict(tie=False, qkv=True, qwen_win=28),
    "qwen2_moe": dict(tie=False, qkv="qkv_bias", qkv_default=True, moe="qwen2_moe", qwen_win=28),
    "qwen3": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, qwen_win=28),
    # transformers 5 writes Qwen3MoeConfig's expert count as num_local_experts (4.x: num_experts); the class has no
    # head_dim field: Qwen3MoeAttention takes getattr(config, "head_dim", hidden_size // num_attention_heads)
    "qwen3_moe": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=None, moe="qwen3_moe",
                      qwen_win=28, keys={"num_local_experts": "num_experts"}),
    "gemma": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256),
    "gemma2": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256, norms=4,
                   win=4096, every=2),
    # Gemma3TextConfig's max_position_embeddings defaults to 131,072 (the 2,048 of LlamaConfig would read a 128K model
    # as a 2K one)
    "gemma3_text": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256,
                        norms=4, qk=True, win=4096, every=6, pos=131072),
    "phi3": dict(tie=False, fused=True, win=None),
    # OLMoE (OlmoeConfig): every layer a 64-expert top-8 SwiGLU MoE without shared experts, q/k RMSNorms over the
    # whole projection (h and kv_heads·head_dim)
    "olmoe": dict(tie=False, qkv="attention_bias", o="attention_bias", qk="full", moe="olmoe"),
    # Arcee (AFM): Llama's block with a two-matrix squared-ReLU MLP (up_proj, down_proj; ArceeMLP)
    "arcee": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias", plain=True, act="relu2"),
    # The generic decoder mapping: Hugging Face families that are plain Llama-shaped decoders (RMSNorm, RoPE,
    # SwiGLU MLP, q/k/v/o projections, the Llama config keys) are read as Llama; ``generic`` is the note
    # printed with every answer (ModelSpec.assumed) saying what the mapping leaves out.
    # OLMo 2 (Olmo2Config, modeling_olmo2.py): RMSNorms on the whole q and k projections (q_norm over
    # heads·head_dim, k_norm over kv_heads·head_dim), post-norm — post_attention_layernorm and
    # post_feedforward_layernorm on the sublayer outputs, no input_layernorm — and a final RMSNorm; OLMo 3 (Olmo3Config)
    # is OLMo 2's block with a 4,096-token window on three layers of each four
    "olmo2": dict(tie=False, qkv="attention_bias", o="attention_bias", qk="full", post=True,
                  generic="its norms follow attention and MLP (post-norm), which memory and time do not see"),
    "olmo3": dict(tie=False, qkv="attention_bias", o="attention_bias", qk="full", post=True, win=4096, every=4,
                  generic="as OLMo 2 (post-norm)"),
    # OLMo 1 (OlmoConfig, modeling_olmo.py): OlmoLayerNorm is F.layer_norm without weight or bias — no norm
    # parameters in the blocks or at the end; a LayerNorm (not RMSNorm) for time and memory
    "olmo": dict(tie=False, qkv="attention_bias", o="attention_bias", ln=True, norms=0,
                 generic="OLMo's LayerNorms carry no weight or bias (non-parametric): none are counted"),
    "granite": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                    generic="Granite's embedding, residual, attention and logits multipliers change no shape or "
                    "FLOP count"),
    "smollm3": dict(tie=True, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                    generic="SmolLM3's RoPE-free layers (no_rope_layers) cost the same as the others"),
    "helium": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                   generic="Helium is read as Llama"),
    # InternLM2 (internlm/internlm2-*: configuration_internlm2.py, modeling_internlm2.py): Llama's block with
    # q/k/v fused as wqkv and the MLP as w1/w3/w2 — the same shapes; bias is one key for q/k/v and o
    "internlm2": dict(tie=False, qkv="bias", o="bias",
                      generic="InternLM2's fused wqkv and w1/w2/w3 hold the Llama shapes"),
    # InternLM 1 (internlm/internlm-7b, -20b: remote code, InternLM/InternLM tools/transformers/modeling_internlm.py
    # at 68d6abc): Llama's block, q/k/v/o biases under one bias key (InternLMConfig default true), a bias-free MLP
    "internlm": dict(tie=False, qkv="bias", qkv_default=True, o="bias",
                     generic="InternLM's q/k/v/o (biased where bias is true) and MLP hold the Llama shapes"),
    # Seed-OSS (SeedOssConfig): Llama's block, q/k/v biases on by default, o's own key
    "seed_oss": dict(tie=False, qkv="attention_bias", qkv_default=True, o="attention_out_bias", mlp="mlp_bias",
                     hd=128),
    # ERNIE 4.5 (Ernie4_5Config): one use_bias key for every projection, tied embeddings, head_dim 128
    "ernie4_5": dict(tie=True, qkv="use_bias", o="use_bias", mlp="use_bias", hd=128),
    # ERNIE 4.5 MoE (Ernie4_5_MoeConfig): routed + shared experts on every moe_layer_interval-th layer from
    # moe_layer_start_index to moe_layer_end_index; head_dim hidden // heads unless given; use_bias also on lm_head
    "ernie4_5_moe": dict(tie=True, qkv="use_bias", o="use_bias", mlp="use_bias", head_bias="use_bias", moe="ernie"),
    # GLM-4 (GlmConfig / Glm4Config): q/k/v biases, gate and up fused as gate_up_proj; GLM-4-0414 (glm4) adds
    # norms after attention and after the MLP (4 per block); partial rotary changes no shape
    "glm": dict(tie=False, qkv="attention_bias", qkv_default=True, gate_up=True, hd=128),
    "glm4": dict(tie=False, qkv="attention_bias", qkv_default=True, gate_up=True, hd=128, norms=4),
    # EXAONE 4.0 (Exaone4Config): q/k norms, norms after attention and MLP only (post-norm, 2 per block), every
    # sliding_window_pattern-th layer global
    "exaone4": dict(tie=False, qk=True, post=True, win=4096, every=4),
    # Apertus (ApertusConfig): q/k norms and a two-matrix MLP with the xIELU activation (two learned scalars)
    "apertus": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, plain=True, act="xielu"),
    # Ministral (MinistralConfig): Mistral's block with layer_types for its sliding layers
    "ministral": dict(tie=False, win=4096),
    # Hunyuan dense (HunYuanDenseV1Config): q/k norms (query_layernorm, key_layernorm) over head_dim
    "hunyuan_v1_dense": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True),
    # remote-code decoders (catalog/families_remote.py translates their config.json to these keys): Qwen v1 (q/k/v
    # biases always, the output and MLP biases where no_bias is false) and ChatGLM2/3 / GLM-4
    "qwen": dict(tie=False, qkv=True, o="linear_bias", mlp="linear_bias"),
    "chatglm": dict(tie=False, qkv="qkv_bias", o="linear_bias", mlp="linear_bias"),
    # Hunyuan MoE (HunYuanMoEV1Config, Hunyuan-A13B): the dense block's attention, every layer a routed MoE beside
    # one shared MLP (catalog/families_moe.py _hunyuan)
    "hunyuan_v1_moe": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, moe="hunyuan"),
    # Granite-MoE and PhiMoE: Mixtral's MoE (PhiMoE with LayerNorms that carry a bias)
    "granitemoe": dict(tie=False, qkv="attention_bias", o="attention_bias", moe="mixtral",
                       generic="Granite's embedding, residual, attention and logits multipliers change no shape or "
                       "FLOP count"),
    "granitemoeshared": dict(tie=False, qkv="attention_bias", o="attention_bias", moe="mixtral",
                             generic="as Granite-MoE (multipliers change no shape or FLOP count)"),
    "phimoe": dict(tie=False, qkv="attention_bias", o="attention_bias", moe="mixtral", ln=True, win=None),
    # gpt-oss (GptOssConfig): biases on q/k/v/o, per-head attention sinks, every other layer a 128-token sliding
    # window, every layer a top-4 MoE whose router and experts carry biases
    "gpt_oss": dict(tie=False, qkv="attention_bias", qkv_default=True, o="attention_bias", sinks=True, hd=64,
                    moe="gpt_oss", win=128, every=2,
                    note="trained in bf16: the released MXFP4 expert weights are an inference format"),
    # Llama 4 text (Llama4TextConfig): routed experts plus a shared expert on moe_layers, dense layers of
    # intermediate_size_mlp; its q/k L2 norms have no weights; chunked attention is timed as full attention
    "llama4_text": dict(tie=False, qkv="attention_bias", o="attention_bias", hd=128, moe="llama4",
                        note="its chunked local attention (attention_chunk_size) is timed as full causal attention "
                        "(the same up to one chunk's length)"),
    # MiniMax-M2 (MiniMaxM2Config): every layer a top-8 MoE of 256 experts (no shared expert; the router's
    # score-correction bias a buffer), q/k RMSNorms over the whole projection; partial rotary changes no shape
    "minimax_m2": dict(tie=False, qk="full", hd=128, moe="minimax"),
    # GLM-4.5 (Glm4MoeConfig) and dots.llm1 (Dots1Config): DeepSeek-V3's shared + routed experts on a GQA block
    "glm4_moe": dict(tie=False, qkv="attention_bias", o=False, qk="use_qk_norm", moe="shared_routed"),
    "dots1": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, moe="shared_routed",
                  qwen_win=62),
    # EXAONE 3/3.5 (ExaoneConfig): Llama's block under its own key names (num_layers, layer_norm_epsilon)
    "exaone": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias",
                   keys={"num_layers": "num_hidden_layers"}),
    # InternLM3 (InternLM3Config: qkv_bias for q/k/v, bias for o and the MLP), IQuest-Coder (IQuestCoderConfig)
    "internlm3": dict(tie=False, qkv="qkv_bias", o="bias", mlp="bias", hd=128),
    "iquestcoder": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias", hd=128),
    # Ministral 3 (Ministral3Config: sliding_window null by default) and CWM (CwmConfig: a window of 8192 on the
    # layers its config.json's layer_types call sliding — three of each four in the released model)
    "ministral3": dict(tie=False, win=None, hd=128),
    "cwm": dict(tie=False, mlp="mlp_bias", win=8192, hd=128),
    # VaultGemma (VaultGemmaConfig): Gemma 2's block with only the two pre-norms; sliding layers in layer_types
    "vaultgemma": dict(tie=True, act="gelu_pytorch_tanh", qkv="attention_bias", o="attention_bias", hd=256,
                       win=4096, every=2),
    # Sarvam MoE (SarvamMoEConfig, transformers' Glm4MoeForCausalLM): GLM-4.5's block, q/k norms on by default
    "sarvam_moe": dict(tie=False, qkv="attention_bias", o=False, qk="use_qk_norm", qk_default=True, hd=64,
                       moe="shared_routed", keys={"use_qkv_bias": "attention_bias", "num_experts": "n_routed_experts",
                                                  "num_shared_experts": "n_shared_experts"}),
    # FlexOlmo (FlexOlmoConfig): OLMoE's MoE and whole-width q/k norms with OLMo 2's post-norms
    "flex_olmo": dict(tie=False, qkv="attention_bias", o="attention_bias", qk="full", moe="olmoe", post=True),
    # nanochat (NanoChatConfig): no norm weights (RMSNorm without a scale), a two-matrix squared-ReLU MLP (fc1, fc2)
    "nanochat": dict(tie=False, qkv="attention_bias", o="attention_bias", plain=True, act="relu2", norms=0),
    # Solar Open (SolarOpenConfig): every layer DeepSeek-V3's shared + routed experts, head_dim 128
    "solar_open": dict(tie=False, qkv="attention_bias", o="attention_bias", moe="shared_routed", hd=128,
                       keys={"num_local_experts": "n_routed_experts"}),
    # EXAONE MoE (ExaoneMoeConfig): EXAONE 4's q/k norms and windows, shared + routed experts after
    # first_k_dense_replace dense layers (or as mlp_layer_types lists them)
    "exaone_moe": dict(tie=False, qk=True, win=4096, every=4, moe="shared_routed",
                       keys={"num_experts": "n_routed_experts", "num_shared_experts": "n_shared_experts"}),
    # BitNet b1.58 (BitNetConfig): Llama's block with RMSNorms before o_proj (h) and down_proj (the MLP width), a
    # squared-ReLU gated MLP; trained quantization-aware (BitLinear), costed as 16-bit matmuls (noted)
    "bitnet": dict(tie=False, qkv="attention_bias", o="attention_bias", sub_norms=True, act="relu2",
                   note="its ternary BitLinear weights train quantization-aware over 16-bit masters: the matmuls are "
                   "costed in the training precision"),
    # AFMoE (AfmoeConfig, Arcee Trinity): a sigmoid output gate on attention (gate_proj), q/k norms, four norms per
    # block, windows on three layers of each four, shared + routed experts after num_dense_layers dense layers
    "afmoe": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, norms=4, hd=128, attn_gate=True,
                  moe="afmoe", win=1024, every=4),
    # Mellum (MellumConfig) and HY-V3 (HYV3Config): DeepSeek-V3's routed (+ shared) experts on a GQA block with q/k
    # norms, dense or sparse per mlp_layer_types (Mellum: all sparse, no shared expert; HY-V3: the first dense)
    "mellum": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, moe="shared_routed",
                   keys={"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts"}),
    "hy_v3": dict(tie=False, qkv="attention_bias", o="attention_bias", mlp="mlp_bias", qk=True, hd=128,
                  moe="shared_routed", keys={"num_experts": "n_routed_experts", "num_local_experts": "n_routed_experts",
                                             "num_shared_experts": "n_shared_experts"}),
    # Flint (FlintConfig): per-head attention sinks and q/k norms, Qwen3-MoE's experts with an ungated shared expert,
    # dense on mlp_only_layers
    "flint": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, sinks=True, moe="qwen3_moe"),
    # Granite SWA / Granite-MoE SWA: Granite's blocks with per-head attention sinks, a 128-token window on three
    # layers of each four (full on 0, 4, ...; layer_types when given)
    "granite_swa": dict(tie=True, qkv="attention_bias", o="attention_bias", mlp="mlp_bias", sinks=True, win=128,
                        full_every=4, generic="Granite's multipliers change no shape or FLOP count"),
    "granitemoe_swa": dict(tie=False, qkv="attention_bias", o="attention_bias", moe="mixtral", sinks=True, win=128,
                           full_every=4, generic="as Granite-MoE (multipliers change no shape or FLOP count)"),
    # Apertus 1.5 (Apertus1p5TextConfig): Apertus's block (its norms renamed)
    "apertus1p5_text": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, plain=True, act="xielu"),
    # Jais 2 (Jais2Config): LayerNorms with bias, biased q/k/v/o and a biased squared-ReLU two-matrix MLP
    "jais2": dict(tie=False, qkv="attention_bias", qkv_default=True, o="attention_bias", mlp="mlp_bias",
                  mlp_default=True, ln=True, plain=True, act="relu2"),
    # Kolibri (Kolibri1Config): q/k norms, four norms per block, routed experts and a shared one of
    # shared_expert_intermediate_size on every layer
    "kolibri1": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, norms=4,
                     moe="shared_routed", keys={"num_local_experts": "n_routed_experts",
                                                "num_experts": "n_routed_experts"}),
    # Beam (BeamConfig): a gated attention output (gate_proj, a bias per head), q/k norms, four norms per block, a
    # window on five layers of each six, routed experts after three dense layers (or per mlp_layer_types)
    "beam": dict(tie=False, qkv="attention_bias", o="attention_bias", qk=True, hd=128, norms=4, attn_gate="bias",
                 win=512, every=6, moe="shared_routed", keys={"num_experts": "n_routed_experts"}),
    # Baichuan 2 (baichuan-inc/Baichuan2-*: configuration_baichuan.py): Llama's block with q/k/v fused as W_pack,
    # multi-head attention (no num_key_value_heads); the 13B uses ALiBi instead of RoPE
    "baichuan": dict(tie=False,
                     generic="Baichuan 2's fused W_pack holds the q/k/v shapes; the 13B's ALiBi attention bias "
                     "(no RoPE) is timed as rotary attention"),
}
