"""The model an export builds is the model that was planned: Megatron-LM arguments carry the RoPE base and
scaling, GQA, biases, q/k norms, norm epsilon and a vocabulary padding that keeps the model's vocabulary;
a network those arguments cannot state is refused. torchtitan's TOML loads in torchtitan's own
ConfigManager (0.2.2, from the ``export`` extra)."""

from __future__ import annotations

import pytest
from conftest import make
from export_parsers import load_accelerate, load_torchtitan
from test_export import CASES, _case, megatron_parser

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.export import export, megatron_args
from gpuplan.export.to_megatron import vocab_divisor


def _megatron(model: str, tp: int = 1, gpus: int = 8) -> tuple[object, list[str]]:
    sc = make(model, "h100-sxm", gpus, training={"global_batch": 64}, layout={"tp": tp, "pp": 1})
    args, notes = megatron_args(evaluate(sc).to_json(), sc.model)
    return megatron_parser().parse_args(args), notes


def test_llama_3_1_is_llama_3_1_in_megatron():
    # meta-llama/Llama-3.1-8B config.json: rope_theta 500000, rope_scaling llama3 factor 8, rms_norm_eps 1e-5,
    # 8 key/value heads, vocab 128256, untied
    ns, _ = _megatron("llama-3.1-8b", tp=2)
    assert ns.rotary_base == 500000 and ns.use_rope_scaling and ns.rope_scaling_factor == 8.0
    assert ns.position_embedding_type == "rope" and ns.norm_epsilon == 1e-5
    assert ns.group_query_attention and ns.num_query_groups == 8 and ns.swiglu
    assert ns.untie_embeddings_and_output_weights and ns.disable_bias_linear and not ns.add_qkv_bias
    # Megatron pads the vocabulary up to a multiple of divisor × tp: here it stays 128,256
    assert 128256 % (ns.make_vocab_size_divisible_by * 2) == 0 and ns.make_vocab_size_divisible_by == 128


def test_llama_2_has_no_rope_scaling_and_the_default_base():
    ns, _ = _megatron("llama-2-7b")
    assert ns.rotary_base == 10000 and not ns.use_rope_scaling


def test_llama_3_2_keeps_its_own_scaling_factor():
    ns, _ = _megatron("llama-3.2-1b")  # rope_scaling factor 32
    assert ns.use_rope_scaling and ns.rope_scaling_factor == 32.0


def test_qwen_biases_and_norms():
    ns, _ = _megatron("qwen2.5-7b")  # q/k/v biased, o and MLP not; rms_norm_eps 1e-6; rope_theta 1e6
    assert ns.disable_bias_linear and ns.add_qkv_bias and ns.norm_epsilon == 1e-6 and ns.rotary_base == 1000000
    ns, _ = _megatron("qwen3-8b")  # q_norm/k_norm, no biases
    assert ns.qk_layernorm and not ns.add_qkv_bias


def test_gpt2_keeps_learned_positions_and_all_biases():
    ns, _ = _megatron("gpt2", gpus=1)
    assert ns.position_embedding_type == "learned_absolute" and ns.rotary_base is None
    assert not ns.disable_bias_linear and not ns.swiglu


@pytest.mark.parametrize(("vocab", "tp", "divisor"), [(128256, 8, 32), (32000, 8, 32), (50257, 1, 1),
                                                      (151936, 4, 32), (32064, 2, 32), (32000, 1, 128)])
def test_vocab_divisor_keeps_the_vocabulary(vocab, tp, divisor):
    assert vocab_divisor(vocab, tp) == divisor
    assert vocab % (divisor * tp) == 0 or divisor == 1


def test_a_vocabulary_tp_does_not_divide_is_padded_and_said():
    _, notes = _megatron("gpt2", tp=2, gpus=2)  # 50257 is odd: Megatron pads to 50258
    assert any("pads it to 50,258" in n for n in notes)


@pytest.mark.parametrize(("model", "why"), [("mpt-7b", "ALiBi"), ("pythia-6.9b", "in parallel"),
                                            ("gemma-2-2b", "extra norms"), ("opt-6.7b", "relu"),
                                            ("gemma-7b", "GeGLU")])
