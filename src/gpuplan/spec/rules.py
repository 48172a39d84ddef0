"""ONE table of the rules a parallel layout obeys together (field-by-field checks are in
``check_layout_fields``). Each rule names itself, says which fields it reads, and returns the
one-line message with the fix when broken. The same table checks a ``Layout`` when it is built,
a complete layout against the model and job (``evaluate``), the partial layout a scenario fixes
before ``fit`` and ``plan`` search the rest, and gives the search its filters (``tp_splits_heads``,
``ep_choices``): a layout the search builds is valid by construction of the same rules.

A rule applies when every field it ``needs`` is known; the context fields ``model``, ``seq_len``,
``gpus`` and ``global_batch`` are known when given (torchtitan's ``ParallelDims`` checks the
same products on construction).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec


@dataclass(frozen=True, slots=True)
class Context:
    """What a rule can see: the layout fields known so far, and the model and job when known."""

    lay: Mapping[str, Any]
    model: ModelSpec | None = None
    seq_len: int | None = None
    gpus: int | None = None
    global_batch: int | None = None
    in_backward: bool | None = None  # training.optimizer_in_backward
    act_offload: bool | None = None  # training.activation_offloading
    int8_base: bool | None = None  # training.method lora-int8: a base in bitsandbytes' Int8Params
    pairs: bool | None = None  # training.preference: sequences come in pairs (a chosen and a rejected)

    def known(self, name: str) -> bool:
        if name in ("model", "seq_len", "gpus", "global_batch", "in_backward", "act_offload", "int8_base", "pairs"):
            return getattr(self, name) is not None
        return self.lay.get(name) is not None or (name == "zero_group" and "zero_group" in self.lay)


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    needs: tuple[str, ...]
    broken: Callable[[Context], str | None]


def divisors(n: int) -> list[int]:
    """Ascending divisors of ``n`` in O(√n) (a global batch of 2^20 sequences is a million candidates)."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def tp_splits_heads(model: ModelSpec, t: int) -> bool:
    """tp divides the attention heads, and the KV heads divide tp or tp divides them; a recurrent mixer's heads
    and its groups (Mamba-2's B/C groups, the delta rule's key heads) divide too (Megatron-Core's MambaMixer
    asserts ngroups % tp == 0, its GatedDeltaNet the key and value heads)."""
    ok = model.n_heads % t == 0 and (model.n_kv_heads % t == 0 or t % model.n_kv_heads == 0)
    return ok and (model.ssm is None or (model.ssm.heads % t == 0 and model.ssm.groups % t == 0))


def ep_choices(model: ModelSpec, group: int) -> list[int]:
    """Expert-parallel degrees over ``group`` = dp×cp ranks that divide the experts (1 for a dense model)."""
    return [e for e in divisors(group) if model.n_experts % e == 0] if model.moe else [1]


def _tp_heads(c: Context) -> str | None:
    m, tp = c.model, c.lay["tp"]
    assert m is not None
    if tp > 1 and any(lg.mixer == "mamba1" for lg in m.layers):
        return (f"layout.tp={tp}: {m.name}'s Mamba-1 layers make Δ, B and C from the whole inner width (x_proj), and "
                "no framework catalogued splits them over tensor-parallel ranks (Megatron-Core's MambaMixer is "
                "Mamba-2): use tp 1 (data, ZeRO/FSDP and pipeline parallelism are)")
    if m.n_heads % tp:
        return (f"layout.tp={tp} does not divide the {m.n_heads} attention heads of {m.name}: "
                f"use a tp that divides {m.n_heads}")
    if m.n_kv_heads % tp and tp % m.n_kv_heads:
        return (f"layout.tp={tp} and the {m.n_kv_heads} key/value heads of {m.name} do not divide either way: "
                f"use a tp that divides {m.n_kv_heads} or a multiple of it")
    if not tp_splits_heads(m, tp):
        assert m.ssm is not None
        return (f"layout.tp={tp} does not divide the recurrent layers' {m.ssm.heads} heads and {m.ssm.groups} "
                f"groups of {m.name}: use a tp that divides {math.gcd(m.ssm.heads, m.ssm.groups)}")
    return None


