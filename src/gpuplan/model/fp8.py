"""What an fp8 recipe costs around each linear layer beyond its matmuls at the fp8 rate: the bytes of
its amax, cast, transpose and rescale kernels per micro-batch (``Fp8Scheme``, ``fp8_cast_bytes``), and
whether the framework's tensor-parallel all-gathers carry fp8 (``fp8_tp_gather``). model/compute.py
times them at memory bandwidth; model/runtime.py sizes the collectives with ``fp8_tp_gather``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuplan.catalog.frameworks import fp8_gathers_tp, fp8_input_cast_shared, fp8_weight_cast_per_step
from gpuplan.catalog.matmul import fp8_cast_share, fp8_scaling_costs
from gpuplan.model.flops import expert_imbalance
from gpuplan.spec import LayerGroup, ModelSpec
from gpuplan.spec.model import LORA_GROUPS, ROW_PARALLEL_LEAVES


@dataclass(frozen=True, slots=True)
class Fp8Scheme:
    """What one fp8 recipe costs around each linear layer, beyond its matmuls at the fp8 rate.

    * ``act`` / ``weight``: bytes read and written per element of a matmul input or output
      gradient / of a weight (both fwd+bwd) by the amax, cast and transpose kernels — torchao's
      roofline of its own kernels per recipe and tensor role (catalog/matmul.json
      ``fp8_scaling_overhead``; the input's first read fused into the producing op under
      torch.compile), Transformer Engine's one read + one write for delayed scaling;
    * ``rescale``: rowwise scaling runs the two backward GEMMs (slow accumulation) as cuBLAS
      tensorwise GEMMs and applies the row and column scales to their output in a separate kernel
      — read and write the bf16 output, 4 B per element (torchao float8_ops.addmm_float8_unwrapped:
      "the rowwise CUTLASS-based kernel is so slow without fast-accum", pytorch/ao PR #1325; the
      extra kernel per GEMM, pytorch/ao issue #2184, 2025);
    * ``grad_weight_hp``: rowwise_with_gw_hp keeps the weight-gradient GEMM in bf16 (torchao
      roofline_utils.get_gemm_time_sympy);
    * ``shard_cast``: where the framework's sequence-parallel all-gathers carry fp8
      (frameworks.json ``fp8_recipe.tp_all_gather``: torchtitan's Float8ColwiseParallel /
      Float8RowwiseParallel for tensorwise only, Transformer Engine's per-tensor and MXFP8
      quantizers), a gathered operand is cast on its 1/tp shard, gathered in fp8 and transposed
      whole for the weight-gradient GEMM; otherwise it is gathered in bf16 and cast whole;
    * ``shared_input``: linears that read the same input (q/k/v, gate/up) cast it once
      (``fp8_recipe.input_cast``: Megatron-Core's fused TE linears; torchtitan under fp8 TP);
    * ``weight_share``: the share of micro-batches that cast the weights (1, or 1/micro-batches
      where the fp8 weights are cached across a step: ``fp8_recipe.weight_cast``);
    * ``act_kernels`` / ``weight_kernels``: the kernels of one operand's / one weight's casts (fwd+bwd), as the
      catalogue lists them — the first fused into the producing op where its read is (torch.compile); each costs
      the GPU's kernel floor beside its bytes (model/compute.py ``fp8_cast_s``);
    * ``share``: the share of the streaming bandwidth the recipe's scaling kernels reach (catalog/matmul.json
      ``cast_bandwidth_share``: torchao's rowwise kernels as torch.compile generates them, measured; 1 elsewhere)."""

    recipe: str
    act: float
    weight: float
    rescale: bool = False
    grad_weight_hp: bool = False
    shard_cast: bool = False
    shared_input: bool = False
    weight_share: float = 1.0
    act_kernels: float = 0.0
    weight_kernels: float = 0.0
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class CastWork:
    """fp8 scaling work on one rank for one micro-batch: (forward, backward) bytes and kernels."""

    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    fwd_kernels: float = 0.0
    bwd_kernels: float = 0.0

    def __add__(self, o: CastWork) -> CastWork:
        return CastWork(self.fwd_bytes + o.fwd_bytes, self.bwd_bytes + o.bwd_bytes, self.fwd_kernels + o.fwd_kernels,
                        self.bwd_kernels + o.bwd_kernels)

RESCALE_BYTES = 4.0  # read and write one bf16 output element
TRANSPOSE_BYTES = 2.0  # read and write one fp8 element


@lru_cache(maxsize=256)
def fp8_scheme(recipe: str, framework: str, compile_: bool, tp: int, sp: bool = True,
               microbatches: int = 1) -> Fp8Scheme:
    costs = {c.role: c for c in fp8_scaling_costs(recipe)}  # catalog/matmul.json has every FP8_RECIPES entry
    act_cost = costs.get("input_or_grad_output") or costs["any"]
    w_cost = costs.get("weight") or costs["any"]
    fused = act_cost.bytes_per_element_fused_with_prev
    joined = compile_ and fused is not None  # the first kernel's read is the producing op's: it runs inside it
    act = fused if joined else act_cost.bytes_per_element
    shard = fp8_tp_gather(framework, recipe, tp, sp)
    return Fp8Scheme(recipe=recipe, act=act, weight=w_cost.bytes_per_element,
                     rescale=recipe == "rowwise", grad_weight_hp=recipe == "rowwise_with_gw_hp",
                     shard_cast=shard, shared_input=fp8_input_cast_shared(framework, shard),
                     weight_share=1 / max(1, microbatches) if fp8_weight_cast_per_step(framework) else 1.0,
                     act_kernels=float(len(act_cost.kernels) - joined), weight_kernels=float(len(w_cost.kernels)),
                     share=fp8_cast_share(recipe))


def fp8_tp_gather(framework: str, recipe: str, tp: int, sp: bool) -> bool:
    """Whether the tensor-parallel all-gathers carry fp8: under sequence parallelism, where the
    framework casts before gathering (catalog.frameworks.fp8_gathers_tp). The casts (``Fp8Scheme``)
    and the collectives (runtime._tp_comm) both follow it."""
    return tp > 1 and sp and fp8_gathers_tp(framework, recipe)


def _operand_cast(elements: float, gathered: bool, tp: int, s: Fp8Scheme) -> tuple[float, float]:
    """(bytes, kernels) to cast one matmul operand of ``elements``: all of it, or — a gathered operand under
    ``shard_cast`` — its 1/tp shard before the fp8 all-gather, then one transpose of the whole for the
    weight-gradient GEMM (_scaled_mm takes its second operand column-major): 1 B read + 1 B written."""
    if gathered and s.shard_cast:
        return elements / tp * s.act + TRANSPOSE_BYTES * elements, s.act_kernels + 1
    return elements * s.act, s.act_kernels


def linear_cast(x_el: float, dy_el: float, w_el: float, row: bool, tp: int, s: Fp8Scheme, input_cast: bool = True,
                train_weight: bool = True) -> CastWork:
    """One linear's fp8 scaling work: its input (``x_el`` elements; skipped where another linear's cast serves it,
    ``input_cast`` False), its output gradient (``dy_el``), its weight (``w_el``, at the recipe's weight share per
    micro-batch, half in forward, half in backward) and, rowwise, the rescale of the input-gradient and (training the
    weight) weight-gradient outputs. ``row``: row-parallel — the gathered operand is the output gradient, else the
    input (``_operand_cast``)."""
    x_b, x_k = _operand_cast(x_el, not row, tp, s) if input_cast else (0.0, 0.0)
    dy_b, dy_k = _operand_cast(dy_el, row, tp, s)
    w_b, w_k = w_el * s.weight * s.weight_share / 2, s.weight_kernels * s.weight_share / 2
    out = CastWork(x_b + w_b, dy_b + w_b, x_k + w_k, dy_k + w_k)
    if s.rescale:  # the grad_input (x-sized) and, training the weight, grad_weight outputs: one kernel each
        out += CastWork(bwd_bytes=RESCALE_BYTES * (x_el + (w_el if train_weight else 0.0)),
                        bwd_kernels=1.0 + train_weight)
    return out


def fp8_cast_bytes(m: ModelSpec, lg: LayerGroup, tokens: float, tp: int, ep: int, s: Fp8Scheme,
                   method: str = "full", etp: int | None = None) -> tuple[float, float]:
    """(forward, backward) bytes of one layer's fp8 casts (and rowwise rescales) for one micro-batch on one rank
    (``fp8_cast_work``)."""
    w = fp8_cast_work(m, lg, tokens, tp, ep, s, method, etp)
    return w.fwd_bytes, w.bwd_bytes


def fp8_cast_work(m: ModelSpec, lg: LayerGroup, tokens: float, tp: int, ep: int, s: Fp8Scheme,
                  method: str = "full", etp: int | None = None) -> CastWork:
    """One layer's fp8 casts (and rowwise rescales) for one micro-batch
    on one rank. The attention output and second MLP projections are row-parallel under tensor
    parallelism (``ROW_PARALLEL_LEAVES``, Megatron's RowParallelLinear, Shoeybi et al. 2019 Sec. 3): input
    sharded, output gradient whole (gathered); the others are column-parallel: input whole (gathered), output gradient
    sharded. Expert matrices see the
    busiest rank's routed tokens (tokens · top_k · ``expert_imbalance``). The router (a tiny GEMM)
    is left out. A frozen LoRA/QLoRA base runs no weight-gradient GEMM, so nothing rescales one. Folded experts
    (``etp`` 1, Layout.folded_etp): whole matrices, each rank's sequence-parallel shard of the tokens."""
    out = CastWork()
    cast_inputs: set[tuple[str, int]] = set()
    etp = tp if etp is None else etp
    routed = tokens * etp / tp
    busiest = expert_imbalance(routed, m.top_k, ep) if lg.moe else 1.0
    for w in lg.weights:
        if not w.is_matrix or w.group not in LORA_GROUPS:
            continue
        out_f, in_f = w.shape
        row = w.name.rsplit(".", 1)[-1] in ROW_PARALLEL_LEAVES
        if w.group == "expert":
            tok, mats, t = routed * m.top_k * busiest, w.count / ep, etp
        else:
            tok, mats, t = tokens * w.count, w.count, tp
        x_el, dy_el = tok * (in_f / t if row else in_f), tok * (out_f if row else out_f / t)
        shared = not row and s.shared_input and (w.group, in_f) in cast_inputs
        cast_inputs.add((w.group, in_f))
        out += linear_cast(x_el, dy_el, mats * out_f * in_f / t, row, t, s, not shared, method == "full")
    return out
