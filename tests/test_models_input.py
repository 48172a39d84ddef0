"""Every way to name a model, and the one-line errors for bad input."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.catalog.models import CATALOG, load_model
from gpuplan.errors import GpuplanError

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def tiny_tensors() -> dict[str, list[int]]:
    """The tensors transformers' LlamaForCausalLM creates for TINY (HF checkpoint names)."""
    t = {"model.embed_tokens.weight": [100, 64], "model.norm.weight": [64], "lm_head.weight": [100, 64]}
    for i in range(2):
        p = f"model.layers.{i}."
        t |= {p + "self_attn.q_proj.weight": [64, 64], p + "self_attn.k_proj.weight": [32, 64],
              p + "self_attn.v_proj.weight": [32, 64], p + "self_attn.o_proj.weight": [64, 64],
              p + "mlp.gate_proj.weight": [128, 64], p + "mlp.up_proj.weight": [128, 64],
              p + "mlp.down_proj.weight": [64, 128], p + "input_layernorm.weight": [64],
              p + "post_attention_layernorm.weight": [64]}
    return t


def write_safetensors(path: Path, tensors: dict[str, list[int]], dtype: str = "BF16") -> None:
    """A real safetensors file: 8-byte little-endian header length, JSON header, zeroed data."""
    size = {"BF16": 2, "F32": 4}[dtype]
    header: dict = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape in tensors.items():
        n = math.prod(shape) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(off))


TINY_PARAMS = sum(math.prod(s) for s in tiny_tensors().values())


# ---- names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ref", ["llama-3.1-8b", "Llama-3.1-8B", "LLAMA-3.1-8B", "meta-llama/Llama-3.1-8B",
                                 "meta-llama/Meta-Llama-3.1-8B", "llama3.1-8b", " llama-3.1-8b "])
def test_catalogue_names_aliases_and_case(ref: str) -> None:
    spec = load_model(ref)
    assert spec.params == 8_030_261_248 and spec.n_kv_heads == 8


