"""Parameters one rank holds: the model's weights after tensor, expert and pipeline parallelism
(before ZeRO sharding), split into the kinds memory and time treat differently."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuplan.model.pipeline import layer_owners
from gpuplan.spec import ModelSpec, Weight
from gpuplan.spec.model import LORA_GROUPS, is_lora_target

TP_SPLIT = {"attention", "mlp", "expert", "shared_expert", "embedding", "head"}


def _local(w: Weight, model: ModelSpec, tp: int, ep: int, etp: int) -> float:
    """Elements of ``w`` on one rank after tensor and expert parallelism (``etp``: tensor parallelism inside an
    expert, Layout.expert_tp)."""
    n = w.numel
    if w.group == "expert":
        return n / ep / etp
    if w.group in TP_SPLIT:
        leaf = w.name.rsplit(".", 1)[-1]
        if leaf in ("k_proj", "v_proj") and model.n_kv_heads < tp:
            n /= model.n_kv_heads  # one K/V head per rank, replicated tp/kv times
        else:
            n /= tp
    return n


@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters one rank of one pipeline stage holds (before ZeRO sharding)."""

    dense: float          # non-expert parameters
    expert: float         # routed-expert parameters
    quantizable: float    # linear weights of the blocks (QLoRA stores these in NF4)
    adapters_dense: float
    adapters_expert: float
    largest_layer: float  # the biggest layer on the rank (ZeRO-3 gathers one at a time)
    largest_matrix: float
    moe_layers: int
    dense_layers: int
    kind_layers: tuple[int, ...] = ()  # blocks of each of the model's kinds (ModelSpec.kinds) on the rank
    sublayers: int = 0                 # their residual branches (LayerGroup.sublayers): tensor parallelism's reductions
    attention_layers: int = 0          # those whose mixer is softmax attention (context parallelism's K/V exchange)
    tables: float = 0.0                # the matrices outside the blocks: embedding (and position) tables, LM head

    @property
    def total(self) -> float:
        return self.dense + self.expert

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


class _Tally:
    """Running sums of one rank's parameters, by kind."""

    def __init__(self, model: ModelSpec, tp: int, ep: int, lora_targets: tuple[str, ...] | None,
                 lora_rank: int, etp: int) -> None:
        self.model, self.tp, self.ep, self.targets, self.rank, self.etp = model, tp, ep, lora_targets, lora_rank, etp
        self.dense = self.expert = self.quant = self.ad_d = self.ad_e = self.big_matrix = self.tables = 0.0

    def add(self, weights: tuple[Weight, ...], times: int, in_block: bool) -> float:
        """Add ``times`` copies of a layer's ``weights``; returns one copy's local elements."""
        layer_total = 0.0
        for w in weights:
            n = _local(w, self.model, self.tp, self.ep, self.etp)
            layer_total += n
            if w.group == "expert":
                self.expert += n * times
            else:
                self.dense += n * times
            if not in_block and w.is_matrix:
                self.tables += n * times
            if in_block and w.is_matrix and w.group in LORA_GROUPS:
                self.quant += n * times
                self.big_matrix = max(self.big_matrix, n / w.count)
            if self.targets is not None and is_lora_target(w, self.targets):
                out_f, in_f = w.shape
                adapters = self.rank * (out_f + in_f) * w.count / \
                    (self.ep * self.etp if w.group == "expert" else self.tp)
                if w.group == "expert":
                    self.ad_e += adapters * times
                else:
                    self.ad_d += adapters * times
        return layer_total


@lru_cache(maxsize=4096)
def rank_params(model: ModelSpec, tp: int, ep: int, pp: int, vstages: int, stage: int,
                lora_targets: tuple[str, ...] | None, lora_rank: int, etp: int | None = None) -> RankParams:
    """One rank's parameters by kind; ``etp``: tensor parallelism inside an expert (None: tp)."""
    owner = layer_owners(model.n_layers, pp, vstages)
    tally = _Tally(model, tp, ep, lora_targets, lora_rank, tp if etp is None else etp)
    largest = 0.0
    moe_layers = dense_layers = sublayers = attention = 0
    kinds = [0] * len(model.kinds)
    index = 0
    for lg in model.layers:
        mine = sum(1 for i in range(index, index + lg.count) if owner[i] == stage)
        index += lg.count
        if mine:
            largest = max(largest, tally.add(lg.weights, mine, True))
            kinds[model.kind_index(lg)] += mine
            sublayers += mine * lg.sublayers
            attention += mine if lg.attends else 0
            if lg.moe:
                moe_layers += mine
            else:
                dense_layers += mine
    if stage == 0:
        tally.add(tuple(w for w in model.embedding), 1, False)
    if stage == pp - 1:
        tally.add(model.head, 1, False)
        if model.tied_embeddings and pp > 1:  # the last stage keeps its own copy of the tied matrix
            tally.add(tuple(w for w in model.embedding if w.group == "embedding"), 1, False)
    # An exact count from safetensors headers (or a given {params: N}) rescales the shapes' count.
    k = model.params / model.params_formula if model.params_formula else 1.0
    return RankParams(tally.dense * k, tally.expert * k, tally.quant * k, tally.ad_d, tally.ad_e, largest * k,
                      tally.big_matrix * k, moe_layers, dense_layers, tuple(kinds), sublayers, attention,
                      tally.tables * k)


def largest_param(model: ModelSpec, tp: int, ep: int) -> float:
    """The largest single parameter on a rank without pipeline stages: the vocabulary table (vocab-parallel over
    tp) or the largest block matrix."""
    return max(model.vocab * model.hidden / tp, rank_params(model, tp, ep, 1, 1, 0, None, 0).largest_matrix)


def trainable_params(model: ModelSpec, method: str, lora_targets: tuple[str, ...], lora_rank: int) -> int:
    """Parameters the optimizer updates: all of them, or the LoRA adapters (PEFT's count)."""
    if method == "full":
        return model.params
    whole = rank_params(model, 1, 1, 1, 1, 0, lora_targets, lora_rank)
    return int(round(whole.adapters_dense + whole.adapters_expert))