def _chunks(c: Context) -> str | None:
    m = c.model
    assert m is not None
    stages = c.lay.get("pp", 1) * c.lay.get("virtual_stages", 1)
    if stages > m.n_layers:
        return (f"layout pp×virtual_stages = {stages} is more than the {m.n_layers} layers of {m.name}: "
                f"use at most {m.n_layers} pipeline chunks")
    return None


def _world(c: Context) -> str | None:
    lay = c.lay
    world = lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"]
    if world != c.gpus:
        return (f"layout dp×tp×pp×cp = {lay['dp']}×{lay['tp']}×{lay['pp']}×{lay['cp']} = {world} but hardware.gpus "
                f"= {c.gpus}: make the product equal the GPU count (or omit dp to derive it)")
    return None


def _zero_group_divides(c: Context) -> str | None:
    zg, group = c.lay["zero_group"], c.lay["dp"] * c.lay["cp"]
    if zg is not None and (group % zg or zg > group):
        return f"layout.zero_group={zg} must divide dp×cp = {group}"
    return None


def _absent_modules(c: Context) -> str | None:
    """A recompute module naming a part the model lacks (Megatron-Core refuses mla_up_proj without multi-latent
    attention; the MoE modules recompute nothing in a dense model)."""
    m = c.model
    assert m is not None
    lacks = {"mla_up_proj": not m.kv_lora_rank, "moe_act": not m.n_experts, "moe": not m.n_experts,
             "shared_experts": not m.shared_ffn}
    missing = [mod for mod in c.lay["recompute_modules"] if lacks.get(mod)]
    if not missing:
        return None
    what = {"mla_up_proj": "multi-latent attention", "moe_act": "experts", "moe": "experts",
            "shared_experts": "shared experts"}
    return (f"layout.recompute_modules names {missing[0]}, but {m.name} has no {what[missing[0]]}: drop it "
            "(core_attn, layernorm and mlp apply to any model)")


def dualpipe_count_ok(micro_batches: int, pp: int) -> bool:
    """Whether DualPipe runs ``micro_batches`` per step on ``pp`` stages: an even count, at least 2·pp
    (deepseek-ai/DualPipe dualpipe/dualpipe.py DualPipe.step's assertion)."""
    return micro_batches % 2 == 0 and micro_batches >= 2 * pp


def _msg(cond: Callable[[Context], bool], text: Callable[[Context], str]) -> Callable[[Context], str | None]:
    return lambda c: text(c) if cond(c) else None


def _name(c: Context) -> str:
    return c.model.name if c.model is not None else "the model"


