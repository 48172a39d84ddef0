"""How far a prediction is from what runs like it measured: 80 % intervals from the leave-one-source-out
residuals of the open corpus (catalog/intervals.json, written by tools/fit_constants.py with the constants
it fits; gpuplan/validation/intervals.py builds them).

A residual is published / predicted − 1 of a held-out row (its constants fitted on the other sources). Rows
are grouped by regime — the sequence length (long context or not), whether the framework is named, the GPU
generation, the scale — and a regime with too few rows or sources backs off to a coarser one, down to every row.
For a run whose framework is not named, the residuals are those of predicting each row as the generic stack: what
not knowing the stack costs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from gpuplan.catalog import load_json
from gpuplan.catalog.constants import constant

NODE_SCALE, CLUSTER_SCALE = "node", "cluster"
LARGE_GPUS = 512  # past this many GPUs a run is "large" (the corpus' runs of 1,024-16,384 GPUs)
# past this many tokens per sequence a run is "long context": the pre-training length of the Llama 3 herd (8,192,
# arXiv:2407.21783 Sec. 3.4.1; its long-context stage then grows it to 128K, Sec. 3.4.2). Beyond it the attention
# kernels — quadratic in the sequence — take a growing share of the step (a 7B's causal attention FLOPs reach a
# third of its matmuls' near 16K), and context parallelism's ring steps join in: a regime of its own
LONG_CONTEXT = 8192
STANDARD_CONTEXT, LONG = "standard", "long"


@dataclass(frozen=True, slots=True)
class Spread:
    """The 10th and 90th percentile of published / predicted − 1, and how many rows they rest on."""

    p10: float
    p90: float
    n: int
    regime: str


def regime(framework: str, architecture: str, gpus: int, gpus_per_node: int, model_parallel: bool = False,
           seq_len: int = 0) -> dict[str, str]:
    """The attributes an interval is looked up by: whether the framework is named, the GPU generation, the
    scale, whether the layout splits the model (tensor or pipeline parallel: their memory has terms a
    data-parallel layout does not) and whether the sequence is past ``LONG_CONTEXT``."""
    scale = NODE_SCALE if gpus <= gpus_per_node else CLUSTER_SCALE if gpus <= LARGE_GPUS else "large"
    return {"framework": "generic" if framework == "generic" else "named", "generation": architecture or "other",
            "scale": scale, "parallel": "model" if model_parallel else "data",
            "context": LONG if seq_len > LONG_CONTEXT else STANDARD_CONTEXT}


def regime_key(attrs: dict[str, str], level: list[str]) -> str:
    return "|".join(attrs[a] for a in level) if level else "all"


@cache
def _table() -> dict[str, Any]:
    try:
        return dict(load_json("intervals.json"))
    except FileNotFoundError:  # before the first fit: no interval, said so by the answer
        return {}


_off = [False]


@contextmanager
def point_estimates() -> Iterator[None]:
    """No intervals inside (validation/corpus_check.py resolves the published runs, which ran: what fits is
    decided on the point estimate there, so the fit that writes intervals.json does not depend on it)."""
    _off.append(True)
    try:
        yield
    finally:
        _off.pop()


def intervals_on() -> bool:
    """Whether answers carry intervals here (False inside ``point_estimates``)."""
    return not _off[-1]


def spread(kind: str, framework: str, architecture: str, gpus: int, gpus_per_node: int,
           model_parallel: bool = False, seq_len: int = 0) -> Spread | None:
    """The 80 % spread of ``kind`` ("throughput" or "memory") for a run: the finest regime with enough held-out
    rows; None when the corpus has none (or inside ``point_estimates``)."""
    if _off[-1]:
        return None
    a = regime(framework, architecture, gpus, gpus_per_node, model_parallel, seq_len)
    return _spread(kind, a["framework"], a["generation"], a["scale"], a["parallel"], a["context"])


@lru_cache(maxsize=1024)
def _spread(kind: str, framework: str, generation: str, scale: str, parallel: str, context: str) -> Spread | None:
    part = _table().get(kind)
    if not part:
        return None
    attrs = {"framework": framework, "generation": generation, "scale": scale, "parallel": parallel,
             "context": context}
    for level in part["backoff"]:
        key = regime_key(attrs, level)
        hit = part["regimes"].get(key)
        if hit is not None:
            return Spread(p10=hit["p10"], p90=hit["p90"], n=hit["n"], regime=key)
    return None


def widened(s: Spread | None, share: float, factor: float, what: str = "on unmeasured kernels") -> Spread | None:
    """``s`` also holding a ``share`` of the step timed at a borrowed kernel rate (no measurement of the kernel
    itself) — or, ``what`` says, otherwise not grounded end to end — running ``factor`` times slower or faster than
    modelled (throughput: published / predicted − 1 down to 1 / (1 + share·(factor − 1)), up to
    1 / (1 − share·(1 − 1/factor))); the regime says so."""
    if s is None or share <= 0:
        return s
    share = min(share, 1.0)
    low = (1 + s.p10) / (1 + share * (factor - 1)) - 1
    high = (1 + s.p90) / (1 - share * (1 - 1 / factor)) - 1
    return Spread(p10=low, p90=high, n=s.n, regime=f"{s.regime}, {share:.0%} of the step {what}")


# no MoE run in the open corpus: how the expert exchange hides under the compute, and what it costs the compute beside
# it, has no end-to-end check (its kernels do: validation/components.json); the exchange's seconds widen the interval
MOE_UNGROUNDED = "in the expert exchange, whose overlap no published MoE run in the corpus checks"


def throughput_spread(framework: str, generation: str, gpus: int, per_node: int, seq_len: int, scan_share: float,
                      exchange_share: float) -> Spread | None:
    """The throughput's 80 % interval: the regime's cross-validated residuals, widened for the share of the step on
    unmeasured kernels (the chunked scans) and for a MoE step's expert exchange (``unmeasured_kernel_factor``)."""
    factor = constant("unmeasured_kernel_factor")
    base = spread("throughput", framework, generation, gpus, per_node, seq_len=seq_len)
    return widened(widened(base, scan_share, factor), exchange_share, factor, MOE_UNGROUNDED)