def test_megatron_refuses_a_network_its_arguments_cannot_build(model, why):
    sc = make(model, "h100-sxm", 8, training={"global_batch": 64}, layout={"tp": 1, "pp": 1})
    with pytest.raises(GpuplanError, match=why):
        export(evaluate(sc).to_json(), "megatron", sc.model)


def test_model_facts_come_from_the_config():
    m = load_model({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
                    "intermediate_size": 1024, "vocab_size": 1000, "rope_theta": 250000.0, "rms_norm_eps": 1e-6,
                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert m.rope_theta == 250000.0 and m.norm_eps == 1e-6 and dict(m.rope_scaling)["rope_type"] == "yarn"
    with pytest.raises(GpuplanError, match="yarn"):  # no pretrain_gpt.py argument for YaRN on a non-MLA model
        sc = make(m, "h100-sxm", 1, training={"global_batch": 8})
        export(evaluate(sc).to_json(), "megatron", m)
    with pytest.raises(GpuplanError, match="rope_theta"):
        load_model({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
                    "intermediate_size": 1024, "vocab_size": 1000, "rope_theta": "big"})


@pytest.mark.parametrize("name", sorted(CASES))
def test_torchtitan_toml_loads_with_torchtitan(name, tmp_path):
    est, model = _case(name)
    ex = export(est, "torchtitan", model)
    job = load_torchtitan(ex.text, tmp_path)
    if job is None:
        pytest.skip("torchtitan (the export extra) is not installed")
    lay = est["scenario"]["layout"]
    assert job.parallelism.tensor_parallel_degree == lay["tp"]
    assert job.parallelism.pipeline_parallel_degree == lay["pp"]
    assert job.parallelism.context_parallel_degree == lay["cp"]
    assert job.training.global_batch_size == est["scenario"]["training"]["global_batch"]
    assert job.training.seq_len == est["scenario"]["training"]["seq_len"]


def test_torchtitan_refuses_an_unknown_key(tmp_path):
    """The check above has teeth: torchtitan's ConfigManager rejects a key its JobConfig lacks."""
    est, model = _case("ddp")
    text = export(est, "torchtitan", model).text.replace("[parallelism]", "[parallelism]\nzero_stage = 2")
    try:
        job = load_torchtitan(text, tmp_path)
    except ValueError as e:
        assert "zero_stage" in str(e)
    else:
        assert job is None, "torchtitan accepted an unknown key"
        pytest.skip("torchtitan (the export extra) is not installed")


@pytest.mark.parametrize("given, recipe", [({}, "tensorwise"), ({"fp8_recipe": "rowwise"}, "rowwise")])
def test_torchtitan_fp8_uses_its_converter(tmp_path, given, recipe):
    # the scenario's recipe, else torchtitan's documented default (tensorwise dynamic scaling)
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"global_batch": 64, "precision": "fp8",
                                                       "framework": "torchtitan", **given},
              layout={"tp": 1, "pp": 1, "zero": 3})
    ex = export(evaluate(sc).to_json(), "torchtitan", sc.model)
    assert ex.config["model"]["converters"] == ["quantize.linear.float8"]
    assert "[quantize.linear.float8]" in ex.text and f'recipe_name = "{recipe}"' in ex.text
    job = load_torchtitan(ex.text, tmp_path)
    if job is not None:
        assert job.quantize.linear.float8.recipe_name == recipe


@pytest.mark.parametrize("given, enable, components", [(True, True, ["model", "loss"]), ("model", True, ["model"]),
                                                        (False, False, ["model", "loss"])])
def test_torchtitan_compiles_what_the_scenario_compiles(tmp_path, given, enable, components):
    # torchtitan 0.2 [compile]: enable (default false), components (default ["model", "loss"]); async TP needs it
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"global_batch": 64, "framework": "torchtitan",
                                                       "compile": given}, layout={"tp": 2, "pp": 1, "zero": 3})
    ex = export(evaluate(sc).to_json(), "torchtitan", sc.model)
    assert ("compile" in ex.config) is enable
    job = load_torchtitan(ex.text, tmp_path)
    if job is not None:
        assert (job.compile.enable, job.compile.components) == (enable, components)


