"""QLoRA's 4-bit base weights shard along data parallelism only (FSDP-QLoRA, DeepSpeed ZeRO-3): the stacks that
run QLoRA refuse tensor and context parallelism for it (catalog/frameworks.json ``qlora-no-tensor-parallel``),
``evaluate`` says so with the fix, and ``plan`` proposes only layouts those stacks run."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.frameworks import rule_fields
from gpuplan.errors import GpuplanError
from gpuplan.search.codes import Reason
from gpuplan.spec import Training


def test_evaluate_names_the_rule_and_the_fix():
    with pytest.raises(GpuplanError) as err:
        gpuplan.evaluate(model="llama-3.1-70b", method="qlora", gpu="a100-80gb-sxm", gpus=2, tp=2, seq_len=2048)
    msg = str(err.value)
    assert msg.startswith("generic cannot run this: QLoRA's 4-bit base weights")
    assert "use dp (zero 3 shards the 4-bit weights)" in msg


def test_lora_and_full_fine_tunes_keep_tensor_parallelism():
    for method in ("lora", "full"):
        est = gpuplan.evaluate(model="llama-3.1-8b", method=method, gpu="h100-sxm", gpus=2, tp=2, seq_len=2048)
        assert est.layout.tp == 2


def test_plan_proposes_data_parallel_qlora_and_counts_the_refused():
    p = gpuplan.plan(model="llama-3.1-70b", method="qlora", gpu="a100-80gb-sxm", tokens="20M", seq_len=2048)
    cands = p.result.candidates  # every count's fastest layout that fits
    assert cands and all(c.layout.tp == 1 and c.layout.cp == 1 for c in cands)
    # a 70B QLoRA fits one A100 80GB (4-bit weights ≈ 35 GiB): every count of the node has a candidate
    assert {1, 2, 4, 8} <= {c.gpus for c in cands}
    refused = sum(n for why, n in p.result.rejected.items() if why.reason is Reason.FRAMEWORK)
    assert refused > 0


def test_the_search_reads_only_the_rules_a_job_can_meet():
    # a generic full fine-tune meets no rule: the search checks no refusal per layout
    assert rule_fields("generic", Training(method="full")) == frozenset()
    assert rule_fields("generic", Training(method="qlora")) == {"method", "tp", "cp"}
    assert rule_fields("generic") == {"method", "tp", "cp"}


def test_fsdp_gathers_qlora_weights_as_they_are_stored():
    # FSDP-QLoRA all-gathers the base weights in their 4-bit storage (bitsandbytes bnb_4bit_quant_storage packs
    # NF4 values into a 16-bit dtype FSDP can flatten; docs/source/fsdp_qlora.md), not as bf16: 4 bits per
    # parameter (the quantization constants stay whole on every rank). Where the backward starts, the bf16 LM head
    # (32,000 × 8,192, its own unit, not resharded after the forward) beside the last layer prefetched, which is
    # more than two layers; plus one matrix dequantised to bf16.
    # Llama 2 70B layer: q, o 8192², k, v 8192×1024, gate/up/down 8192×28672, two norms of 8192
    est = gpuplan.evaluate(model="llama-2-70b", gpu="rtx-4090", gpus=2, seq_len=2048, global_batch=16,
                           method="qlora", framework="pytorch-fsdp", tokens=1e7, dp=2, zero=3, micro_batch=1,
                           recompute="full")
    layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    got = est.to_json()["memory"]["detail"]["comm_buffers"]
    head = 32000 * 8192 * 2
    assert head + layer * 0.5 > 2 * layer * 0.5
    assert got == head + layer * 0.5 + 8192 * 28672 * 2


def test_fsdp_qlora_keeps_the_quantization_constants_whole():
    # 4 + 8/64 + 32/(64·256) bits per 4-bit parameter (Dettmers et al. 2023, Sec. 3): the 4 bits shard over the
    # 2 ranks, the 0.127 of the quantization constants do not (bitsandbytes' quant_state is no parameter)
    kw = dict(model="llama-2-70b", gpu="rtx-4090", seq_len=2048, global_batch=16, method="qlora",
              framework="pytorch-fsdp", tokens=1e7, micro_batch=1, recompute="full")
    one, two = (gpuplan.evaluate(**kw, gpus=n, dp=n, zero=3 if n > 1 else 0).to_json()["memory"]["weights"]
                for n in (1, 2))
    quantized = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    # the default adapters: rank 16 on all seven projections, fp32
    adapters = 80 * 16 * (2 * (8192 + 8192) + 2 * (8192 + 1024) + 3 * (8192 + 28672))
    assert one - two == pytest.approx(quantized * 0.5 / 2 + (2 * 32000 * 8192 + 161 * 8192) * 2 / 2
                                      + adapters * 4 / 2, rel=1e-9)


def test_sharded_adapters_compute_in_16_bits_and_read_their_input_itself():
    # FSDP's MixedPrecision casts every parameter, the adapters too, to bf16 for the forward (TRL builds sharded
    # QLoRA's adapters in bf16): PEFT's input cast and autocast copy nothing — below ZeRO-3 each adapter keeps its
    # own bf16 copy of its input (PEFT's fp32 adapters under autocast)
    from gpuplan.model.kept import adapters_in_16_bits, lora_shape
    from gpuplan.spec import Training

    t = Training(method="lora", framework="hf-trainer")
    assert adapters_in_16_bits(t, 3) and not adapters_in_16_bits(t, 2)
    assert not adapters_in_16_bits(Training(method="full"), 3)
    assert (lora_shape(t, True)["lora_copy"], lora_shape(t, True)["lora_weight_cast"]) == (0.0, 0.0)
    assert (lora_shape(t, False)["lora_copy"], lora_shape(t, False)["lora_weight_cast"]) == (2.0, 2.0)
    kw = dict(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, dp=8, seq_len=4096, global_batch=8, method="lora",
              framework="hf-trainer", lora_targets="all-linear", lora_rank=16, tokens=1e7, micro_batch=1,
              recompute="none")
    z2, z3 = (gpuplan.evaluate(**kw, zero=z).to_json()["memory"]["activations_per_microbatch"] for z in (2, 3))
    # per layer: the copies of q, k, v, o, gate, up (hidden wide) and down (ffn wide) against the three inputs shared
    # (the normed stream twice, the MLP product; o's input is attention's output), and the adapters' weight casts
    per_layer = 2 * 4096 * (6 * 4096 + 14336) - 2 * 4096 * (2 * 4096 + 14336)
    casts = 2 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 3 * (4096 + 14336))
    assert z2 - z3 == 32 * (per_layer + casts)


def test_torchao_nf4_shards_its_quantization_constants():
    # torchao's NF4Tensor (torchtune's QLoRA) gathers (quantized_scalers, quantization_factor, quantized_data) under
    # FSDP2: the constants shard with the values; bitsandbytes' quant_state stays whole on every rank
    kw = dict(model="llama-2-70b", gpu="a100-80gb-sxm", gpus=2, dp=2, zero=3, seq_len=2048, global_batch=16,
              method="qlora", precision="bf16", tokens=1e7, micro_batch=1, recompute="full")
    def weights(framework: str, method: str) -> float:
        return gpuplan.evaluate(**{**kw, "method": method}, framework=framework).to_json()["memory"]["weights"]

    # what else the two stacks keep differently (their adapters' dtype) is the same under LoRA on a bf16 base
    other = weights("pytorch-fsdp", "lora") - weights("torchtune", "lora")
    quantized = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert weights("pytorch-fsdp", "qlora") - weights("torchtune", "qlora") - other == pytest.approx(
        quantized * (4.127 / 8 - 0.5) / 2, rel=1e-3)
