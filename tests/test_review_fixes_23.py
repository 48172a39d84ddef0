"""Fixes from the session-23 robustness review: layout words as run descriptions write them (ZeRO-Offload and
ZeRO-Infinity beside the stage, DeepSpeed's offload device, "FSDP", "hybrid", Megatron's "uniform"), an unqualified
EFA beside an A100, and ALiBi models under Hugging Face transformers' modelling code."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.errors import GpuplanError


def _layout(**layout):
    sc = make("llama-3.1-8b", "a100-80gb-sxm", 16, training={"framework": "deepspeed"},
              layout={"micro_batch": 1, **layout})
    return sc.layout


@pytest.mark.parametrize(("zero", "offload", "stage", "expected"), [
    # ZeRO-Offload: ZeRO-2 with the optimizer states and step on the CPU (Ren et al. 2021)
    ("ZeRO-Offload", None, 2, "optimizer"),
    # ZeRO-Infinity's CPU case: ZeRO-3 with the parameters offloaded too (Rajbhandari et al. 2021)
    ("ZeRO-Infinity", None, 3, "params"),
    # the offload the user gives wins over the one the stage word names
    ("ZeRO-Infinity", "optimizer", 3, "optimizer"),
    # DeepSpeed's offload_optimizer.device word, a switch, both states named
    (3, "cpu", 3, "optimizer"), (3, True, 3, "optimizer"), (3, False, 3, "none"),
    (3, "optimizer+params", 3, "params"), (3, "Params + Optimizer", 3, "params"),
    # PyTorch FSDP's default strategy is FULL_SHARD; DDP shards nothing
    ("FSDP", None, 3, "none"), ("fsdp2", None, 3, "none"), ("DDP", None, 0, "none"),
])
def test_offload_and_stage_words(zero, offload, stage, expected):
    lay = _layout(zero=zero, **({} if offload is None else {"offload": offload}))
    assert lay["zero"] == stage
    assert lay.get("offload", "none") == expected


def test_hybrid_is_fsdp_hybrid_shard_inside_the_node():
    lay = _layout(zero="hybrid")
    assert (lay["zero"], lay["zero_group"]) == (3, 8)


@pytest.mark.parametrize(("word", "says"), [("nvme", "NVMe offload is not modelled"),
                                            ("sideways", "none of none, optimizer")])
def test_an_offload_word_not_modelled_is_one_clear_error(word, says):
    with pytest.raises(GpuplanError, match=says):
        _layout(zero=3, offload=word)


def test_megatron_uniform_recompute_is_full():
    assert _layout(zero=1, recompute="uniform")["recompute"] == "full"


@pytest.mark.parametrize(("gpu", "word", "fabric"), [
    # AWS p4d/p4de (8 A100): 400 Gbps EFA, 4 x 100; p5 (8 H100): 3,200 Gbps EFAv2 (AWS instance type pages)
    ("a100-80gb-sxm", "efa", "efa-p4d"), ("a100-40gb-sxm", "AWS EFA", "efa-p4d"),
    ("a100-80gb-sxm", "EFA v2", "efa-p5"), ("h100-sxm", "efa", "efa-p5"),
])
def test_an_unqualified_efa_is_that_generation_s(gpu, word, fabric):
    sc = make("llama-3.1-8b", gpu, 16, hardware={"scale_out": word})
    assert sc.hardware.scale_out.id == fabric


@pytest.mark.parametrize(("framework", "given", "attention"), [
    # transformers' BloomAttention has no SDPA or FlashAttention path: the scores are materialized
    ("hf-trainer", None, "eager"), ("trl", None, "eager"),
    ("hf-trainer", "flash", "flash"),  # as given
    ("deepspeed", None, "flash"),      # a stack that need not run transformers' modelling code: its own default
])
def test_alibi_models_under_transformers_attend_eagerly(framework, given, attention):
    training = {"framework": framework, "seq_len": 2048, **({} if given is None else {"attention": given})}
    sc = make("bloom-7b1", "a100-80gb-sxm", 8, training=training)
    assert sc.training.attention == attention


def test_a_rope_model_under_transformers_keeps_its_fused_attention():
    assert make("llama-3.1-8b", "a100-80gb-sxm", 8, training={"framework": "hf-trainer"}).training.attention == "flash"


@pytest.mark.parametrize(("word", "fabric"), [
    # a node's 3.2 Tb/s over its 8 GPUs is 400 Gb/s each: the H100's own network at that rate (AWS p5, Azure ND H100 v5)
    ("3.2 Tbps", "ib-ndr-400g"), ("400 Gb/s", "ib-ndr-400g"), ("400G", "ib-ndr-400g"),
])
def test_a_bare_rate_is_the_gpu_s_own_network_at_that_rate(word, fabric):
    assert make("llama-3.1-8b", "h100-sxm", 16, hardware={"scale_out": word}).hardware.scale_out.id == fabric


def test_a_bare_rate_no_network_of_the_gpu_has_is_one_clear_error():
    with pytest.raises(GpuplanError, match="unknown fabric '200 Gbps'"):
        make("llama-3.1-8b", "h100-sxm", 16, hardware={"scale_out": "200 Gbps"})


def test_pcie_without_a_generation_is_the_card_s_own():
    assert make("llama-3.1-8b", "l40s", 8, hardware={"scale_up": "PCIe"}).hardware.scale_up.id == "pcie4"


def test_a_gpu_counted_per_die_says_so():
    from gpuplan.api import evaluate_scenario

    est = evaluate_scenario(make("llama-3.1-8b", "mi250x", 64, training={"seq_len": 2048, "global_batch": 256}))
    assert any("64 GCDs are 32 boards" in n for n in est.to_json()["notes"])
    est = evaluate_scenario(make("llama-3.1-8b", "h100-sxm", 64, training={"seq_len": 2048, "global_batch": 256}))
    assert not any("GCD" in n for n in est.to_json()["notes"])


@pytest.mark.parametrize(("model", "kind", "module", "layer"), [
    # Mixtral's block: q, k, v, o, two norms and the router dense; 8 experts x (w1, w3, w2) DeepSpeed module hooks
    ("mixtral-8x7b", 0, (31, 7, 24), (1, 1, 1)),
    # DeepSeek-V2-Lite's MoE block: MLA's projections and norm, two norms, router, shared expert; 64 x 3 experts
    ("deepseek-v2-lite", 1, (203, 11, 192), (1, 1, 1)),
])
def test_zero3_gathers_split_dense_from_experts(model, kind, module, layer):
    from gpuplan.model.dp_comm import gather_calls

    lg = make(model, "h100-sxm", 8).model.kinds[kind]
    assert tuple(gather_calls(lg, "module", 1, g) for g in (None, "dense", "expert")) == module
    assert tuple(gather_calls(lg, "layer", 1, g) for g in (None, "dense", "expert")) == layer


def test_zero3_dense_gathers_are_not_cut_into_the_experts_calls():
    # DeepSeek-V2-Lite full SFT, DeepSpeed ZeRO-3 on 8 H100 (the review's case): the dense parameters (attention,
    # shared experts, embeddings) gathered in 11 calls per MoE block, not in the 203 of the experts' modules — whose
    # 0.5 MB messages ran at a fraction of the link: data-parallel time 10.35 s before, 7.02 s
    import gpuplan

    est = gpuplan.evaluate(model="deepseek-v2-lite", gpu="h100-sxm", gpus=8, seq_len=4096, global_batch=64,
                           framework="deepspeed", zero=3, micro_batch=1, recompute="full", tokens=1e9)
    assert 6.5 < est.time.step.comm_detail["dp_total"] < 7.5


@pytest.mark.parametrize(("tp", "per_logit"), [
    # torch/distributed/tensor/parallel/loss.py: zeros_like(x), exp(x), their sum and the saved fp32 log-softmax x —
    # 16 B per local logit at the loss backward (traced: torchtitan 0.2.2 llama3, FSDP2 x TP 8 x 8, fake tensors)
    (8, 16),
    # no tensor parallelism: the aten cross-entropy over the upcast logits, 12 B (the saved output, the NLL and the
    # log-softmax gradients)
    (1, 12),
])
def test_torchtitan_loss_parallel_holds_16_bytes_per_local_logit(tp, per_logit):
    from gpuplan.api import evaluate_scenario

    layout = {"dp": 64 // tp, "tp": tp, "zero": 3, "micro_batch": 2, "recompute": "full"}
    sc = make("llama-3.1-8b", "h100-sxm", 64, training={"framework": "torchtitan", "seq_len": 8192,
                                                         "global_batch": 2 * 64 // tp}, layout=layout)
    logits = evaluate_scenario(sc).memory.peak.logits
    assert logits == 2 * 8192 * 128256 / tp * per_logit


@pytest.mark.parametrize("key", ["use_liger_kernel", "enable_liger_kernel", "liger_kernel"])
def test_liger_switches_as_stacks_write_them(key):
    # the Trainer's TrainingArguments.use_liger_kernel; LLaMA-Factory's ModelArguments.enable_liger_kernel
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"framework": "llama-factory", key: True})
    assert sc.training.kernels == "liger"
