"""Session 24: the A10G's published peak, and torchtune's one-GPU full fine-tune read as its single-device recipe
runs it (a paged bitsandbytes AdamW stepped in backward) where the input leaves the optimizer open."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.models import load_model

TUNE = {"framework": "torchtune", "method": "full", "seq_len": 2048, "tokens": 1e8}


def test_a10g_has_the_peaks_of_its_aws_datasheet():
    # source: NVIDIA A10G datasheet for AWS (2022-02-17): FP32 35, TF32 tensor 35, BF16/FP16 tensor 70 TFLOPS dense
    g = get_gpu("a10g")
    assert (g.peak_flops["bf16"], g.peak_flops["fp16"], g.peak_flops["tf32"]) == (70e12, 70e12, 35e12)
    # 80 SMs x 512 FLOP/clk x 1.71 GHz: GA102's FP32-accumulate rate at GeForce's half speed, not the A10's
    assert g.peak_flops["bf16"] == pytest.approx(80 * 512 * 1.71e9, rel=1e-3)
    assert g.peak_flops["bf16"] < get_gpu("a10").peak_flops["bf16"]
    est = evaluate(make("llama-2-13b", "a10g", 4, training={"method": "lora", "seq_len": 2048},
                        layout={"zero": 3, "micro_batch": 1, "recompute": "full"}))
    assert est.time is not None and est.time.tokens_per_s > 0


def _read(est, field):
    return next(a for a in est.to_json()["assumed"] if a["field"] == field)


@pytest.mark.parametrize(("model", "optimizer", "cls"), [
    # recipes/configs/llama3_1/8B_full_single_device.yaml: bitsandbytes.optim.PagedAdamW8bit, optimizer_in_bwd True
    ("llama-3.1-8b", "adamw-8bit", "PagedAdamW8bit"),
    # recipes/configs/qwen2_5/7B_full_single_device.yaml: bitsandbytes.optim.PagedAdamW, optimizer_in_bwd True
    ("qwen2.5-7b", "adamw", "PagedAdamW"),
    # recipes/configs/mistral/7B_full_low_memory.yaml and llama2/7B_full_low_memory.yaml: PagedAdamW, in backward
    ("mistral-7b", "adamw", "PagedAdamW"), ("llama-2-7b", "adamw", "PagedAdamW"),
])
def test_torchtune_on_one_gpu_runs_its_single_device_recipe(model, optimizer, cls):
    est = evaluate(make(model, "rtx-a6000", 1, training=TUNE, layout={"micro_batch": 2}))
    tr = est.scenario.training
    assert (tr.optimizer, tr.optimizer_impl, tr.optimizer_in_backward) == (optimizer, "paged", True)
    assert tr.global_batch == 2  # one micro-batch per step: the recipe refuses accumulation in backward
    rule = _read(est, "training.optimizer")
    assert rule["value"] == optimizer and cls in rule["rule"] and "full_single_device.yaml" in rule["rule"]
    assert _read(est, "training.optimizer_in_backward")["value"] is True
    # paged states live outside PyTorch's allocator; the gradients are stepped as they come: neither in the peak
    memory = est.to_json()["memory"]
    assert memory["optimizer"] == 0
    assert memory["gradients"] < 0.1 * est.scenario.model.params * 2  # bytes: the largest parameter's, not all


def test_the_recipe_is_only_read_where_the_input_leaves_it_open():
    # the distributed recipe (8B_full.yaml: torch.optim.AdamW fused) on more than one GPU
    tr = evaluate(make("llama-3.1-8b", "h100-sxm", 8, training=TUNE, layout={"micro_batch": 2})).scenario.training
    assert (tr.optimizer, tr.optimizer_in_backward) == ("adamw", False)
    # an optimizer the input names
    tr = evaluate(make("llama-3.1-8b", "rtx-a6000", 1, training={**TUNE, "optimizer": "adamw"},
                       layout={"micro_batch": 2})).scenario.training
    assert (tr.optimizer, tr.optimizer_in_backward) == ("adamw", False) and tr.optimizer_impl != "paged"
    # a batch of several micro-batches: accumulation, so the step is not in backward (torchtune raises otherwise)
    tr = evaluate(make("llama-3.1-8b", "rtx-a6000", 1, training={**TUNE, "global_batch": 16},
                       layout={"micro_batch": 2})).scenario.training
    assert (tr.optimizer, tr.optimizer_impl, tr.optimizer_in_backward) == ("adamw-8bit", "paged", False)
    # LoRA, and the generic stack, keep their optimizer
    for training in ({**TUNE, "method": "lora"}, {**TUNE, "framework": "generic"}):
        tr = evaluate(make("llama-3.1-8b", "rtx-a6000", 1, training=training,
                           layout={"micro_batch": 2})).scenario.training
        assert (tr.optimizer, tr.optimizer_in_backward) == ("adamw", False)
    # qwen3/4B_full_single_device.yaml keeps torch.optim.AdamW (fused), not in backward; Gemma 2 has no such config
    for model in ("qwen3-4b", "gemma-2-9b"):
        tr = make(model, "rtx-a6000", 1, training=TUNE, layout={"micro_batch": 2}).training
        assert (tr.optimizer, tr.optimizer_impl, tr.optimizer_in_backward) == ("adamw", "fused", False)


@pytest.mark.parametrize(("gpu", "gpus", "per_node", "given"), [
    # AWS EC2 G5 instance sizes (aws.amazon.com/ec2/instance-types/g5): g5.12xlarge 4x A10G, g5.2xlarge 1, g5.48xlarge 8
    ("g5.12xlarge", 4, 4, False), ("g5.2xlarge", 1, 1, False), ("g5.48xlarge", 8, 8, False),
    # a system named with a count is that many systems: 8 p4d.24xlarge instances of 8 A100s, 16 DGX A100s
    ("8x p4d.24xlarge", 64, 8, True), ("16x DGX A100 640GB", 128, 8, True), ("2x g5.12xlarge", 8, 4, True),
    # NVIDIA DGX-2: 16 V100s; a DGX H100 its GPU's 8
    ("DGX-2", 16, 16, False), ("DGX H100", 8, 8, False),
    # a GPU's own name keeps the count open (one GPU) or as counted
    ("A100", 1, 8, False), ("8x A100", 8, 8, True),
])
def test_a_system_named_without_a_count_is_one_of_it(gpu, gpus, per_node, given):
    sc = make("llama-3.1-8b", gpu)
    assert (sc.hardware.gpus, sc.hardware.gpus_per_node) == (gpus, per_node)
    assert ("hardware.gpus" in sc.given) == given
    said = [w for w in sc.read_as if w[0] == "hardware.gpus"]
    assert bool(said) == (not given and gpu != "A100")  # the count of one system is said, never silent


def test_one_instance_is_what_evaluate_answers_on_and_plan_still_searches():
    from gpuplan.api import plan_scenario as plan

    sc = make("llama-3-70b", "g5.12xlarge", training={"method": "qlora", "seq_len": 2048, "tokens": 1e7},
              layout={"micro_batch": 1})
    est = evaluate(sc)
    assert est.scenario.hardware.gpus == 4 and est.layout.dp == 4
    rule = next(a for a in est.to_json()["assumed"] if a["field"] == "hardware.gpus")
    assert rule["value"] == 4 and "one g5.12xlarge" in rule["rule"]
    res = plan(make("llama-3.1-8b", "g5.12xlarge", training={"method": "lora", "seq_len": 2048, "tokens": 1e7}),
               max_gpus=16)
    result = res.result
    assert result.best is not None and result.searched > 0


@pytest.mark.parametrize(("gpu", "gid", "gpus"), [
    # counts and names as sentences write them: no "x", the word GPUs, a plural
    ("512 A100 80GB", "a100-80gb-sxm", 512), ("512 A100 GPUs", "a100-80gb-sxm", 512), ("64 H100s", "h100-sxm", 64),
    ("8x A100 GPUs", "a100-80gb-sxm", 8), ("A100 80GB GPUs", "a100-80gb-sxm", 1), ("3090s", "rtx-3090", 1),
    # a GPU whose name starts with digits is no count
    ("2080 Ti", "rtx-2080-ti", 1), ("8 RTX 4090", "rtx-4090", 8),
])
def test_counts_and_names_as_sentences_write_them(gpu, gid, gpus):
    sc = make("llama-3.1-8b", gpu)
    assert (sc.hardware.gpu.id, sc.hardware.gpus) == (gid, gpus)


# ---- lora-int8: LoRA over bitsandbytes' LLM.int8 base (transformers' load_in_8bit) --------------------------------

INT8 = {"seq_len": 2048, "tokens": 1e7, "framework": "trl"}


def _est(method, **layout):
    return evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 1, training={**INT8, "method": method},
                         layout={"micro_batch": 2, "recompute": "full", **layout}))


def test_an_8bit_base_keeps_one_byte_per_block_weight():
    from gpuplan.catalog.constants import constant
    from gpuplan.model.params import rank_params

    q8, q4, lo = (_est(m).to_json()["memory"] for m in ("lora-int8", "qlora", "lora"))
    sc = make("llama-3.1-8b", training={**INT8, "method": "lora-int8"})
    block = rank_params(sc.model, 1, 1, 1, 1, 0, sc.training.lora_targets, sc.training.lora_rank).quantizable
    # bitsandbytes Int8Params: 1 B per block weight (CB); QLoRA's NF4 with its quant state nf4_bytes_per_param
    assert q8["weights"] - q4["weights"] == pytest.approx(block * (1 - constant("nf4_bytes_per_param")), abs=1)
    assert q4["weights"] < q8["weights"] < lo["weights"]
    # MatMul8bitLt keeps its input for backward, where a frozen 16-bit or 4-bit linear keeps none
    assert q8["activations"] > q4["activations"]


@pytest.mark.parametrize("training", [
    {"load_in_8bit": True}, {"method": "lora", "load_in_8bit": True},
    {"quantization_bit": 8, "finetuning_type": "lora"}, {"method": "8-bit LoRA"}, {"method": "LoRA int8"},
    {"method": "lora-int8"},
])
def test_the_ways_users_name_an_8bit_base(training):
    assert make("llama-3.1-8b", training=training).training.method == "lora-int8"


def test_an_8bit_base_is_never_sharded_and_its_costing_is_said():
    from gpuplan.api import plan_scenario as plan
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="neither FSDP nor ZeRO-3 shards"):
        evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 8, training={**INT8, "method": "lora-int8"},
                      layout={"zero": 3}))
    res = plan(make("llama-2-13b", "a100-80gb-sxm", 8, training={**INT8, "method": "lora-int8"})).result
    assert res.best is not None and res.best.layout.zero < 3
    est = _est("lora-int8")
    assert any("LLM.int8" in n and "16-bit rate" in n for n in est.to_json()["notes"])
    # the cast, quantization and int32 output of every 8-bit linear, and its weight dequantized in backward
    assert est.time.step_s > _est("lora").time.step_s


# ---- DoRA (PEFT use_dora): the adapted weight rebuilt each forward, the output rescaled by a magnitude -----------

@pytest.mark.parametrize(("training", "method"), [
    ({"method": "dora"}, "lora"), ({"method": "QDoRA"}, "qlora"), ({"method": "DoRA (r=8)"}, "lora"),
    ({"method": "lora", "use_dora": True}, "lora"), ({"adapter": "lora", "peft_use_dora": True}, "lora"),
])
def test_the_ways_users_name_dora(training, method):
    tr = make("llama-3.1-8b", training=training).training
    assert (tr.method, tr.dora) == (method, True)


def test_dora_needs_adapters():
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="training.dora decomposes LoRA adapters"):
        make("llama-3.1-8b", training={"method": "full", "dora": True})


def _dora_memory(dora: bool, dropout: float = 0.0) -> dict:
    return evaluate(make("llama-3.1-8b", "h200", 1, training={"method": "lora", "dora": dora, "seq_len": 2048,
                                                             "tokens": 1e7, "lora_targets": "all-linear",
                                                             "lora_dropout": dropout},
                         layout={"micro_batch": 1, "recompute": "none"})).to_json()["memory"]


def test_dora_keeps_the_magnitudes_inputs_and_holds_the_largest_rebuild():
    # per token and layer, base_result and lora_result in bf16 for every adapted linear: 2 x 2 B x the 43,008 output
    # features of Llama 3.1 8B's seven (q 4,096, k 1,024, v 1,024, o 4,096, gate 14,336, up 14,336, down 4,096);
    # the largest rebuild, the down projection's (d_in 14,336, d_out 4,096) under PEFT's fp32 adapters: the fp32
    # identity 4 x 14,336^2, the 16-bit product and its scaled copy 2 + 2 B and the fp32 weight copy and sum 4 + 4 B
    # per weight
    per_token = 2 * 2 * 43_008
    rebuild = 4 * 14_336**2 + (2 + 2 + 4 + 4) * 14_336 * 4_096
    assert _dora_memory(True)["activations"] - _dora_memory(False)["activations"] == 32 * per_token * 2048 + rebuild
    # with lora_dropout PEFT runs F.linear(dropout(x), weight) again on the weight cast to the fp32 adapters' dtype:
    # autocast's bf16 copy of that weight is kept for the input gradient (a layer's 218,103,808 matrix weights), its
    # input not (a frozen weight's linear keeps none)
    more = _dora_memory(True, 0.05)["activations"] - _dora_memory(True)["activations"]
    lora_more = _dora_memory(False, 0.05)["activations"] - _dora_memory(False)["activations"]
    assert more - lora_more == 32 * 2 * 218_103_808


def test_dora_costs_the_rebuild_every_forward_pass():
    def step(dora, recompute):
        return evaluate(make("llama-3.1-8b", "a100-80gb-sxm", 1, training={"method": "lora", "dora": dora,
                                                                          "seq_len": 2048, "tokens": 1e7},
                             layout={"micro_batch": 1, "recompute": recompute})).time.step_s
    extra_none, extra_full = step(True, "none") - step(False, "none"), step(True, "full") - step(False, "full")
    assert extra_none > 0 and extra_full > extra_none  # the recomputed forward rebuilds the weights again


# ---- preference runs on pairs (DPO, IPO with a reference model; ORPO, SimPO, CPO without) ---------------------------

PREF = {"method": "full", "seq_len": 1024, "tokens": 1e8, "global_batch": 64, "framework": "trl deepspeed"}


def _pref(preference, method="full", **layout):
    training = {**PREF, "method": method, **({"preference": preference} if preference else {})}
    return make("llama-3.1-8b", "h100-sxm", 8, training=training, layout={"micro_batch": 2, "zero": 3, **layout})


def test_a_preference_batch_counts_pairs_and_the_step_runs_their_sequences():
    sc = _pref("DPO")
    # TRL's per_device_train_batch_size counts pairs; concatenated_forward runs the chosen and the rejected together
    assert (sc.training.preference, sc.training.global_batch, sc.layout["micro_batch"]) == ("dpo", 128, 4)
    said = {r[0]: r for r in sc.read_as}
    assert said["training.global_batch"][1] == "64 pairs" and said["layout.micro_batch"][2] == 4
    # a batch given in tokens is sequences already
    sc = make("llama-3.1-8b", training={"preference": "dpo", "seq_len": 1024, "global_batch_tokens": 131072})
    assert sc.training.global_batch == 128
    # LLaMA-Factory: stage dpo with its pref_loss
    assert make("llama-3.1-8b", training={"stage": "dpo"}).training.preference == "dpo"
    assert make("llama-3.1-8b", training={"stage": "dpo", "pref_loss": "simpo"}).training.preference == "simpo"


def test_what_a_preference_run_cannot_be():
    from gpuplan.errors import GpuplanError
    from gpuplan.spec import Training

    with pytest.raises(GpuplanError, match="KTO"):
        make("llama-3.1-8b", training={"stage": "kto"})
    with pytest.raises(GpuplanError, match="whole pairs"):
        Training(preference="dpo", global_batch=63)
    with pytest.raises(GpuplanError, match="'rlhf' is not one of dpo, ipo, orpo, simpo, cpo"):
        make("llama-3.1-8b", training={"preference": "rlhf"})


def test_dpo_keeps_a_reference_model_where_a_full_fine_tune_needs_one():
    mem = {p: evaluate(_pref(p)).to_json()["memory"] for p in ("dpo", "orpo")}
    params = load_model("llama-3.1-8b").params
    # the frozen reference copy in bf16, sharded over the 8 ZeRO-3 ranks as TRL prepares it
    assert mem["dpo"]["weights"] - mem["orpo"]["weights"] == pytest.approx(params * 2 / 8, rel=1e-9)
    # under ZeRO-2 it is whole on every rank
    z2 = {p: evaluate(_pref(p, zero=2)).to_json()["memory"] for p in ("dpo", "orpo")}
    assert z2["dpo"]["weights"] - z2["orpo"]["weights"] == pytest.approx(params * 2, rel=1e-9)
    # LoRA's reference is the base with the adapters off: no copy
    lora = {p: evaluate(_pref(p, "lora")).to_json()["memory"] for p in ("dpo", "orpo")}
    assert lora["dpo"]["weights"] == lora["orpo"]["weights"]


def test_the_reference_forward_costs_time_and_the_search_keeps_pairs_whole():
    from gpuplan.api import plan_scenario as plan

    dpo, orpo = (evaluate(_pref(p)).time.step for p in ("dpo", "orpo"))
    # one more forward over the same sequences: fwd + bwd (1 + 2) becomes 2 + 2, compute only, at most 4/3 slower
    assert orpo.compute_s < dpo.compute_s <= orpo.compute_s * 4 / 3 * 1.001
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={**PREF, "preference": "dpo"})
    res = plan(sc).result
    assert res.best is not None and res.best.layout.micro_batch % 2 == 0


def test_a_preference_answer_echoes_pairs_and_reads_back_the_same():
    from gpuplan.export import export

    est = evaluate(_pref("dpo")).to_json()
    tr, lay = est["scenario"]["training"], est["scenario"]["layout"]
    # answers are inputs: the echo counts pairs as the input did, and the step its sequences
    assert (tr["global_batch"], lay["micro_batch"], tr["preference"]) == (64, 2, "dpo")
    assert est["time"]["tokens_per_step"] == 128 * 1024
    again = evaluate(make(est["scenario"]["model"], "h100-sxm", 8, training=tr, layout=lay)).to_json()
    assert again["time"]["tokens_per_step"] == est["time"]["tokens_per_step"]
    # a DeepSpeed config carries the trainer's pairs, and says so
    ex = export(est, "deepspeed")
    assert '"train_micro_batch_size_per_gpu": 2' in ex.text and any("pairs" in n for n in ex.notes)


@pytest.mark.parametrize(("framework", "preference"), [
    ("TRL DPO", "dpo"), ("TRL DPOTrainer", "dpo"), ("trl (ORPO)", "orpo"), ("Axolotl dpo", "dpo"), ("TRL", None),
])
def test_a_stack_description_names_its_preference_trainer(framework, preference):
    sc = make("llama-3.1-8b", training={"framework": framework, "global_batch": 32})
    assert sc.training.preference == preference
    assert sc.training.global_batch == (64 if preference else 32)  # the description's pairs, as sequences


def test_an_8bit_base_keeps_its_inputs_through_checkpointing_and_steps_fp32_input_gradients():
    from gpuplan.model.activations import ActShape, layer_bytes

    m = load_model("llama-3.1-8b")
    shape = {"s": 2048, "b": 4, "t": 1, "sp": False, "dropout": False, "flash": True, "elem": 2, "linear_in": 2,
             "stream": 4, "inner": 4, "lora_targets": ("q_proj", "v_proj"), "lora_rank": 16}
    int8, nf4 = (layer_bytes(m, 0, ActShape(method=method, **shape), "full") for method in ("lora-int8", "qlora"))
    # MatMul8bitLt's ctx keeps every 8-bit linear's input through non-reentrant checkpointing: the fp32 normed stream
    # for q/k/v and for gate/up (4 x 4,096 each), the heads' bf16 output (2 x 32 x 128), the fp32 product (4 x 14,336)
    assert int8 - nf4 == 2048 * 4 * (4 * 4096 + 2 * 4096 + 4 * 4096 + 4 * 14_336)
    # under the fp32 preparation the input gradients run as fp32 GEMMs: slower than QLoRA's by more than the passes
    q8, q4 = (evaluate(make("llama-3.1-8b", "h100-sxm", 1, training={**INT8, "method": m},
                            layout={"micro_batch": 4, "recompute": "full"})).time.step_s
              for m in ("lora-int8", "qlora"))
    assert q8 > 1.5 * q4


def test_a_preference_runs_logits_as_trl_keeps_them():
    # TRL's selective_log_softmax over the bf16 logits (each row's log-softmax kept), the reference's bf16 logits
    # beside them: 6 B per logit (model/act_parts.py PREFERENCE_LOGIT_BYTES), not the supervised loss' fp32 upcast
    est = evaluate(make("llama-3.1-8b", "h100-sxm", 1, training={"method": "lora", "seq_len": 2048, "tokens": 1e7,
                                                                "global_batch": 16, "preference": "dpo",
                                                                "framework": "trl"}, layout={"micro_batch": 2}))
    assert est.to_json()["memory"]["detail"]["logits"] == 4 * 2048 * 128_256 * 6  # 2 pairs: 4 sequences of 2,048


def test_the_reference_forward_runs_without_the_adapters():
    # TRL runs LoRA's reference as the base with the adapters off (PEFT disable_adapters: base_layer(x) only), so
    # DPO's extra over ORPO is the same with DoRA's costly rebuild as with plain LoRA
    def compute(pref, dora):
        return evaluate(make("llama-3.1-8b", "h100-sxm", 1, training={"method": "lora", "dora": dora,
                                                                     "preference": pref, "seq_len": 2048,
                                                                     "tokens": 1e7, "global_batch": 16},
                             layout={"micro_batch": 2, "recompute": "full"})).time.step.compute_s
    lora, dora = (compute("dpo", d) - compute("orpo", d) for d in (False, True))
    assert lora > 0 and dora == pytest.approx(lora, rel=1e-9)


@pytest.mark.parametrize(("method", "says"), [
    ("freeze", "method full is its upper bound"), ("Freeze tuning", "freeze_trainable_layers"),
    ("ia3", "method lora is the nearest"), ("prefix-tuning", "prefix tuning is not modelled"),
])
def test_a_method_gpuplan_does_not_cost_is_one_clear_error(method, says):
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match=says):
        make("llama-3.1-8b", training={"method": method})
    with pytest.raises(GpuplanError, match="freeze_trainable_layers"):
        make("llama-3.1-8b", training={"finetuning_type": "freeze"})


def test_the_reference_forward_gathers_its_shards_again():
    # ZeRO-3: a forward and a backward gather per micro-batch, and the reference's forward one more (TRL prepares
    # it as its own ZeRO-3 engine): 3 gathers where ORPO makes 2, beside the same gradient reduce-scatter
    dpo, orpo = (evaluate(_pref(p)).time.step.comm_detail["dp_total"] for p in ("dpo", "orpo"))
    assert 1.2 * orpo < dpo < 1.5 * orpo
