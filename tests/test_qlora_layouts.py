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
