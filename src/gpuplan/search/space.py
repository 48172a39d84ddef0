"""The layout space a plan searches, in one canonical order — for the pruned search and for the
exhaustive one it is tested against (tests/property/test_search_exhaustive.py).

A layout of one GPU type is a split (tp, pp, cp, dp, ep: Calculon-style divisor products, filtered
by the named rules of spec/rules.py), an offload choice, a pipeline schedule, a recompute level, a
(ZeRO stage, hybrid-shard group) and a micro-batch; canonical order is that nesting, outermost first.
  tp   divides the scale-up domain and splits the attention heads (KV heads divide tp or tp divides them)
  pp   divides the layers, a power of two or (at a given GPU count and batch) divides the count, at most 64
  cp   1, or divisors of 16 that divide seq_len when the sequence is ≥ 32k tokens (1 for recurrent mixers)
  dp   divides the global batch; past one node the count is a whole number of nodes
  ep   (MoE) divides the experts and dp×cp
  schedule  1F1B; interleaved with 2 chunks when pp×2 ≤ layers; DualPipe for MoE with even pp
  recompute none, selective-op, full; micro-batch 1, 2, 4, 8, 16 dividing the per-replica batch
  zero 1, 2, hybrid shard (FSDP inside the node, replicas across nodes), 3 — ZeRO-0 only without
       replicas, since ZeRO-1 moves the same bytes and shards the optimizer step
  offload  none; optimizer, then params (ZeRO-3 only), only for a GPU type where nothing fits without
Fields the scenario fixes are kept."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from gpuplan.catalog.refusals import kv_split_refusal
from gpuplan.model.recompute_modules import module_sets
from gpuplan.spec import Hardware, divisors, ep_choices, tp_splits_heads
from gpuplan.spec.hardware import tp_domain
from gpuplan.spec.layout import INTERLEAVED_DEFAULT_CHUNKS, recompute_mode_of
from gpuplan.spec.rules import dualpipe_count_ok
from gpuplan.spec.scenario import Scenario

MICRO_BATCHES = (1, 2, 4, 8, 16)
MAX_PP = 64  # pipeline stages the search proposes (published runs: ≤ 16; Llama 3 405B used 16)
LONG_SEQUENCE = 32768  # from this sequence length on, context parallelism is searched
CP_DEGREES = (1, 2, 4, 8, 16)
RECOMPUTES = ("none", "selective-op", "full")
# virtual stages the search tries: 2 (4 and 8 were tried on 2026-12-03 — the corpus's searched rows then came out
# faster than published, the refit moved comm_interference from 0.63 to 0.32 and the leave-one-source-out median from
# 10.6 % to 11.2 % (GPU-hours 10.0 % to 18.5 %), for 1.6x the plan time: not kept)
INTERLEAVED_CHUNKS = (2,)
OFFLOAD_PASSES = (("none",), ("optimizer", "params"))  # the second only where the first fits nothing


class Split(NamedTuple):
    """The parallel degrees of a layout (a named tuple: its hash and equality are the tuple's, in C — the search
    keys its tables on splits millions of times a plan)."""

    tp: int
    pp: int
    cp: int
    dp: int
    ep: int

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


Shard = tuple[int, int | None]  # (ZeRO stage, hybrid-shard group or None)


def degrees(sc: Scenario, domain: int) -> tuple[list[int], list[int], list[int]]:
    """The tp, pp and cp degrees the search tries (the scenario's own where it fixes them); tp within
    ``domain`` GPUs (``tp_domain``)."""
    m, fixed, seq = sc.model, sc.layout, sc.training.seq_len
    tps = [fixed["tp"]] if "tp" in fixed else [t for t in divisors(domain) if tp_splits_heads(m, t)
                                               and not kv_split_refusal(sc.training.framework, m, t)]
    no_pipeline = sc.training.optimizer_in_backward or sc.training.activation_offloading  # spec/rules.py
    # a given count's divisors as pipeline degrees only where the batch is given too: a default batch is moved to one
    # the count splits (search/batch.py) rather than forcing a pipeline on a model that needs none
    fixed_count = "hardware.gpus" in sc.given and "training.global_batch" in sc.given
    count = sc.hardware.gpus if fixed_count else None
    pps = [fixed["pp"]] if "pp" in fixed else ([1] if no_pipeline else pp_degrees(m.n_layers, count))
    cps = [fixed["cp"]] if "cp" in fixed else \
        ([c for c in CP_DEGREES if seq % c == 0] if seq >= LONG_SEQUENCE and m.ssm is None else [1])
    return tps, pps, cps


def pp_degrees(n_layers: int, count: int | None = None) -> list[int]:
    """Pipeline degrees the search proposes: the divisors of the layer count (even stages) and the powers of two up
    to half of it (uneven stages of two layers or more, the remainder on the middle ones: model/pipeline.py
    ``chunk_sizes``) — what power-of-two GPU
    counts need when the layer count is not one: Llama 3 405B's 126 layers on 16 stages (Dubey et al. 2024,
    Sec. 3.3.2), DeepSeek-V3's 61 on 16 (arXiv:2412.19437, Sec. 3.2). At a given GPU ``count`` and a given batch,
    its divisors up to half the layers too: a count with an odd factor and a power-of-two batch needs the factor in
    the pipeline —
    BLOOM's 70 layers on 12 stages of 384 A100s with a batch of 2,048 (Le Scao et al. 2022, arXiv:2211.05100,
    Sec. 3.4.2: tp 4, pp 12, dp 8)."""
    twos = {1 << k for k in range(MAX_PP.bit_length()) if 2 << k <= n_layers}  # two layers a stage or more
    own = {p for p in divisors(count) if 2 * p <= n_layers} if count else set()
    return sorted(p for p in set(divisors(n_layers)) | twos | own if p <= MAX_PP)


def splits(sc: Scenario, hw: Hardware, counts: Callable[[int], bool], max_gpus: int,
           global_batch: int) -> Iterator[Split]:
    """The parallel splits of one GPU type, in canonical order; micro-batch and the rest come later."""
    m, fixed, per_node = sc.model, sc.layout, hw.gpus_per_node
    seq = sc.training.seq_len
    tps, pps, cps = degrees(sc, tp_domain(hw))
    dps = [fixed["dp"]] if "dp" in fixed else divisors(global_batch)
    for tp in tps:
        for pp in pps:
            for cp in cps:
                for dp in dps:
                    n = dp * tp * pp * cp
                    if n > max_gpus or (n > per_node and n % per_node) or seq % cp or not counts(n):
                        continue
                    for ep in ([fixed["ep"]] if "ep" in fixed else ep_choices(m, dp * cp)):
                        yield Split(tp, pp, cp, dp, ep)


def schedules(sc: Scenario, pp: int) -> list[tuple[str, int]]:
    """(schedule, virtual stages) for a pipeline of ``pp`` stages."""
    fixed = sc.layout
    v = fixed.get("virtual_stages", 1)
    if v > 1:  # virtual stages mean the interleaved schedule, and a pipeline to interleave
        return [("interleaved", v)] if pp > 1 and pp * v <= sc.model.n_layers else []
    if fixed.get("pp_schedule") == "interleaved" and pp > 1:  # the documented default: 2 chunks per stage
        return [("interleaved", INTERLEAVED_DEFAULT_CHUNKS)] if pp * INTERLEAVED_DEFAULT_CHUNKS <= sc.model.n_layers \
            else []
    if "pp_schedule" in fixed or pp == 1:
        return [(fixed.get("pp_schedule", "1f1b"), 1)]
    out = [("1f1b", 1)]
    # interleaved with INTERLEAVED_CHUNKS model chunks per stage, one layer a chunk or more (uneven chunks allowed:
    # Llama 3's 126 layers on 16 stages): the bubble shrinks as 1/v for v× the stage-to-stage sends (model/pipeline.py)
    out += [("interleaved", v) for v in INTERLEAVED_CHUNKS if pp * v <= sc.model.n_layers]
    if sc.model.moe and pp % 2 == 0:  # DualPipe: built for MoE's all-to-all (DeepSeek-V3, Sec. 3.2.1)
        out.append(("dualpipe", 1))
    return out


def shardings(sc: Scenario, split: Split, per_node: int) -> tuple[Shard, ...]:
    """(ZeRO stage, hybrid-shard group) choices of a split; none when a fixed zero_group cannot divide it."""
    fixed = sc.layout
    group = split.dp * split.cp
    zg = fixed.get("zero_group")
    if zg is not None:  # a hybrid-shard group the scenario fixes: only splits it divides
        if group % zg:
            return ()
        return tuple((z, zg) for z in ([fixed["zero"]] if "zero" in fixed else (1, 2, 3))
                     if z < 3 or sc.training.method != "lora-int8")  # an 8-bit base is not sharded (spec/rules.py)
    if "zero" in fixed:
        return ((fixed["zero"], None),)
    if group == 1:
        return ((0, None),)
    if sc.training.method == "lora-int8":  # an 8-bit base is not sharded (spec/rules.py)
        return ((1, None), (2, None))
    # ZeRO-0 is dominated once there are replicas: ZeRO-1 moves the same bytes (reduce-scatter +
    # all-gather = all-reduce), hides them behind forward and backward, shards the optimizer step
    # and needs less memory
    out: list[Shard] = [(1, None), (2, None)]
    node_group = per_node // (split.tp * split.cp) if per_node >= split.tp * split.cp else 1
    if 1 < node_group < group and group % node_group == 0:
        out.append((3, node_group))  # HSDP: shard in the node, replicate across
    out.append((3, None))
    return tuple(out)


def micro_batches(sc: Scenario, split: Split, schedule: str, global_batch: int) -> tuple[int, ...]:
    """Micro-batches that divide the per-replica batch (DualPipe: an even count of them per step, at least 2·pp); with
    the optimizer in backward, the per-replica batch itself (spec/rules.py: no gradient accumulation)."""
    mbs = [sc.layout["micro_batch"]] if "micro_batch" in sc.layout else MICRO_BATCHES
    if sc.training.preference is not None:  # whole pairs (spec/rules.py)
        mbs = [mb for mb in mbs if mb % 2 == 0]
    if sc.training.optimizer_in_backward:
        mbs = [mb for mb in mbs if split.dp * mb == global_batch] if "micro_batch" in sc.layout \
            else [global_batch // split.dp]
    return tuple(mb for mb in mbs if global_batch % (split.dp * mb) == 0
                 and (schedule != "dualpipe" or dualpipe_count_ok(global_batch // (split.dp * mb), split.pp)))


def recomputes(sc: Scenario) -> tuple[str, ...]:
    """The recompute modes searched: the given one, else every mode — and under Megatron-Core for a MoE model its
    selective recomputation by module after none (model/recompute_modules.py ``module_sets``, as
    ``Layout.recompute_mode`` names them; ``recompute_fields`` reads them back)."""
    if "recompute" in sc.layout:
        return (sc.layout["recompute"],)
    by_module = tuple(recompute_mode_of("selective", mods) for mods in module_sets(sc.training.framework, sc.model))
    return (RECOMPUTES[0], *by_module, *RECOMPUTES[1:])


def offload_passes(sc: Scenario) -> tuple[tuple[str, ...], ...]:
    """Offload choices, pass by pass: the scenario's own, else none and — where nothing fits without —
    optimizer, then parameters (a split tries params only where the optimizer offload fits nothing)."""
    fixed: dict[str, Any] = sc.layout
    return ((fixed["offload"],),) if "offload" in fixed else OFFLOAD_PASSES


def one_gpu_whole_batch(split: Split, shard: Shard, global_batch: int, mb: int) -> bool:
    """One GPU without ZeRO, one micro-batch per step: the one layout whose peak may be lower than a
    smaller micro-batch's (model/backward_peak.py ``one_gpu_backward``: gradients do not accumulate beside the
    activations). Everywhere else the peak never falls as the micro-batch grows."""
    return split.world == 1 and shard[0] == 0 and global_batch == mb


def ordered_micro_batches(split: Split, schedule: str, vstages: int, shard: Shard, global_batch: int,
                          mbs: tuple[int, ...]) -> list[int]:
    """The indices of ``mbs`` whose peaks are ordered with one another (not ``own_peak``): all of them without a
    pipeline on more than one GPU."""
    if split.pp == 1 and split.world > 1:
        return list(range(len(mbs)))
    return [j for j, mb in enumerate(mbs) if not own_peak(split, schedule, vstages, shard, global_batch, mb)]


def own_peak(split: Split, schedule: str, vstages: int, shard: Shard, global_batch: int, mb: int) -> bool:
    """A micro-batch whose peak is not ordered with the smaller ones', so the search sizes it on its own:
    ``one_gpu_whole_batch``, and a pipeline with fewer micro-batches per step than its first stage holds
    in flight (model/pipeline.py ``flight_of``: min(cap, m)) — the activations in flight are then the whole
    batch whatever the micro-batch, and the peak can fall as it grows (8B on 8 stages, 16 sequences:
    27.5, 28.6, 28.3 GiB at micro-batch 1, 2, 4). Everywhere else the peak never falls as the
    micro-batch grows: states are fixed and every activation term grows with it."""
    if one_gpu_whole_batch(split, shard, global_batch, mb):
        return True
    if split.pp == 1:
        return False
    if schedule == "gpipe":  # every micro-batch in flight: always the whole batch
        return True
    cap = split.pp + (split.pp - 1) / vstages if schedule == "interleaved" else \
        split.pp + 1 if schedule == "dualpipe" else split.pp
    return global_batch // (split.dp * mb) < cap