@pytest.mark.parametrize("given", [True, False])
def test_accelerate_compiles_with_inductor_when_the_scenario_compiles(tmp_path, given):
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"global_batch": 64, "framework": "hf-trainer",
                                                       "compile": given}, layout={"zero": 3})
    ex = export(evaluate(sc).to_json(), "accelerate", sc.model)
    cfg = load_accelerate(ex.text, tmp_path)  # `accelerate launch --dynamo_backend` takes the key
    if cfg is None:
        pytest.skip("accelerate (the export extra) is not installed")
    assert (cfg.dynamo_config or {}).get("dynamo_backend") == ("INDUCTOR" if given else None)


# ---- families read since issue 21 --------------------------------------------------------------------
_NEMOTRON = {"model_type": "nemotron", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 48,
             "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 16384, "vocab_size": 256000}


def test_nemotron_is_expressible_in_megatron():
    # megatron/training/arguments.py (_add_network_size_args): --squared-relu "Use squared relu activation instead
    # of default gelu"; TransformerConfig.layernorm_zero_centered_gamma is --apply-layernorm-1p (NeMo's
    # NemotronConfig sets both: activation_func squared_relu, layernorm_zero_centered_gamma True)
    ns, _ = _megatron(_NEMOTRON, tp=2)
    assert ns.squared_relu and not ns.swiglu and ns.apply_layernorm_1p and ns.normalization == "LayerNorm"
    assert ns.rotary_percent == 0.5 and ns.num_query_groups == 8 and ns.kv_channels == 128
    assert ns.disable_bias_linear and ns.untie_embeddings_and_output_weights and ns.window_size is None


def test_sliding_windows_are_written_as_megatron_windows():
    # StarCoder2: every layer within 4096 keys → --window-size 4095,0 (FlashAttention's (left, right))
    sc2 = {"model_type": "starcoder2", "hidden_size": 3072, "num_hidden_layers": 30, "num_attention_heads": 24,
           "num_key_value_heads": 2, "intermediate_size": 12288, "vocab_size": 49152, "sliding_window": 4096}
    ns, _ = _megatron(sc2)
    assert ns.window_size == (4095, 0) and ns.window_attn_skip_freq is None and not ns.swiglu
    # Qwen 2 with use_sliding_window: full below max_window_layers, windowed above — the per-layer list
    qwen = {"model_type": "qwen2", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
            "intermediate_size": 1024, "vocab_size": 1024, "use_sliding_window": True, "sliding_window": 256,
            "max_window_layers": 2}
    ns, _ = _megatron(qwen)
    assert ns.window_size == (255, 0) and ns.window_attn_skip_freq == [0, 0, 1, 1]
    # Cohere 2: three windowed layers, then a full one → --window-attn-skip-freq 4
    spec = load_model({"model_type": "cohere2", "hidden_size": 512, "num_hidden_layers": 8,
                       "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1024})
    assert spec.window_layers == (True, True, True, False) * 2


@pytest.mark.parametrize(("model", "why"), [
    ({"model_type": "cohere", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1024}, "in parallel"),
    ({"model_type": "nemotron", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
      "intermediate_size": 1024, "vocab_size": 1024, "hidden_act": "relu"}, "relu MLP")])
def test_megatron_refuses_parallel_blocks_and_other_activations(model, why):
    # Megatron-Core's TransformerLayer feeds the MLP the attention's residual output; no argument gives both one
    # input (megatron/core/transformer/transformer_layer.py; nothing in arguments.py or TransformerConfig)
    sc = make(model, "h100-sxm", 8, training={"global_batch": 64}, layout={"tp": 1, "pp": 1})
    with pytest.raises(GpuplanError, match=why):
        export(evaluate(sc).to_json(), "megatron", sc.model)