RULES: tuple[Rule, ...] = (
    Rule("sequence parallel needs tp", ("sequence_parallel", "tp"), _msg(
        lambda c: c.lay["sequence_parallel"] and c.lay["tp"] == 1,
        lambda c: "layout.sequence_parallel needs tp > 1: set tp or drop sequence_parallel")),
    Rule("async tp needs sequence parallel", ("tp_overlap",), _msg(
        lambda c: c.lay["tp_overlap"] and (c.lay.get("tp") == 1 or c.lay.get("sequence_parallel") is False),
        lambda c: "layout.tp_overlap (async tensor parallelism) needs tp > 1 with sequence_parallel: "
                  "set both or drop tp_overlap")),
    Rule("expert overlap needs expert parallelism", ("ep_overlap",), _msg(
        lambda c: c.lay["ep_overlap"] and c.lay.get("ep") == 1,
        lambda c: "layout.ep_overlap (expert all-to-all under compute) needs ep > 1: set ep or drop ep_overlap")),
    Rule("interleaving needs virtual stages", ("pp_schedule", "virtual_stages", "pp"), _msg(
        lambda c: c.lay["pp_schedule"] == "interleaved" and c.lay["pp"] > 1 and c.lay["virtual_stages"] == 1,
        lambda c: "layout.pp_schedule interleaved needs virtual_stages ≥ 2 (model chunks per stage): give "
                  "virtual_stages, or leave it out for the default 2")),
    Rule("virtual stages need interleaving", ("virtual_stages",), _msg(
        lambda c: c.lay["virtual_stages"] > 1 and c.lay.get("pp_schedule", "interleaved") != "interleaved",
        lambda c: "layout.virtual_stages > 1 needs pp_schedule: interleaved")),
    # DeepSeek-V3 (Liu et al. 2024, arXiv:2412.19437, Sec. 3.2.1): "DualPipe only requires that
    # the pipeline stages and micro-batches be divisible by 2"
    Rule("dualpipe needs an even pipeline", ("pp_schedule", "pp"), _msg(
        lambda c: c.lay["pp_schedule"] == "dualpipe" and (c.lay["pp"] < 2 or c.lay["pp"] % 2),
        lambda c: f"layout.pp_schedule dualpipe needs an even pp ≥ 2 (got pp={c.lay['pp']}): "
                  "each rank holds the mirrored stages i and pp−1−i")),
    # deepseek-ai/DualPipe dualpipe/dualpipe.py DualPipe.step (030ce432): assert num_chunks > 0 and
    # num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    Rule("dualpipe needs an even micro-batch count of at least 2·pp",
         ("pp_schedule", "global_batch", "dp", "micro_batch", "pp"), _msg(
             lambda c: c.lay["pp_schedule"] == "dualpipe" and not dualpipe_count_ok(
                 c.global_batch // (c.lay["dp"] * c.lay["micro_batch"]), c.lay["pp"]),  # type: ignore[operator]
             lambda c: "layout.pp_schedule dualpipe feeds half the micro-batches from each end of the pipeline and "
                       "needs at least two per stage: global_batch / (dp×micro_batch) must be even and ≥ 2·pp (got "
                       f"{c.global_batch // (c.lay['dp'] * c.lay['micro_batch'])} for pp={c.lay['pp']}): "  # type: ignore[operator]
                       "raise global_batch or lower micro_batch")),
    Rule("recompute every k-th block needs full recompute", ("recompute_every", "recompute"), _msg(
        lambda c: c.lay["recompute_every"] > 1 and c.lay.get("recompute", "none") != "full",
        lambda c: f"layout.recompute_every={c.lay['recompute_every']} recomputes every k-th block in full: "
                  "set recompute: full, or drop recompute_every")),
    Rule("recompute modules need selective recompute", ("recompute_modules", "recompute"), _msg(
        lambda c: bool(c.lay["recompute_modules"]) and c.lay["recompute"] != "selective",
        lambda c: f"layout.recompute_modules ({', '.join(c.lay['recompute_modules'])}) name what selective "
                  f"recomputation recomputes (Megatron-Core --recompute-granularity selective), not "
                  f"{c.lay['recompute']}: set recompute: selective, or drop recompute_modules")),
    Rule("recompute modules the model has", ("recompute_modules", "model"), _absent_modules),
    Rule("whole-moe recompute without expert overlap", ("recompute_modules", "ep_overlap"), _msg(
        lambda c: "moe" in c.lay["recompute_modules"] and bool(c.lay["ep_overlap"]),
        lambda c: "layout.recompute_modules moe replays the MoE layer's dispatch and combine, which Megatron-Core "
                  "cannot run beside expert-parallel overlap: drop moe (moe_act recomputes the experts' activation "
                  "only) or set ep_overlap: false")),
    Rule("hybrid shard needs zero", ("zero_group", "zero"), _msg(
        lambda c: c.lay["zero_group"] is not None and c.lay["zero"] == 0,
        lambda c: "layout.zero_group (hybrid shard) needs zero 1, 2 or 3")),
    Rule("parameter offload needs zero 3", ("offload", "zero"), _msg(
        lambda c: c.lay["offload"] == "params" and c.lay["zero"] != 3,
        lambda c: "layout.offload: params needs zero 3 (parameters are offloaded shard by shard)")),
    Rule("degrees multiply to the GPU count", ("dp", "tp", "pp", "cp", "gpus"), _world),
    Rule("tp splits the heads", ("tp", "model"), _tp_heads),
    Rule("pipeline chunks within the layers", ("model",), _chunks),
    Rule("ep needs experts", ("ep", "model"), _msg(
        lambda c: c.lay["ep"] > 1 and not c.model.moe,  # type: ignore[union-attr]
        lambda c: f"layout.ep={c.lay['ep']} but {_name(c)} has no experts: set ep: 1")),
    Rule("ep divides the experts", ("ep", "model"), _msg(
        lambda c: c.model.moe and c.model.n_experts % c.lay["ep"] != 0,  # type: ignore[union-attr]
        lambda c: f"layout.ep={c.lay['ep']} does not divide the {c.model.n_experts} experts of "  # type: ignore
                  f"{_name(c)}: use a divisor")),
    Rule("ep divides dp×cp, or tp×dp×cp folded", ("ep", "dp", "cp", "tp"), _msg(
        lambda c: (c.lay["dp"] * c.lay["cp"]) % c.lay["ep"] != 0
        and (c.lay["tp"] == 1 or (c.lay["tp"] * c.lay["dp"] * c.lay["cp"]) % c.lay["ep"] != 0),
        lambda c: f"layout.ep={c.lay['ep']} must divide dp×cp = {c.lay['dp'] * c.lay['cp']} (experts are spread "
                  f"over data-parallel ranks), or tp×dp×cp = {c.lay['tp'] * c.lay['dp'] * c.lay['cp']} (MoE parallel "
                  "folding: expert tensor parallel 1)")),
    Rule("etp is 1 or tp", ("etp", "tp"), _msg(
        lambda c: c.lay["etp"] not in (1, c.lay["tp"]),
        lambda c: f"layout.etp={c.lay['etp']}: the experts' tensor parallelism is modelled as 1 (Megatron-Core MoE "
                  f"parallel folding: experts whole, ep over tp×dp×cp) or tp = {c.lay['tp']} (experts split like the "
                  "attention): set one of them, or leave etp open")),
    Rule("etp = tp needs ep to divide dp×cp", ("etp", "ep", "dp", "cp", "tp"), _msg(
        lambda c: c.lay["etp"] == c.lay["tp"] > 1 and (c.lay["dp"] * c.lay["cp"]) % c.lay["ep"] != 0,
        lambda c: f"layout.etp = tp = {c.lay['tp']} splits the experts like the attention, so layout.ep="
                  f"{c.lay['ep']} must divide dp×cp = {c.lay['dp'] * c.lay['cp']}: set etp: 1 (MoE parallel folding) "
                  "or an ep that divides dp×cp")),
    Rule("context parallelism needs attention mixers", ("cp", "model"), _msg(
        lambda c: c.lay["cp"] > 1 and c.model.ssm is not None,  # type: ignore[union-attr]
        lambda c: f"layout.cp={c.lay['cp']}: context parallelism over {_name(c)}'s recurrent (Mamba / linear-"
                  "attention) layers is not modelled: use cp 1 (tensor, pipeline and data parallelism are)")),
    Rule("cp divides the sequence", ("cp", "seq_len"), _msg(
        lambda c: c.seq_len % c.lay["cp"] != 0,  # type: ignore[operator]
        lambda c: f"layout.cp={c.lay['cp']} does not divide seq_len={c.seq_len}")),
    Rule("sequence parallel divides the sequence", ("sequence_parallel", "tp", "seq_len"), _msg(
        lambda c: c.lay["sequence_parallel"] and c.seq_len % c.lay["tp"] != 0,  # type: ignore[operator]
        lambda c: f"sequence_parallel: tp={c.lay['tp']} does not divide seq_len={c.seq_len}")),
    Rule("hybrid shard group divides dp×cp", ("zero_group", "dp", "cp"), _zero_group_divides),
    Rule("optimizer in backward takes one micro-batch per step", ("in_backward", "global_batch", "dp", "micro_batch"),
         _msg(lambda c: bool(c.in_backward) and c.global_batch != c.lay["dp"] * c.lay["micro_batch"],
              lambda c: f"training.optimizer_in_backward steps each parameter as its gradient is made (torchtune "
                        f"optimizer_in_bwd), so gradients cannot accumulate over micro-batches: set micro_batch = "
                        f"global_batch / dp = {c.global_batch / c.lay['dp']:g}, or optimizer_in_backward: false")),
    Rule("optimizer in backward has no pipeline", ("in_backward", "pp"), _msg(
        lambda c: bool(c.in_backward) and c.lay["pp"] > 1,
        lambda c: f"training.optimizer_in_backward runs without pipeline stages (torchtune's recipes), but "
                  f"layout.pp = {c.lay['pp']}: set pp: 1, or optimizer_in_backward: false")),
    Rule("activation offloading has no pipeline", ("act_offload", "pp"), _msg(
        lambda c: bool(c.act_offload) and c.lay["pp"] > 1,
        lambda c: f"training.activation_offloading runs without pipeline stages (Megatron-Core: 'no support for "
                  f"Pipeline parallelism with CPU offloading'; torchtune has no pipeline), but layout.pp = "
                  f"{c.lay['pp']}: set pp: 1, or activation_offloading: false")),
    Rule("a preference micro-batch holds whole pairs", ("pairs", "micro_batch"), _msg(
        lambda c: bool(c.pairs) and c.lay["micro_batch"] % 2 != 0,
        lambda c: f"layout.micro_batch = {c.lay['micro_batch']} sequences: a preference run's micro-batch holds whole "
                  "pairs, a chosen and a rejected sequence each (TRL's preference collator) — give an even count of "
                  "sequences (a scenario file's micro_batch counts pairs)")),
    Rule("an 8-bit base is not sharded", ("int8_base", "zero"), _msg(
        lambda c: bool(c.int8_base) and c.lay["zero"] >= 3,
        lambda c: f"method lora-int8 keeps the base in bitsandbytes' Int8Params, which neither FSDP nor ZeRO-3 shards "
                  "(FSDP: 'Must flatten tensors with uniform dtype', bitsandbytes issue #1709; 'Integer parameters are "
                  f"unsupported', accelerate issue #1415), but layout.zero = {c.lay['zero']}: set zero 0-2, or method "
                  "qlora (FSDP-QLoRA shards a 4-bit base)")),
    Rule("global batch divides into micro-batches", ("global_batch", "dp", "micro_batch"), _msg(
        lambda c: c.global_batch % (c.lay["dp"] * c.lay["micro_batch"]) != 0,  # type: ignore[operator]
        lambda c: f"training.global_batch={c.global_batch} is not a multiple of dp×micro_batch = "
                  f"{c.lay['dp']}×{c.lay['micro_batch']}: {_batch_fix(c)}")),
)


