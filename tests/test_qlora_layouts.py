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
    # NF4 values into a 16-bit dtype FSDP can flatten; docs/source/fsdp_qlora.md), not as bf16: the layer in use
    # and the prefetched one at the QLoRA paper's 4.127 bits per parameter, plus one matrix dequantised to bf16.
    # Llama 2 70B layer: q, o 8192², k, v 8192×1024, gate/up/down 8192×28672, two norms of 8192
    est = gpuplan.evaluate(model="llama-2-70b", gpu="rtx-4090", gpus=2, seq_len=2048, global_batch=16,
                           method="qlora", framework="pytorch-fsdp", tokens=1e7, dp=2, zero=3, micro_batch=1,
                           recompute="full")
    layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    nf4 = 4.127 / 8  # Dettmers et al. 2023, Sec. 3: 4 + 8/64 + 32/(64·256) bits
    got = est.to_json()["memory"]["detail"]["comm_buffers"]
    assert got == pytest.approx(2 * layer * nf4 + 8192 * 28672 * 2, rel=1e-4)