def test_evaluate_llama_3_8b_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama 3 8B has Llama 3.1 8B's shapes (only the context and RoPE scaling differ): 8,030,261,248
    from gpuplan.cli import main

    assert main(["evaluate", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert model["params"] == 8_030_261_248 == load_model("llama-3.1-8b").params


@pytest.mark.parametrize(("ref", "mid"), [
    ("llama3-8b", "llama-3-8b"), ("meta-llama-3-8b", "llama-3-8b"), ("llama-3-8b-instruct", "llama-3-8b"),
    ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"), ("Llama3-70B", "llama-3-70b"),
    ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"), ("Qwen/Qwen2-7B-Instruct", "qwen2-7b"),
    ("01-ai/Yi-1.5-34B-Chat", "yi-1.5-34b"), ("deepseek-llm-7b-base", "deepseek-llm-7b"),
    ("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "tinyllama-1.1b"), ("Qwen/Qwen1.5-7B-Chat", "qwen1.5-7b"),
    ("qwen1_5-72b", "qwen1.5-72b"), ("deepseek-ai/deepseek-llm-67b-chat", "deepseek-llm-67b"),
    ("DeepSeek-V2-Chat", "deepseek-v2"), ("deepseek-ai/DeepSeek-V2", "deepseek-v2"),
    # a Hugging Face repo's name without its organisation, as run tables write it
    ("Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"), ("Nemotron-H-56B-Base-8K", "nemotron-h-56b"),
    ("NemotronH 56B", "nemotron-h-56b"), ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nemotron-3-nano-30b-a3b"),
    # 2026-12-03 additions: Hugging Face repo ids and the spellings run tables use
    ("internlm/internlm2-chat-20b", "internlm2-20b"), ("internlm/internlm2-7b", "internlm2.5-7b"),
    ("bigcode/starcoder2-7b", "starcoder2-7b"), ("HuggingFaceTB/SmolLM3-3B", "smollm3-3b"),
    ("tiiuae/falcon-180B", "falcon-180b"), ("gpt2-medium", "gpt2-medium"), ("GPT-2 Large", "gpt2-large"),
    ("cerebras/Cerebras-GPT-13B", "cerebras-gpt-13b"), ("facebook/galactica-30b", "galactica-30b"),
    ("google/gemma-3-270m-it", "gemma-3-270m"), ("ibm-granite/granite-3.3-8b-base", "granite-3.3-8b"),
    ("allenai/OLMo-2-0425-1B", "olmo-2-1b"), ("01-ai/Yi-9B", "yi-1.5-9b")])
def test_new_catalogue_aliases(ref: str, mid: str) -> None:
    assert load_model(ref).params == load_model(mid).params
    assert load_model(ref).name == load_model(mid).name


def test_name_override() -> None:
    assert load_model("gpt2", name="my-gpt").name == "my-gpt"


def test_catalogue_is_loaded_lazily() -> None:
    code = "import gpuplan.catalog.models as m; assert m._index.cache_info().currsize == 0; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert out.stdout.strip() == "ok", out.stderr


# ---- config.json paths and folders ---------------------------------------------------------------------
def test_config_json_path_str_and_path(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    shutil.copy(CATALOG / "mistral-7b.json", cfg)
    for ref in (str(cfg), cfg, tmp_path, str(tmp_path)):
        spec = load_model(ref)
        assert spec.params == 7_241_732_096 and spec.params_source == "formula"
    assert load_model(cfg).name == tmp_path.name


def test_folder_with_safetensors_counts_headers(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    # inv_freq is a buffer some checkpoints store (Llama-2-*-hf), not a parameter
    tensors = tiny_tensors() | {"model.layers.0.self_attn.rotary_emb.inv_freq": [8]}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    spec = load_model(tmp_path)
    assert spec.params_source == "safetensors"
    assert spec.params == TINY_PARAMS == spec.params_formula


def test_safetensors_header_is_the_truth(tmp_path: Path) -> None:
    """When the checkpoint differs from the config formula, the header count wins and the gap is noted."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    tensors = tiny_tensors() | {"model.layers.0.mlp.extra_adapter.weight": [10, 64]}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    spec = load_model(tmp_path / "config.json")
    assert spec.params == TINY_PARAMS + 640 and spec.params_formula == TINY_PARAMS
    assert any("+640" in a for a in spec.assumed)


def test_sharded_safetensors_with_index(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    items = list(tiny_tensors().items())
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", dict(items[:10]))
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", dict(items[10:]), "F32")
    wmap = {k: "model-00001-of-00002.safetensors" for k, _ in items[:10]}
    wmap |= {k: "model-00002-of-00002.safetensors" for k, _ in items[10:]}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 1},
                                                                       "weight_map": wmap}))
    spec = load_model(tmp_path)
    assert spec.params == TINY_PARAMS and spec.params_source == "safetensors"


def test_index_only_folder_uses_total_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    wmap = {k: "model-00001-of-00001.safetensors" for k in tiny_tensors()}
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 2 * TINY_PARAMS}, "weight_map": wmap}))
    spec = load_model(tmp_path)
    assert spec.params == TINY_PARAMS and spec.params_source == "safetensors-index"


def test_tied_head_copy_and_mtp_layers_in_checkpoint(tmp_path: Path) -> None:
    """Falcon stores lm_head although it is tied; DeepSeek-V3 stores its MTP module as layer N."""
    cfg = TINY | {"tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = tiny_tensors() | {"model.layers.2.eh_proj.weight": [64, 128]}
    write_safetensors(tmp_path / "model.safetensors", tensors)
    spec = load_model(tmp_path)
    assert spec.params == TINY_PARAMS - 6400 == spec.params_formula  # lm_head copy skipped
    assert spec.extra_params == 64 * 128


# ---- inline mappings -----------------------------------------------------------------------------------
def test_inline_hf_mapping() -> None:
    cfg = json.loads((CATALOG / "qwen2.5-7b.json").read_text())
    assert load_model(cfg).params == 7_615_616_512
    assert load_model(cfg, name="q").name == "q"


def test_gpt2_style_keys() -> None:
    spec = load_model({"n_layer": 12, "n_embd": 768, "n_head": 12})
    assert spec.params == 124_439_808 and spec.model_type == "gpt2"
    assert any("gpt2" in a for a in spec.assumed)  # the inference is recorded, not silent
    spec = load_model({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_inner": 100,
                       "vocab_size": 10, "n_positions": 16})
    assert spec.ffn == 100 and spec.max_positions == 16


@pytest.mark.parametrize("given", [7e9, 7_000_000_000, "7B", "7e9"])
def test_params_only(given) -> None:
    spec = load_model({"params": given})
    assert spec.params == 7_000_000_000 and spec.params_source == "given"
    assert (spec.n_layers, spec.hidden, spec.vocab) == (32, 4096, 32000)
    assert spec.assumed and "12·L·h²" in spec.assumed[0]
    assert abs(spec.params_formula - 7e9) / 7e9 < 0.1


def test_params_with_hints() -> None:
    spec = load_model({"params": 70e9, "vocab": 128256, "seq": 8192})
    assert spec.vocab == 128256 and spec.max_positions == 8192 and spec.params == 70_000_000_000
    assert spec.n_heads % 8 == 0 and spec.n_layers % 4 == 0
    spec = load_model({"params": 1e9, "layers": 16, "hidden": 2048})
    assert (spec.n_layers, spec.hidden) == (16, 2048)


def test_config_plus_params_overrides_count() -> None:
    spec = load_model(TINY | {"params": 12345})
    assert spec.params == 12345 and spec.params_source == "given" and spec.params_formula == TINY_PARAMS


# ---- errors: one line, a GpuplanError, naming problem and fix --------------------------------------------
def err(ref) -> str:
    with pytest.raises(GpuplanError) as e:
        load_model(ref)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_unknown_name_suggests_closest() -> None:
    msg = err("llama-3.1-9b")
    assert "unknown model 'llama-3.1-9b'" in msg and "llama-3.1-8b" in msg and "{params: N}" in msg
    assert "mixtral-8x7b" in err("mixtrl-8x7b")


def test_missing_file() -> None:
    assert "not found" in err("./no/such/config.json")
    assert "not found" in err(Path("/no/such/folder"))


def test_folder_without_config(tmp_path: Path) -> None:
    assert "no config.json" in err(tmp_path)


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096\n  "x": 1\n}')
    msg = err(bad)
    assert str(bad) in msg and "line 4" in msg and "malformed JSON" in msg


def test_unsupported_model_type() -> None:
    msg = err({"model_type": "no_such_decoder", "d_model": 512})
    assert "'no_such_decoder' is not supported" in msg and "llama" in msg and "{params: N}" in msg


@pytest.mark.parametrize("mt, why", [("t5", "encoder-decoder"), ("bert", "encoder (masked-language)"),
                                     ("zamba2", "same weights several times"), ("dory", "looped"),
                                     ("rwkv", "recurrent cell")])
def test_a_known_model_type_gpuplan_cannot_cost_is_refused_with_its_reason(mt: str, why: str) -> None:
    msg = err({"model_type": mt, "d_model": 512})
    assert f"'{mt}' is not supported: " in msg and why in msg and "{params: N}" in msg


def test_missing_keys_are_named() -> None:
    msg = err({"model_type": "llama", "hidden_size": 4096})
    assert "num_hidden_layers" in msg and "vocab_size" in msg and "intermediate_size" in msg


@pytest.mark.parametrize("key, value", [("hidden_size", -64), ("num_hidden_layers", 0), ("vocab_size", 1.5),
                                        ("num_attention_heads", "four")])
def test_bad_sizes(key: str, value) -> None:
    msg = err(TINY | {key: value})
    assert key in msg


def test_heads_must_divide_hidden() -> None:
    msg = err(TINY | {"num_attention_heads": 5, "num_key_value_heads": 5})
    assert "not divisible by 5 attention heads" in msg
    assert "key/value heads" in err(TINY | {"num_key_value_heads": 3})


def test_bad_params_values() -> None:
    assert "positive whole number" in err({"params": -1})
    assert "positive whole number" in err({"params": "lots"})
    assert "unknown key(s) hiden" in err({"params": 7e9, "hiden": 4096})
    assert "neither model_type nor params" in err({"hidden_size": 4096})


def test_bad_safetensors_header(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    assert "not a safetensors file" in err(tmp_path)


def test_wrong_reference_type() -> None:
    assert "name, a path or a mapping" in err(42)


def test_params_with_head_counts() -> None:
    # LLaMA-33B as published (Touvron et al. 2023, Table 2): 60 layers, hidden 6656, 52 heads
    m = load_model({"params": 32.5e9, "layers": 60, "hidden": 6656, "heads": 52})
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (60, 6656, 52, 52, 128)
    # Llama-2-70B's grouped-query attention: 64 query heads share 8 key/value heads
    g = load_model({"params": 70e9, "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8})
    assert (g.n_heads, g.n_kv_heads, g.head_dim) == (64, 8, 128)
    assert g.params == 70_000_000_000 and "8 key/value heads" in g.assumed[0]


@pytest.mark.parametrize(("hints", "words"), [
    ({"hidden": 4096, "heads": 30}, "heads 30 do not divide hidden 4096"),
    ({"heads": 32, "kv_heads": 5}, "kv_heads 5 must divide heads 32"),
    ({"heads": 32, "kv_heads": 64}, "kv_heads 64 must divide heads 32"),
    ({"heads": 0}, "heads = 0 is not a positive whole number"),
])
def test_params_with_impossible_head_counts_is_one_clear_error(hints, words) -> None:
    with pytest.raises(GpuplanError, match=re.escape(words)):
        load_model({"params": 7e9, **hints})


@pytest.mark.parametrize("ref, mid, why", [
    # a checkpoint's variant or quantized-format suffix, an Ollama tag: the same shapes to train, said so
    ("Llama-3.1-405B-Instruct-FP8", "llama-3.1-405b", "FP8 changes no shape"),
    ("Qwen2.5-72B-Instruct-AWQ", "qwen2.5-72b", "AWQ changes no shape"),
    ("llama-3.1-8b-bnb-4bit", "llama-3.1-8b", "bnb-4bit changes no shape"),
    ("llama3.1:8b", "llama-3.1-8b", "an Ollama-style tag"),
    # as papers' tables write a model: remarks in parentheses or after a comma, not read
    ("GPT-3 175B (174.6B)", "gpt3-175b", "its remarks are not read"),
    ("LLaMA-65B (paper)", "llama-65b", "its remarks are not read"),
    ("Llama-2-70B, pretraining", "llama-2-70b", "its remarks are not read"),
    ("Qwen2.5-72B-Instruct-AWQ (4-bit)", "qwen2.5-72b", "AWQ changes no shape; its remarks are not read"),
    # two versions of one model, as benchmark tables write it: the shapes are the same
    ("Llama-3/3.1-8B", "llama-3-8b", "one of the versions it names, 3 and 3.1, which have the same shapes"),
])
def test_a_checkpoint_name_with_a_variant_suffix_is_its_model(ref, mid, why):
    from gpuplan.catalog.models import load_model

    m = load_model(ref)
    assert (m.name, m.params) == (load_model(mid).name, load_model(mid).params)
    assert any(f"read as {mid}: {why}" in a for a in m.assumed)


@pytest.mark.parametrize("ref, mid, why", [
    # a catalogue model re-published under another organisation (a mirror, a quantized upload)
    ("NousResearch/Llama-2-7b-hf", "llama-2-7b",
     "'Llama-2-7b-hf' as the Hugging Face organisation 'NousResearch' publishes it (no such folder here)"),
    ("unsloth/llama-3-8b-bnb-4bit", "llama-3-8b", "publishes it (no such folder here); bnb-4bit changes no shape"),
    # a fine-tune named after its base model: the base's shapes
    ("OpenHermes-2.5-Mistral-7B", "mistral-7b", "it names its base model 'mistral-7b', whose shapes a fine-tune keeps"),
    ("dolphin-2.9-llama3-8b", "llama-3-8b", "it names its base model 'llama3-8b'"),
    ("Nous-Hermes-2-Mixtral-8x7B-DPO", "mixtral-8x7b", "it names its base model 'mixtral-8x7b'"),
])
def test_a_mirror_or_a_fine_tune_is_read_as_the_model_it_names(ref, mid, why):
    from gpuplan.catalog.models import load_model

    m = load_model(ref)
    assert (m.name, m.params) == (load_model(mid).name, load_model(mid).params)
    assert any(f"read as {mid}: " in a and why in a for a in m.assumed)


@pytest.mark.parametrize("ref", [
    "Qwen2-VL-72B",     # holds "qwen2" and "72b", never the name "qwen2-72b" whole: a vision model is not its LM
    "mistral",          # a family word, no size
    "WizardLM-2-8x22B",  # names no catalogue model whole
    "LLaMA 7B/13B",     # two sizes joined by a slash: neither is read
    "Llama-2 7/13B",    # a name with a space and a slash is a name, not a path: 'unknown model', not 'file not found'
    "GPT-3 8B",         # holds 'gpt-3' (GPT-3 175B's alias) but states a size of its own: not a fine-tune of 175B
    "gpt-3 30b",        # nor GPT-3 13B (its own catalogue row) nor 175B
    "Llama 3 3B",       # the loose spelling keeps a version apart from a size: not LLaMA 33B ('llama33b')
    "Llama 27B",        # nor Llama 2 7B
    "Qwen 34B",         # nor Qwen3 4B
    "Megatron-GPT 2.7B",  # holds 'gpt-2' only as the start of '2.7b': not GPT-2 (124M)
])
def test_a_name_holding_no_catalogue_model_whole_is_refused(ref):
    from gpuplan.catalog.models import load_model
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="unknown model"):
        load_model(ref)


def test_a_folder_that_exists_wins_over_a_repo_id_it_looks_like(tmp_path, monkeypatch):
    from gpuplan.catalog.models import load_model

    folder = tmp_path / "myorg" / "llama-2-7b"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000}))
    monkeypatch.chdir(tmp_path)
    m = load_model("myorg/llama-2-7b")
    assert m.hidden == 512 and m.n_layers == 4
    assert not any("read as" in a for a in m.assumed)


def test_a_name_that_is_still_unknown_after_its_suffix_is_dropped_is_refused():
    from gpuplan.catalog.models import load_model
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="unknown model 'nonexistent-model-chat'"):
        load_model("nonexistent-model-chat")
    with pytest.raises(GpuplanError, match=re.escape("unknown model 'Grok-1 (benchmark yaml)'")):
        load_model("Grok-1 (benchmark yaml)")
    with pytest.raises(GpuplanError):  # two sizes, not two versions of one: not read as either
        load_model("Llama-2-7/13B")


# a config.json that names only its class: the model_type is read from transformers' class name
@pytest.mark.parametrize("arch, mt", [("LlamaForCausalLM", "llama"), ("Qwen2MoeForCausalLM", "qwen2_moe"),
                                      ("GPTNeoXForCausalLM", "gpt_neox"), ("GPT2LMHeadModel", "gpt2"),
                                      ("Gemma3ForConditionalGeneration", "gemma3")])
def test_a_config_with_architectures_but_no_model_type_reads_its_class(arch: str, mt: str) -> None:
    from gpuplan.catalog.models import model_type_of

    assert model_type_of([arch]) == mt


def test_the_class_decides_the_block_and_is_named() -> None:
    # Qwen1.5-MoE-A2.7B's shapes under its class only: 14.3B parameters, 2.7B active (Qwen blog, 2024-03)
    spec = load_model({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
                       "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                       "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4,
                       "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632})
    assert spec.model_type == "qwen2_moe" and spec.params == 14_315_784_192
    assert "no model_type: architectures Qwen2MoeForCausalLM read as model_type qwen2_moe" in spec.assumed
    msg = err({"architectures": ["T5ForConditionalGeneration"], "d_model": 512})
    assert "model_type" in msg


@pytest.mark.parametrize("catalogued", ["nemotron-h-8b", "qwen3-30b-a3b"])
def test_a_config_as_transformers_5_saves_it_reads_as_the_catalogued_one(catalogued, tmp_path):
    # transformers' save_pretrained writes float("inf") as Infinity (Mamba-2 / Nemotron-H time_step_limit), and
    # transformers 5 names Qwen3-MoE's expert count num_local_experts (4.x: num_experts): the same model either way
    cfg = json.loads((CATALOG / f"{catalogued}.json").read_text())
    cfg["time_step_limit"] = [0.0, math.inf]
    if "num_experts" in cfg:
        cfg["num_local_experts"] = cfg.pop("num_experts")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))  # Python's json: the literal Infinity
    assert "Infinity" in path.read_text()
    assert load_model(path).params == load_model(catalogued).params


@pytest.mark.parametrize("total, active, experts, top_k", [
    # DeepSeek-V3 (arXiv:2412.19437: 671B total, 37B activated per token): a fine-grained MoE, 8 routed per token
    (671e9, 37e9, None, 8),
    # Mixtral 8x7B (arXiv:2401.04088: 46.7B total, 12.9B active): a coarse MoE, 2 per token
    (46.7e9, 12.9e9, None, 2),
    # Qwen3-235B-A22B, with its own expert count and top_k given (128 experts, 8 per token)
    (235e9, 22e9, 128, 8),
])
def test_a_mixture_of_experts_from_its_total_and_active_counts(total, active, experts, top_k):
    given = {"params": total, "active_params": active} | ({"experts": experts} if experts else {})
    spec = load_model(given)
    assert spec.moe and spec.top_k == top_k and (experts is None or spec.n_experts == experts)
    assert spec.n_experts % 2 == 0 and spec.n_experts >= 2 * spec.top_k  # expert parallelism divides them
    # the derived shape holds the total within 2 % (the memory) and the active count within 3 % (the FLOPs)
    assert spec.params == pytest.approx(total, rel=0.02)
    assert spec.params_active == pytest.approx(active, rel=0.03 if experts is None else 0.15)
    assert "active_params" in spec.assumed[0] and f"{spec.top_k} per token" in spec.assumed[0]


@pytest.mark.parametrize("given, words", [
    ({"params": 7e9, "active_params": 8e9}, "active_params 8,000,000,000 must be below params"),
    ({"params": 7e9, "experts": 8}, "experts/top_k describe a mixture of experts: give active_params"),
])
def test_a_mixture_of_experts_that_cannot_be_is_one_line(given, words):
    with pytest.raises(GpuplanError, match=words):
        load_model(given)


def test_a_mixture_of_experts_by_its_dimensions():
    # Mixtral 8x7B as its paper's Table 1 states it (arXiv:2401.04088: dim 4096, 32 layers, 32 heads, 8 kv heads,
    # hidden_dim 14336, 8 experts, top 2, vocab 32000): transformers' count, 46,702,792,704 (12.9B active)
    spec = load_model({"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "experts": 8,
                       "top_k": 2, "vocab": 32000})
    assert spec.params == 46_702_792_704 and spec.params_active == pytest.approx(12.9e9, rel=0.01)
    # Megatron's spellings read the same way; the expert width is moe_ffn_hidden_size
    meg = load_model({"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_query_groups": 8,
                      "num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 14336, "vocab_size": 32000})
    assert meg.params == spec.params
    with pytest.raises(GpuplanError, match="add top_k"):
        load_model({"layers": 32, "hidden": 4096, "heads": 32, "experts": 8})
    with pytest.raises(GpuplanError, match="n_shared_experts names a shared expert"):
        load_model({"layers": 32, "hidden": 4096, "heads": 32, "experts": 8, "top_k": 2, "n_shared_experts": 1})


@pytest.mark.parametrize("params_json, catalogued", [
    # Meta's params.json as the Llama 3 checkpoints ship it (meta-llama/Meta-Llama-3-70B original/params.json):
    # the FFN from multiple_of and ffn_dim_multiplier (llama/model.py FeedForward) — 28,672 for the 70B
    ({"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "vocab_size": 128256, "multiple_of": 4096,
      "ffn_dim_multiplier": 1.3, "norm_eps": 1e-05, "rope_theta": 500000.0}, "llama-3-70b"),
    ({"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "vocab_size": 128256, "multiple_of": 1024,
      "ffn_dim_multiplier": 1.3, "norm_eps": 1e-05, "rope_theta": 500000.0}, "llama-3-8b"),
    # Llama 2 7B's verbatim (vocab_size -1: the tokenizer's 32,000): no GQA, still Meta's SwiGLU
    ({"dim": 4096, "multiple_of": 256, "n_heads": 32, "n_layers": 32, "norm_eps": 1e-05, "vocab_size": -1},
     "llama-2-7b"),
])
def test_metas_params_json_reads_as_the_released_model(params_json, catalogued):
    spec, ref = load_model(params_json), load_model(catalogued)
    assert (spec.params, spec.ffn) == (ref.params, ref.ffn)


def test_dimensions_with_a_head_width_of_their_own_and_keys_left_unused():
    # Gemma 7B (Gemma Team 2024, Table 1: d_model 3072, 28 layers, 16 heads of head size 256, FFN 24,576 (GeGLU),
    # vocab 256,000, tied): the head width apart from hidden / heads is kept — the catalogue's count exactly
    spec = load_model({"layers": 28, "hidden": 3072, "heads": 16, "head_dim": 256, "ffn": 24576, "vocab": 256000,
                       "tie_word_embeddings": True, "rope_theta": 10000})
    assert (spec.params, spec.head_dim) == (load_model("gemma-7b").params, 256)
    # what the reading does not use is said, not dropped silently
    assert "not used (no bearing on the shape read): rope_theta" in spec.assumed[0]


def test_a_papers_dimensions_with_its_stated_total():
    # Llama 3 70B as its paper's Table 3 gives it (80 layers, model dimension 8,192, FFN 28,672, 64 heads, 8 key/value
    # heads, vocabulary 128,000 — the released 128,256) and its "70B": the dimensions read, the stated total kept
    spec = load_model({"params": 70e9, "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672,
                       "vocab": 128256})
    assert spec.params == 70_000_000_000 and spec.params_formula == load_model("llama-3-70b").params
    assert spec.ffn == 28672 and "params 70,000,000,000 as given" in spec.assumed[-1]
    with pytest.raises(GpuplanError, match="the dimensions contradict the count"):
        load_model({"params": 7e9, "layers": 80, "hidden": 8192, "heads": 64, "ffn": 28672})


def test_a_size_beside_the_base_name_picks_the_catalogued_size_or_nothing():
    from gpuplan.catalog.models import load_model

    # Brown et al. 2020 Table 2.1: GPT-3 Medium, 24 layers x 1024, 16 heads (nominal 350M; the table's shapes 355.9M)
    m = load_model("GPT-3 350M")
    assert (m.name, m.n_layers, m.hidden, m.params) == ("GPT-3 Medium (350M)", 24, 1024, 355_871_744)
    # a size that agrees with the base's is no objection: still the fine-tune reading
    assert load_model("gpt-3 175B finetuned").name == "GPT-3 175B"


@pytest.mark.parametrize(("ref", "mid"), [("Llama 2 7B", "llama-2-7b"), ("llama2_7b", "llama-2-7b"),
                                          ("Llama 3.1 8B", "llama-3.1-8b"), ("GPT-3 1.3B", "gpt3-1.3b"),
                                          ("Gemma 2 2B", "gemma-2-2b"), ("Mixtral 8x7B", "mixtral-8x7b")])
def test_a_version_and_a_size_apart_still_name_the_model(ref, mid):
    from gpuplan.catalog.models import load_model

    assert load_model(ref).name == load_model(mid).name


@pytest.mark.parametrize("ref, mid", [
    ("GPT-3 5B", "gpt3-5b"), ("GPT3-20B (NeMo)", "gpt3-20b"),  # NeMo's GPTConfig5B / GPTConfig20B
    ("MPT-760m (benchmark yaml)", "mpt-760m"), ("MPT 3B", "mpt-3b"),  # llm-foundry's pretraining yamls
])
def test_benchmark_models_as_their_tables_name_them(ref, mid):
    from gpuplan.catalog.models import load_model

    assert load_model(ref).name == load_model(mid).name


def test_a_parameter_count_in_billions_as_a_paper_table_writes_it():
    from gpuplan.catalog.models import load_model

    assert load_model({"params_b": 6.7}).params == 6_700_000_000
    # beside its dimensions the figure is a rounded label: the dimensions count (tests/golden/test_dims_models.py)
    shaped = load_model({"params_b": 6.7, "layers": 32, "hidden": 4096, "heads": 32})
    assert shaped.params == load_model({"layers": 32, "hidden": 4096, "heads": 32}).params
    with pytest.raises(GpuplanError, match="given its parameter count twice|gives its parameter count twice"):
        load_model({"params_b": 7, "params": 7e9})
    with pytest.raises(GpuplanError, match="not a positive number of billions"):
        load_model({"params_b": -1})