def _batch_fix(c: Context) -> str:
    """What splits a global batch over the replicas: a micro-batch that divides it, else another batch or fewer
    data-parallel replicas (every framework steps dp × micro-batch × accumulation sequences)."""
    gb, dp, mb = c.global_batch, c.lay["dp"], c.lay["micro_batch"]
    if gb % dp == 0:  # type: ignore[operator]
        return f"choose a micro_batch that divides global_batch / dp = {gb // dp}"  # type: ignore[operator]
    per = dp * mb
    near = sorted({max(per, gb // per * per), -(-gb // per) * per})  # type: ignore[operator]
    return (f"give a global batch that is a multiple of {per} (e.g. {' or '.join(f'{n:,}' for n in near)}), or fewer "
            f"data-parallel replicas — tp, pp or cp over the GPUs, a smaller dp")


def violations(ctx: Context) -> Iterator[tuple[str, str]]:
    """(rule name, message) of every rule that applies to ``ctx`` and is broken, in table order."""
    for rule in RULES:
        if all(ctx.known(n) for n in rule.needs):
            msg = rule.broken(ctx)
            if msg:
                yield rule.name, msg


def check(ctx: Context) -> None:
    """Raise the first broken rule's message as a GpuplanError."""
    broken = next(violations(ctx), None)
    if broken is not None:
        raise GpuplanError(broken[1])
