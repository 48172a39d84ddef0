"""Names users of published training runs type, resolved to catalogue models.

Aliases sit on a catalogue row whose weight shapes equal the named model's (the check is in that row's ``notes`` in
catalog/models/index.json); new ids carry their own config.json and published count (tests/golden/test_param_counts.py).
Each typed name must load the same model, to the parameter, as the catalogue id it stands for.
"""

from __future__ import annotations

import pytest

from gpuplan.catalog.models import load_model

ALIASES = [
    # models of published runs written from their papers (none released), as papers and tables name them
    ("BloombergGPT", "bloomberggpt-50b"), ("BloombergGPT 50B", "bloomberggpt-50b"),
    ("GLM-130B", "glm-130b"), ("THUDM/GLM-130B", "glm-130b"),
    ("Turing-NLG", "turing-nlg-17b"), ("T-NLG", "turing-nlg-17b"),
    ("Galactica 120B", "galactica-120b"), ("facebook/galactica-120b", "galactica-120b"),
    # GLM-4.6 and GLM-4.7 have GLM-4.5's weight shapes (only max_position_embeddings differs)
    ("zai-org/GLM-4.6", "glm-4.5"), ("zai-org/GLM-4.7", "glm-4.5"), ("zai-org/GLM-4.5-Air-Base", "glm-4.5-air"),
    ("allenai/Olmo-3-7B-Instruct", "olmo-3-7b"), ("swiss-ai/Apertus-70B-Instruct-2509", "apertus-70b"),
    # DeepSeek-R1 distillations into Qwen2.5 / Llama 3 (arXiv 2501.12948)
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "qwen2.5-7b"),
    ("DeepSeek-R1-Distill-Qwen-7B", "qwen2.5-7b"),
    ("deepseek-r1-distill-qwen-7b", "qwen2.5-7b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "qwen2.5-14b"),
    ("DeepSeek-R1-Distill-Qwen-14B", "qwen2.5-14b"),
    ("deepseek-r1-distill-qwen-14b", "qwen2.5-14b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
    ("DeepSeek-R1-Distill-Qwen-32B", "qwen2.5-32b"),
    ("deepseek-r1-distill-qwen-32b", "qwen2.5-32b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "llama-3.1-8b"),
    ("DeepSeek-R1-Distill-Llama-8B", "llama-3.1-8b"),
    ("deepseek-r1-distill-llama-8b", "llama-3.1-8b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "llama-3.3-70b"),
    ("DeepSeek-R1-Distill-Llama-70B", "llama-3.3-70b"),
    ("deepseek-r1-distill-llama-70b", "llama-3.3-70b"),
    # OPT-350m (its own row: the post-LN OPT with 512-wide embeddings)
    ("facebook/opt-350m", "opt-350m"),
    ("OPT-350M", "opt-350m"),
    # QwQ
    ("Qwen/QwQ-32B", "qwen2.5-32b"),
    ("QwQ-32B", "qwen2.5-32b"),
    ("qwq-32b", "qwen2.5-32b"),
    ("Qwen/QwQ-32B-Preview", "qwen2.5-32b"),
    ("QwQ-32B-Preview", "qwen2.5-32b"),
    ("qwq-32b-preview", "qwen2.5-32b"),
    # Phi-3.5 mini
    ("microsoft/Phi-3.5-mini-instruct", "phi-3-mini"),
    ("Phi-3.5-mini-instruct", "phi-3-mini"),
    ("phi-3.5-mini", "phi-3-mini"),
    ("phi-3.5-mini-instruct", "phi-3-mini"),
    # Llama Guard 3
    ("meta-llama/Llama-Guard-3-8B", "llama-3.1-8b"),
    ("Llama-Guard-3-8B", "llama-3.1-8b"),
    ("llama-guard-3-8b", "llama-3.1-8b"),
    # CodeGemma
    ("google/codegemma-7b", "gemma-7b"),
    ("codegemma-7b", "gemma-7b"),
    ("google/codegemma-7b-it", "gemma-7b"),
    ("codegemma-7b-it", "gemma-7b"),
    ("google/codegemma-2b", "gemma-2b"),
    ("codegemma-2b", "gemma-2b"),
    # StableLM Zephyr 3B
    ("stabilityai/stablelm-zephyr-3b", "stablelm-3b-4e1t"),
    ("stablelm-zephyr-3b", "stablelm-3b-4e1t"),
    # Magistral Small (text-only Mistral Small 3.1 fine-tunes)
    ("mistralai/Magistral-Small-2506", "mistral-small-24b"),
    ("Magistral-Small-2506", "mistral-small-24b"),
    ("magistral-small-2506", "mistral-small-24b"),
    ("mistralai/Magistral-Small-2507", "mistral-small-24b"),
    ("Magistral-Small-2507", "mistral-small-24b"),
    ("magistral-small-2507", "mistral-small-24b"),
    # OpenLLaMA 7B v2 (LLaMA-7B shapes, RahulSChand/gpu_poor all_configs.json)
    ("openlm-research/open_llama_7b_v2", "llama-7b"),
    ("open_llama_7b_v2", "llama-7b"),
    # WizardLM-13B-V1.2 (a Llama-2-13B fine-tune)
    ("WizardLM/WizardLM-13B-V1.2", "llama-2-13b"),
    ("wizardlm-13b-v1.2", "llama-2-13b"),
    # Vicuna-33B v1.3 (a LLaMA-33B fine-tune)
    ("lmsys/vicuna-33b-v1.3", "llama-33b"),
    ("vicuna-33b-v1.3", "llama-33b"),
    ("vicuna-33b", "llama-33b"),
    # Gemma 1.1 2B instruct (Gemma 2B shapes)
    ("google/gemma-1.1-2b-it", "gemma-2b"),
    ("gemma-1.1-2b-it", "gemma-2b"),
]

NEW_IDS = [
    # RedPajama-INCITE 7B (gpt_neox; config from drcege/RedPajama-INCITE-7B-Base, the Base-7B-v0.1 mirror)
    ("redpajama-incite-7b", "redpajama-incite-7b"),
    ("togethercomputer/RedPajama-INCITE-7B-Base", "redpajama-incite-7b"),
    ("RedPajama-INCITE-7B-Base", "redpajama-incite-7b"),
    ("togethercomputer/RedPajama-INCITE-Base-7B-v0.1", "redpajama-incite-7b"),
    ("togethercomputer/RedPajama-INCITE-7B-Chat", "redpajama-incite-7b"),
    ("togethercomputer/RedPajama-INCITE-7B-Instruct", "redpajama-incite-7b"),
    ("redpajama-7b", "redpajama-incite-7b"),
    ("deepseek-r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-1.5b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-distill-qwen-1.5b"),
    ("DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-distill-qwen-1.5b"),
    ("r1-distill-qwen-1.5b", "deepseek-r1-distill-qwen-1.5b"),
    ("baichuan2-7b", "baichuan2-7b"),
    ("baichuan-inc/Baichuan2-7B-Base", "baichuan2-7b"),
    ("Baichuan2-7B-Base", "baichuan2-7b"),
    ("baichuan-inc/Baichuan2-7B-Chat", "baichuan2-7b"),
    ("baichuan2-7b-chat", "baichuan2-7b"),
    ("baichuan2-7b-base", "baichuan2-7b"),
    ("baichuan-2-7b", "baichuan2-7b"),
    ("baichuan2-13b", "baichuan2-13b"),
    ("baichuan-inc/Baichuan2-13B-Base", "baichuan2-13b"),
    ("Baichuan2-13B-Base", "baichuan2-13b"),
    ("baichuan-inc/Baichuan2-13B-Chat", "baichuan2-13b"),
    ("baichuan2-13b-chat", "baichuan2-13b"),
    ("baichuan2-13b-base", "baichuan2-13b"),
    ("baichuan-2-13b", "baichuan2-13b"),
    ("gpt3-13b", "gpt3-13b"),
    ("gpt-3-13b", "gpt3-13b"),
    ("GPT-3 13B", "gpt3-13b"),
    ("bloom-1b1", "bloom-1b1"),
    ("bigscience/bloom-1b1", "bloom-1b1"),
    ("bloom1b1", "bloom-1b1"),
    ("bigscience/bloomz-1b1", "bloom-1b1"),
    ("bloomz-1b1", "bloom-1b1"),
    ("bloom-1b7", "bloom-1b7"),
    ("bigscience/bloom-1b7", "bloom-1b7"),
    ("bloom1b7", "bloom-1b7"),
    ("bigscience/bloomz-1b7", "bloom-1b7"),
    ("bloomz-1b7", "bloom-1b7"),
    ("bloom-3b", "bloom-3b"),
    ("bigscience/bloom-3b", "bloom-3b"),
    ("bloom3b", "bloom-3b"),
    ("bigscience/bloomz-3b", "bloom-3b"),
    ("bloomz-3b", "bloom-3b"),
    ("moonlight-16b-a3b", "moonlight-16b-a3b"),
    ("moonshotai/Moonlight-16B-A3B", "moonlight-16b-a3b"),
    ("Moonlight-16B-A3B", "moonlight-16b-a3b"),
    ("moonshotai/Moonlight-16B-A3B-Instruct", "moonlight-16b-a3b"),
    ("moonlight-16b-a3b-instruct", "moonlight-16b-a3b"),
    ("moonlight-16b", "moonlight-16b-a3b"),
    ("falcon-11b", "falcon-11b"),
    ("tiiuae/falcon-11B", "falcon-11b"),
    ("falcon-11B", "falcon-11b"),
    ("Falcon2-11B", "falcon-11b"),
    ("falcon-2-11b", "falcon-11b"),
    ("internlm-20b", "internlm-20b"),
    ("internlm/internlm-20b", "internlm-20b"),
    ("InternLM-20B", "internlm-20b"),
    ("internlm20b", "internlm-20b"),
    # Qwen1.5 small sizes (their own rows: configs from Girafboy/pytorchKQI, the -Chat configs differing only in eos)
    ("qwen1.5-0.5b", "qwen1.5-0.5b"),
    ("Qwen/Qwen1.5-0.5B", "qwen1.5-0.5b"),
    ("Qwen/Qwen1.5-0.5B-Chat", "qwen1.5-0.5b"),
    ("qwen1.5-0.5b-chat", "qwen1.5-0.5b"),
    ("qwen1.5-1.8b", "qwen1.5-1.8b"),
    ("Qwen/Qwen1.5-1.8B", "qwen1.5-1.8b"),
    ("Qwen/Qwen1.5-1.8B-Chat", "qwen1.5-1.8b"),
    ("qwen1.5-1.8b-chat", "qwen1.5-1.8b"),
    ("qwen1.5-4b", "qwen1.5-4b"),
    ("Qwen/Qwen1.5-4B", "qwen1.5-4b"),
    ("Qwen/Qwen1.5-4B-Chat", "qwen1.5-4b"),
    ("qwen1.5-4b-chat", "qwen1.5-4b"),
    # DeepSeek-Coder 1.3B (its own row; the -instruct config differs only in eos and transformers_version)
    ("deepseek-coder-1.3b", "deepseek-coder-1.3b"),
    ("deepseek-ai/deepseek-coder-1.3b-base", "deepseek-coder-1.3b"),
    ("deepseek-coder-1.3b-base", "deepseek-coder-1.3b"),
    ("deepseek-ai/deepseek-coder-1.3b-instruct", "deepseek-coder-1.3b"),
    ("deepseek-coder-1.3b-instruct", "deepseek-coder-1.3b"),
]


@pytest.mark.parametrize(("name", "mid"), ALIASES + NEW_IDS)
def test_typed_name_loads_the_catalogue_model(name: str, mid: str) -> None:
    spec = load_model(name)
    assert spec.params == load_model(mid).params, name
    assert spec.name == load_model(mid).name, name
    # a catalogue match, not a fine-tune read as its base (which would leave a note in assumed)
    assert not any(f"read as {mid}" in a for a in spec.assumed), name


def test_r1_distill_qwen_15b_is_not_qwen25_15b() -> None:
    # same block as Qwen2.5-1.5B, but the LM head is untied: 151,936 x 1536 more parameters
    distill, base = load_model("deepseek-r1-distill-qwen-1.5b"), load_model("qwen2.5-1.5b")
    assert not distill.tied_embeddings and base.tied_embeddings
    assert distill.params - base.params == 151_936 * 1536
    assert distill.params == 1_777_088_000


# facebook/opt-350m's config.json (transformers 4.19.2; the keys as a public OPTConfig(**{...}) copy of it gives them,
# _name_or_path facebook/opt-350m): word_embed_proj_dim 512 under a 1024-wide post-LN stack
_OPT_350M = {"activation_dropout": 0.0, "activation_function": "relu", "architectures": ["OPTForCausalLM"],
             "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": False, "dropout": 0.1,
             "eos_token_id": 2, "ffn_dim": 4096, "hidden_size": 1024, "init_std": 0.02, "layerdrop": 0.0,
             "max_position_embeddings": 2048, "model_type": "opt", "num_attention_heads": 16,
             "num_hidden_layers": 24, "pad_token_id": 1, "prefix": "</s>", "torch_dtype": "float16",
             "transformers_version": "4.19.2", "use_cache": True, "vocab_size": 50272, "word_embed_proj_dim": 512}


def test_opt_350m_projections_are_embedding_not_lm_head() -> None:
    # modeling_opt.py OPTDecoder: project_in (512 -> 1024) and project_out (1024 -> 512), both bias-free, beside a
    # 512-wide token table that the LM head ties to; no final LayerNorm under do_layer_norm_before false. The
    # checkpoint (facebook/opt-350m pytorch_model.bin: 388 tensors, 662,392,832 FP16 bytes) holds 331,196,416.
    spec = load_model(_OPT_350M)
    assert spec.params == 331_196_416
    assert spec.tied_embeddings and not [w for w in spec.head if w.group == "head"]
    assert {w.name: w.group for w in spec.embedding + spec.head if w.name.startswith("project")} == {
        "project_in": "embedding", "project_out": "embedding"}
    assert not [w for w in spec.head if w.group == "norm"] and spec.post_norms
    assert spec.params_by_group()["embedding"] == 50272 * 512 + 2 * 512 * 1024
