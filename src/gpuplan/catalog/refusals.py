"""Why a framework cannot run a layout — one question, asked the same way by ``evaluate``, its framework
alternatives, the open-recompute choice, the search and ``export``: the framework's cited ``cannot_run`` rules
(catalog/frameworks.json, ``frameworks.first_refusal``) and, given the model, a tensor parallelism that splits its
key/value heads where the framework shards them by whole heads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.frameworks import first_refusal

__all__ = ["SPLITS_KV_HEADS", "kv_split_refusal", "why_not"]

# Stacks that shard the key/value projections by whole heads over the tensor-parallel ranks, with no replication of
# key/value heads past their count: Megatron-Core's TransformerConfig raises "num_query_groups must be a multiple of
# tensor_model_parallel_size" (megatron/core/transformer/transformer_config.py, __post_init__); torchtitan shards
# wk/wv column-wise (ColwiseParallel) and reshapes each rank's share into whole heads of head_dim. A tp past the
# key/value heads runs elsewhere by replicating them — Megatron-LM of 2020-22 had one key/value head per query head,
# so its multi-query runs are forks' that replicate: BigCode's Megatron-LM (StarCoder, 1 key/value head at tp 4)
# builds the key/value projection as a plain linear on every tensor-parallel rank (bigcode-project/Megatron-LM
# megatron/model/transformer.py ParallelAttention: attention_head_type 'multiquery', key_value = get_linear_layer);
# its grouped-query forks (Megatron-DeepSpeed: num_key_value_heads divided by the tp size) split them by whole heads.
SPLITS_KV_HEADS = frozenset({"megatron-lm", "megatron-core", "torchtitan"})
REPLICATES_ONE_KV_HEAD = frozenset({"megatron-lm"})


def kv_split_refusal(framework: str, model: Any, tp: int) -> str | None:
    """Why ``framework`` cannot run tensor parallelism ``tp`` over ``model``'s key/value heads, or None."""
    kv = model.n_kv_heads
    if framework not in SPLITS_KV_HEADS or tp <= 1 or kv % tp == 0 or (kv == 1 and framework in REPLICATES_ONE_KV_HEAD):
        return None
    return (f"{framework} cannot run this: layout.tp={tp} splits the {kv} key/value heads of {model.name} — it shards "
            "the key/value projections by whole heads over the tensor-parallel ranks (Megatron-Core: "
            "'num_query_groups must be a multiple of tensor_model_parallel_size') and replicates none: use a tp "
            f"that divides {kv}")


def why_not(framework: str, layout_fields: Mapping[str, Any], training: Any, model: Any = None) -> str | None:
    """Why ``framework`` cannot run this layout for this job (its first cited reason), or None; with ``model``,
    also a tp that splits the model's key/value heads (``kv_split_refusal``)."""
    rule = first_refusal(framework, layout_fields, training)
    if rule is not None:
        return f"{framework} cannot run this: {rule.why}"
    return kv_split_refusal(framework, model, layout_fields.get("tp", 1)) if model is not None else None
