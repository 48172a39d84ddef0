"""fp8 scaling recipes: which one a run uses (as given, else the framework's documented default),
what a framework refuses, and what each costs: the cast bytes of torchao's roofline per recipe,
rowwise's rescale kernels, rowwise_with_gw_hp's bf16 weight-gradient GEMM, and fp8 all-gathers
under tensor parallelism where the framework casts before gathering."""

from __future__ import annotations

import pytest
from conftest import make
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.frameworks import fp8_recipe_of
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model.compute import fp8_cast_bytes, fp8_scheme
from gpuplan.model.estimate import Note
from gpuplan.spec import Training

LLAMA8B = load_model("llama-3.1-8b")
BLOCK = LLAMA8B.layers[0]
# Llama-3.1-8B block, per token at tp 1: matmul inputs 6 x 4096 (q, k, v, o, gate, up) + 14336 (down)
# = 38,912 elements; output gradients 4096 + 1024 + 1024 + 4096 + 2 x 14336 + 4096 = 43,008;
# weights 2 x 4096^2 + 2 x 1024 x 4096 + 3 x 14336 x 4096 = 218,103,808 elements
X_EL, DY_EL, W_EL = 38_912, 43_008, 218_103_808


@pytest.mark.parametrize("framework, recipe", [
    # torchtitan docs/float8.md: tensor-wise dynamic scaling by default; Megatron --fp8-recipe default 'delayed'
    ("torchtitan", "tensorwise"), ("megatron-core", "delayed"), ("generic", "tensorwise"),
    ("pytorch-fsdp", "tensorwise"),
])
def test_the_recipe_left_open_is_the_framework_s_documented_default(framework, recipe):
    assert fp8_recipe_of(Training(precision="fp8", framework=framework)) == recipe
    sc = make(training={"precision": "fp8", "framework": framework}, gpus=8)
    assert sc.training.fp8_recipe == recipe
    est = evaluate(sc).to_json()
    rule = "the framework's documented default (frameworks.json fp8_recipe), else tensorwise"
    assert {"field": "training.fp8_recipe", "value": recipe, "rule": rule} in est["assumed"]


def test_a_recipe_without_fp8_is_one_error():
    with pytest.raises(GpuplanError, match="training.fp8_recipe .rowwise. scales fp8 matmuls, but precision is bf16"):
        make(training={"fp8_recipe": "rowwise", "precision": "bf16"})
    # the precision open: the recipe's fp8 training (io/words.py read_words)
    assert make(training={"fp8_recipe": "rowwise"}).training.precision == "fp8"


@pytest.mark.parametrize("framework, recipe, refused", [
    ("megatron-core", "rowwise", "not torchao's rowwise"), ("megatron-core", "rowwise_with_gw_hp", "not torchao"),
    ("torchtitan", "delayed", "delayed scaling is not offered"),
])
def test_a_framework_refuses_the_recipes_it_does_not_offer(framework, recipe, refused):
    sc = make(training={"precision": "fp8", "framework": framework, "fp8_recipe": recipe}, gpus=8)
    with pytest.raises(GpuplanError, match=refused):
        evaluate(sc)


def test_tensorwise_casts_move_torchao_s_roofline_bytes():
    # torchao roofline_utils (catalog/matmul.json fp8_scaling_overhead), torch.compile fusing the
    # first read: 4 B per input / output-gradient element, 8 B per weight element (half per pass)
    s = fp8_scheme("tensorwise", "torchtitan", True, 1)
    assert (s.act, s.weight, s.rescale, s.grad_weight_hp, s.shard_cast) == (4.0, 8.0, False, False, False)
    fwd, bwd = fp8_cast_bytes(LLAMA8B, BLOCK, 8192, 1, 1, s)
    assert fwd == 8192 * X_EL * 4 + W_EL * 4 == 2**31
    assert bwd == 8192 * DY_EL * 4 + W_EL * 4 == 2_281_701_376
    eager = fp8_scheme("tensorwise", "torchtitan", False, 1)  # no compile: the amax read is its own kernel
    assert eager.act == 6.0


def test_rowwise_adds_its_transposes_and_the_backward_rescales():
    # rowwise: 6 B per activation element compiled, 10 B per weight element; the two backward GEMMs'
    # outputs (grad_input: tokens x in, grad_weight: weight-sized) read and written once more, 4 B
    s = fp8_scheme("rowwise", "torchtitan", True, 1)
    fwd, bwd = fp8_cast_bytes(LLAMA8B, BLOCK, 8192, 1, 1, s)
    assert fwd == 8192 * X_EL * 6 + W_EL * 5
    assert bwd == 8192 * DY_EL * 6 + W_EL * 5 + 4 * (8192 * X_EL + W_EL)
    hp = fp8_scheme("rowwise_with_gw_hp", "torchtitan", True, 1)
    assert (hp.act, hp.weight, hp.grad_weight_hp, hp.rescale) == (1.0, 6.0, True, False)


def test_tensorwise_tensor_parallelism_casts_the_sequence_shard():
    # torchtitan Float8 TP: the block input of attention (shared by q, k, v) and of the MLP (gate, up)
    # is cast once (PrepareFloat8ModuleInput: 2 x 4096 per token), and so is a row-parallel output
    # gradient (o, down: 2 x 4096), each on its 1/tp sequence shard (4 B per shard element), gathered
    # in fp8, then transposed whole for the weight-gradient GEMM (_scaled_mm's second operand is
    # column-major): 1 B read + 1 B written per gathered element
    s = fp8_scheme("tensorwise", "torchtitan", True, 8)
    assert s.shard_cast and s.shared_input and not fp8_scheme("rowwise", "torchtitan", True, 8).shard_cast
    assert not fp8_scheme("tensorwise", "torchtitan", True, 8, sp=False).shard_cast  # no gather to carry fp8
    fwd, bwd = fp8_cast_bytes(LLAMA8B, BLOCK, 8192, 8, 1, s)
    assert fwd == 8192 * (2 * 4096 * (4 / 8 + 2) + (4096 + 14336) / 8 * 4) + W_EL / 8 * 4 == 352_321_536
    assert bwd == 8192 * ((4096 + 1024 + 1024 + 2 * 14336) / 8 * 4 + 2 * 4096 * (4 / 8 + 2)) + W_EL / 8 * 4


