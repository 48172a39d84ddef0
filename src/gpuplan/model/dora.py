"""DoRA (Liu et al. 2024, "DoRA: Weight-Decomposed Low-Rank Adaptation", arXiv:2402.09353) as PEFT runs it
(``LoraConfig(use_dora=True)``; peft/tuners/lora/dora.py ``DoraLinearLayer.forward``): beside a LoRA adapter's work,
every adapted linear's forward (and its recomputation) rebuilds the adapted weight to take its row norms —

* ``x_eye = torch.eye(d_in, dtype=x.dtype)``; ``lora_weight = lora_B(lora_A(x_eye)).T`` — an identity in the
  adapters' input dtype (fp32 for PEFT's fp32 adapters) through both adapter GEMMs (d_in·d_in·r and d_in·r·d_out
  multiply-adds, their operands cast to 16 bits under autocast);
* ``weight = dequantize_module_weight(base).to(x.dtype)``; ``norm(weight + scaling * lora_weight, dim=1)`` — the base
  weight copied to that dtype, the scaled product added and reduced: a few passes over d_out·d_in elements, detached
  (Sec. 4.3: no gradient), all of it held at once by the largest module (the working set below);
* the output ``(m / norm - 1) * base_result + m / norm * lora_result * scaling``: elementwise over d_out per token,
  keeping ``base_result`` and ``lora_result`` for the magnitude's gradient; with ``lora_dropout`` > 0 PEFT computes
  ``base_result`` again from the dropped input, ``F.linear(x, weight)`` — a whole base GEMM, its input and the weight
  cast to 16 bits by autocast kept for the input gradient.

The magnitude vectors (d_out per adapted linear, ~3 % of a rank-16 adapter's parameters) are not counted in the
states. Scaling DoRA (arXiv:2603.22276, Table 5) measures PEFT's DoRA at 1.5-1.9x a fused factored implementation's
gradient time at rank 384: what the rebuild costs at high rank."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.spec.model import LayerGroup, ModelSpec, is_lora_target, local_shape

ADAPTED_GROUPS = ("attention", "mlp", "shared_expert")


@dataclass(frozen=True, slots=True)
class DoraPass:
    """One layer's DoRA weight rebuild per forward pass: its GEMMs as (m, n, k, count, operand bytes), and the bytes
    and kernels of its memory-bound passes."""

    gemms: tuple[tuple[float, float, float, float, float], ...]
    nbytes: float
    kernels: float


def adapted(lg: LayerGroup, targets: tuple[str, ...], tp: int) -> list[tuple[float, float, int]]:
    """(local d_in, local d_out, count) of each adapted linear of ``lg`` on one tensor-parallel rank."""
    return [(*local_shape(w, tp), w.count) for w in lg.weights
            if w.group in ADAPTED_GROUPS and is_lora_target(w, targets)]


def dora_pass(lg: LayerGroup, targets: tuple[str, ...], rank: int, tp: int, a: float, gemm: float) -> DoraPass:
    """The weight rebuild of ``lg``'s adapted linears in one forward pass; ``a``: bytes per element of the adapters'
    input dtype (4: PEFT's fp32 adapters), ``gemm``: of the adapter GEMMs' operands. Per linear: the identity written,
    and cast for the GEMM where the GEMMs are 16-bit (4·d_in² + 6·d_in²); the 16-bit product written and copied to
    ``a`` (``lora_weight.to(x.dtype)``), scaled (read, write); the base weight read (2 B) and copied to ``a`` where that
    differs; the sum (read two, write one), its norm read: 38 B per weight element under PEFT's fp32 adapters, 14 with
    16-bit ones (review of peft tuners/lora/dora.py @5d602fdb)."""
    gemms, nbytes, kernels = [], 0.0, 0.0
    for i, o, n in adapted(lg, targets, tp):
        gemms += [(i, rank, i, n, gemm), (i, o, rank, n, gemm)]  # eye·Aᵀ (i×r), then ·Bᵀ (i×o)
        eye = a * i * i + ((a + gemm) * i * i if gemm < a else 0.0)
        per_weight = gemm + (gemm + a if a != gemm else 0.0) + 2 * a + (2 + a if a != 2 else 0.0) + 3 * a + a
        nbytes += n * (eye + per_weight * i * o)
        kernels += n * 7
    return DoraPass(tuple(gemms), nbytes, kernels)


COMPOSE_KERNELS = (5.0, 6.0)  # forward, backward (``dora_compose``)


def dora_compose(i: float, o: float, x: float, dropout: bool) -> tuple[float, float]:
    """(forward bytes, backward bytes) per token of one DoRA linear's output composition (``COMPOSE_KERNELS``)
    beside the LoRA add: four fp32 elementwise ops over d_out (the scale's products with ``base_result`` and
    ``lora_result`` read ``x`` bytes each and write 4, the scaling and the sum) and the add into the output; backward
    each product's two gradients and the magnitude's reduction; with dropout the dropped input's 16-bit cast for the
    base GEMM again."""
    fwd, bwd = (x + 4) * o * 2 + 8 * o + 12 * o, (4 + x) * o * 4 + 12 * o
    if dropout:
        fwd, bwd = fwd + 6 * i, bwd + 6 * i
    return fwd, bwd


def dora_kept(lg: LayerGroup, targets: tuple[str, ...], tp: int, elem: float, dropout: bool, cast: bool
              ) -> tuple[float, float]:
    """(bytes per token, bytes per layer) a layer's DoRA linears keep for backward: ``base_result`` and
    ``lora_result`` (d_out each, ``elem`` bytes) for the magnitude's gradient; with dropout, where the weight is cast
    to the adapters' dtype (``cast``: PEFT's fp32 adapters), the 16-bit weight copy autocast makes for
    ``F.linear(x, weight)`` (d_in·d_out per layer) — a frozen weight's linear keeps no input."""
    per_token = per_layer = 0.0
    for i, o, n in adapted(lg, targets, tp):
        per_token += n * 2 * elem * o
        per_layer += n * (2 * i * o if dropout and cast else 0.0)
    return per_token, per_layer


def dora_working_set(m: ModelSpec, targets: tuple[str, ...], tp: int, a: float) -> float:
    """The largest adapted linear's rebuild held at once, forward and where recomputation runs it in backward: the
    identity (``a`` bytes per element), the 16-bit product, its scaled copy, the weight copy and the sum (``a``)."""
    return max((a * i * i + (2 + 2 + 2 * a) * i * o for lg in m.layers for i, o, _ in adapted(lg, targets, tp)),
               default=0.0)
