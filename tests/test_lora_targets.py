"""training.lora_targets as users write them: the model's own module names, PEFT's all-linear, a dotted path, and
each framework's word for a kind of linear, read as the model's linears of that kind (spec/model.py
resolve_lora_targets) — never a name that silently adapts nothing."""

from __future__ import annotations

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.errors import GpuplanError
from gpuplan.spec import LORA_TARGETS_ALL


def targets(model: str, value) -> tuple[str, ...]:
    return make(model, training={"method": "lora", "lora_targets": value}).training.lora_targets


@pytest.mark.parametrize("model, value, expected", [
    # Megatron-Core / NeMo 2 / Megatron-Bridge LoRA target_modules: Llama's seven linears
    ("llama-3.1-8b", ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
     ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    # NeMo 1's default (megatron_gpt_finetuning_config.yaml lora_tuning.target_modules)
    ("llama-3.1-8b", ["attention_qkv"], ("q_proj", "k_proj", "v_proj")),
    # torchtune's lora_attn_modules name the attention output output_proj
    ("llama-3.1-8b", ["q_proj", "v_proj", "output_proj"], ("q_proj", "v_proj", "o_proj")),
    # Falcon fuses q, k and v in query_key_value; Phi-3 in qkv_proj, and gate with up in gate_up_proj
    ("falcon-7b", ["q_proj", "v_proj"], ("query_key_value",)),
    ("phi-3-mini", ["q_proj", "k_proj", "v_proj", "o_proj"], ("qkv_proj", "o_proj")),
    ("phi-3-mini", "gate_proj, up_proj, down_proj", ("gate_up_proj", "down_proj")),
    ("gpt2-xl", ["c_attn"], ("c_attn",)),  # the model's own name, as it is
    ("llama-3.1-8b", ["model.layers.0.self_attn.q_proj"], ("q_proj",)),  # PEFT matches the last part
    ("falcon-7b", "all-linear", LORA_TARGETS_ALL),
    ("falcon-7b", ["all-linear"], LORA_TARGETS_ALL),
])
def test_each_framework_s_words_reach_the_model_s_linears(model, value, expected):
    assert targets(model, value) == expected


def test_peft_s_and_axolotl_s_key_is_the_targets():
    for key in ("target_modules", "lora_target_modules"):
        assert make("falcon-7b", training={"method": "lora", key: ["q_proj"]}).training.lora_targets == \
            ("query_key_value",)


def test_names_only_the_routed_experts_hold_are_the_experts_or_an_error():
    # Mixtral's experts are w1/w2/w3: the model's own names, not torchtune's MLP words; Megatron-Core adapts them, and
    # on PEFT (which cannot reach fused experts) nothing would be adapted: an error naming the fix
    sc = make("mixtral-8x7b", training={"method": "lora", "framework": "megatron-core", "lora_targets": ["w1"]})
    assert sc.training.lora_targets == ("w1",)
    with pytest.raises(GpuplanError, match="adapts only Mixtral-8x7B-v0.1's routed experts, which generic's PEFT "
                                           "cannot reach .*: name attention linears too, or all-linear"):
        make("mixtral-8x7b", training={"method": "lora", "lora_targets": ["gate_proj"]})


def test_a_name_read_as_another_is_said():
    sc = make("falcon-7b", training={"method": "lora", "lora_targets": ["q_proj", "v_proj"]})
    (field, given_, value, rule), = [r for r in sc.read_as if r[0] == "training.lora_targets"]
    assert (given_, value) == ("q_proj, v_proj", "query_key_value") and "Falcon-7B's own linears" in rule
    assert not [r for r in make(training={"method": "lora", "lora_targets": ["q_proj"]}).read_as
                if r[0] == "training.lora_targets"]  # Llama's own name: nothing to say


def test_a_name_no_linear_holds_is_an_error_naming_the_model_s_own():
    with pytest.raises(GpuplanError, match="'c_attn' names no linear layer of Falcon-7B, whose blocks' linears are "
                                           "query_key_value, dense, dense_h_to_4h, dense_4h_to_h"):
        targets("falcon-7b", ["c_attn"])


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "falcon-7b", "phi-3-mini", "gpt2-xl", "qwen2.5-7b", "mixtral-8x7b",
                              "bloom-7b1"]),
       names=st.sets(st.sampled_from(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                     min_size=1))