def test_transformer_engine_casts_a_shared_input_once_and_a_weight_once_per_step():
    # Megatron-Core, delayed scaling (3 B per element: one read, one write), tp 1: fused linear_qkv and
    # linear_fc1 read one quantized input each — inputs 4096 (qkv) + 4096 (o) + 4096 (fc1) + 14336
    # (down) per token; weights cast on the first of 8 micro-batches only (is_first_microbatch)
    s = fp8_scheme("delayed", "megatron-core", False, 1, True, 8)
    assert (s.act, s.weight, s.shared_input, s.weight_share) == (3.0, 3.0, True, 1 / 8)
    fwd, bwd = fp8_cast_bytes(LLAMA8B, BLOCK, 4096, 1, 1, s)
    assert fwd == 4096 * (3 * 4096 + 14336) * 3 + W_EL * 3 / 8 / 2
    assert bwd == 4096 * DY_EL * 3 + W_EL * 3 / 8 / 2


def test_a_frozen_base_rescales_no_weight_gradient():
    # LoRA/QLoRA: the frozen weights get no gradient GEMM, so rowwise rescales grad_input only
    s = fp8_scheme("rowwise", "torchtitan", True, 1)
    full = fp8_cast_bytes(LLAMA8B, BLOCK, 8192, 1, 1, s, "full")[1]
    lora = fp8_cast_bytes(LLAMA8B, BLOCK, 8192, 1, 1, s, "lora")[1]
    assert full - lora == 4 * W_EL


def _step(recipe: str | None, tp: int, precision: str = "fp8", framework: str = "torchtitan", gpu: str = "h100-sxm",
          model: str = "llama-3.1-8b", mb: int = 2):
    tr = {"seq_len": 8192, "global_batch": 8 // tp * mb * 2, "precision": precision, "framework": framework,
          "compile": framework == "torchtitan"}
    if recipe:
        tr["fp8_recipe"] = recipe
    lay = {"tp": tp, "zero": 3 if tp < 8 else 0, "micro_batch": mb, "recompute": "selective-op",
           "sequence_parallel": tp > 1}
    return evaluate(make(model, gpu=gpu, gpus=8, training=tr, layout=lay)).time


def test_tp_all_gathers_carry_fp8_only_where_the_framework_casts_first():
    # torchtitan: tensorwise all-gathers fp8 (half the bytes), rowwise bf16; reduce-scatters bf16 in both:
    # per pass 2 x (AG + RS), so tensorwise's TP time is 3/4 of rowwise's, give or take latency
    tw, rw, bf = (_step(r, 8, p).step.comm_detail["tp"] for r, p in (("tensorwise", "fp8"), ("rowwise", "fp8"),
                                                                  (None, "bf16")))
    assert rw == pytest.approx(bf, rel=1e-9)
    assert 0.74 < tw / rw < 0.80


@settings(max_examples=20, deadline=None)
@given(model=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "llama-3.2-1b"]),
       tp=st.sampled_from([1, 2, 8]), mb=st.sampled_from([1, 2, 4]), gpu=st.sampled_from(["h100-sxm", "b200"]))
def test_rowwise_is_never_faster_than_tensorwise(model, tp, mb, gpu):
    """Rowwise moves more bytes per cast, rescales its backward GEMMs' outputs and gathers in bf16:
    on the same layout it is never faster than tensorwise (torchao docs: 'tensorwise (fastest)')."""
    try:
        tw, rw = _step("tensorwise", tp, model=model, mb=mb, gpu=gpu), _step("rowwise", tp, model=model, mb=mb, gpu=gpu)
    except GpuplanError:
        return  # the layout does not fit this model on this GPU
    assert tw.step_s <= rw.step_s


def test_mxfp8_needs_block_scaled_tensor_cores():
    with pytest.raises(GpuplanError, match="h100-sxm .hopper. has no MX block-scaled tensor cores"):
        _step("mxfp8", 1, gpu="h100-sxm")
    assert _step("mxfp8", 1, gpu="b200").step_s > 0


def test_where_fp8_does_not_pay_a_generic_run_is_bf16_in_time_and_memory():
    # Llama-3.2-1B, 512 tokens, two H100s under ZeRO-1 (16-bit weights beside an fp32 master in both runs; a
    # ZeRO-0 bf16 run would be PyTorch AMP, docs/amp.md): the casts cost more than the fp8 GEMMs save, so the
    # linears run bf16 — step time and memory both those of the bf16 run, and a note says so
    def run(precision):
        return evaluate(make("llama-3.2-1b", gpus=2, training={"seq_len": 512, "global_batch": 8,
                                                              "precision": precision},
                             layout={"micro_batch": 1, "zero": 1}))
    fp8, bf16 = run("fp8"), run("bf16")
    assert not fp8.time.step.fp8_layers
    assert fp8.time.step_s == bf16.time.step_s and fp8.memory.total == bf16.memory.total
    assert Note.FP8_DOES_NOT_PAY in fp8.notes
    # torchtitan runs every block linear in fp8 all the same, and is slower for it here
    titan = _step("tensorwise", 1, model="llama-3.2-1b", mb=1)
    assert titan.step.fp8_layers