def test_llama_s_names_adapt_something_on_every_model(model, names):
    """Before, Falcon's q_proj adapted nothing: 0 trainable parameters, no adapter memory, no adapter time."""
    try:
        sc = make(model, "h100-sxm", 1, training={"method": "lora", "lora_targets": sorted(names), "tokens": 1e7})
    except GpuplanError as err:  # Mixtral's MLP is its routed experts alone, which PEFT cannot reach: said, not zero
        assert model == "mixtral-8x7b" and not names & {"q_proj", "k_proj", "v_proj", "o_proj"}, err
        return
    assert evaluate(sc).to_json()["model"]["params_trainable"] > 0


def test_lora_s_scaling_is_read_and_set_aside():
    """A PEFT config's lora_alpha (and use_rslora) scales the adapters' output: the same multiply whatever its value."""
    sc = make(training={"method": "lora", "lora_alpha": 32, "use_rslora": True})
    read = {r[0]: r for r in sc.read_as}
    assert read["training.lora_alpha"][2] == "not used" and read["training.use_rslora"][2] == "not used"


@pytest.mark.parametrize("framework, experts", [("generic", False), ("hf-trainer", False), ("deepspeed", False),
                                                ("pytorch-fsdp", False), ("megatron-core", True)])
def test_peft_adapts_no_routed_expert(framework, experts):
    """transformers 5 keeps a MoE block's experts as fused nn.Parameter (MixtralExperts.gate_up_proj, down_proj), which
    PEFT's target_modules cannot wrap (only target_parameters reaches them); Megatron-Core's expert linears take
    adapters. Mixtral's blocks: attention (q, k, v, o) and 8 experts of w1, w2, w3."""
    sc = make("mixtral-8x7b", "h100-sxm", 8, training={"method": "lora", "framework": framework, "tokens": 1e8,
                                                       "lora_targets": "all-linear"})
    trainable = evaluate(sc).to_json()["model"]["params_trainable"]
    m, r = sc.model, sc.training.lora_rank
    attention = m.n_layers * r * (2 * (m.hidden + m.n_heads * m.head_dim) + 2 * (m.hidden + m.n_kv_heads * m.head_dim))
    expert = m.n_layers * m.n_experts * r * 3 * (m.hidden + m.moe_ffn)
    assert trainable == attention + (expert if experts else 0)
    said = [r for r in sc.read_as if r[0] == "training.lora_targets"]
    assert bool(said) != experts  # leaving them out is said
    assert "!experts" not in str(evaluate(sc).to_json()["scenario"]["training"]["lora_targets"])  # a marker, not shown


def test_frozen_routed_experts_keep_no_input():
    """Under PEFT the routed experts are frozen (no adapter): like a frozen dense MLP they keep the activation's tensors
    only — no routed input copy for a weight gradient, no down projection input; Megatron-Core's adapted ones keep the
    full fine-tune's count."""
    from gpuplan.model.activations import ActShape, layer_terms
    from gpuplan.model.kept import lora_shape

    def terms(framework: str) -> dict:
        sc = make("mixtral-8x7b", training={"method": "lora", "framework": framework})
        x = ActShape(s=4096, b=1, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2,
                     **lora_shape(sc.training))
        return layer_terms(sc.model, 0, x)

    peft, megatron = terms("generic"), terms("megatron-core")
    m = make("mixtral-8x7b").model
    # the activation's input (gate) and output, and the up projection's output: 2 B each per routed element
    assert peft["expert_mlp"] == 3 * 2 * 4096 * m.top_k * m.moe_ffn
    assert peft["expert_dispatch"] == 2 * 4096 * m.top_k * m.hidden  # the routed copies out
    assert megatron["expert_mlp"] > peft["expert_mlp"] and megatron["expert_dispatch"] > peft["expert_dispatch"]


def test_no_targets_adapt_nothing():
    from gpuplan.spec.model import NO_EXPERTS, Weight, is_lora_target

    q = Weight(name="layers.0.self_attn.q_proj", shape=(8, 8), group="attention")
    expert = Weight(name="layers.0.experts.w1", shape=(8, 8), group="expert", count=4)
    assert not is_lora_target(q, ()) and is_lora_target(q, ("q_proj", NO_EXPERTS))
    assert is_lora_target(expert, ("w1",)) and not is_lora_target(expert, ("w1", NO_EXPERTS))
