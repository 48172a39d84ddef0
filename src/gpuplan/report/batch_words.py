"""The global batch in words: a given count that splits it over no layout (what would), and a batch that stops
more GPUs from paying where a deadline needs them (report/advice.py uses both, for plan and fit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the result types only: report never runs the search
    from gpuplan.search.batch import NoSplit
    from gpuplan.search.enumerate import Candidate
    from gpuplan.search.plan import PlanResult


def no_split_json(g: NoSplit | None) -> dict[str, Any] | None:
    """A count that splits the batch over no layout, for ``--json`` (plan and fit alike)."""
    return None if g is None else {"gpus": g.gpus, "global_batch": g.global_batch, "batches": list(g.batches),
                                   "suggested_batch": g.suggested, "counts": list(g.counts)}


def no_split_words(g: NoSplit) -> str:
    """Why a count has no layout at all for the batch, and the nearest batches and counts that do."""
    fixes = []
    if any(g.batches):
        roomy = f" ({g.suggested:,} keeps most layouts and micro-batches)" \
            if g.suggested and g.suggested not in g.batches else ""
        fixes.append(f"a global batch of {' or '.join(f'{x:,}' for x in g.batches if x)} sequences{roomy} on "
                     f"{g.gpus:,} GPUs")
    if any(g.counts):
        fixes.append(f"{' or '.join(f'{x:,}' for x in g.counts if x)} GPUs for {g.global_batch:,} sequences")
    fix = "; or ".join(fixes) if fixes else "other fixed layout fields (they admit no split of this count)"
    return (f"no layout of {g.gpus:,} GPUs splits a global batch of {g.global_batch:,} sequences: every data-parallel "
            f"replica takes an equal share (dp divides the batch) and dp × tp × pp × cp = {g.gpus:,}, with tp inside "
            f"the node and pp a divisor of the layers or of the count, or a power of two — take {fix}")


BATCH_BOUND_BUBBLE = 0.2  # a pipeline bubble this share of the step: the batch leaves each pipeline too few


def batch_cap(r: PlanResult, fastest: Candidate) -> str:
    """Where the global batch was assumed and more GPUs stopped paying before the fastest count (the compute
    equilibrium below it): the batch caps data parallelism and the micro-batches each pipeline gets, so a larger
    one is the lever a deadline needs — the run's own choice (convergence), which the plan does not make."""
    eq = r.equilibrium.get(fastest.gpu)
    if "training.global_batch" in r.scenario.given or eq is None or eq.gpus is None or eq.gpus >= fastest.gpus \
            or fastest.time is None:
        return ""
    st, lay = fastest.time.step, fastest.layout
    # the batch, not the network, is what stops the fastest count: its replicas take one micro-batch each (dp cannot
    # grow), or its pipelines idle in the bubble for a fifth of the step or more (few micro-batches per replica)
    if lay.dp * lay.micro_batch < r.global_batch and st.bubble_s < BATCH_BOUND_BUBBLE * st.step_s:
        return ""
    tokens = r.global_batch * r.scenario.training.seq_len
    return (f"; or a larger global batch: the assumed {r.global_batch:,} sequences ({tokens / 2**20:.0f}M tokens) "
            f"leave more GPUs than {eq.gpus:,} {eq.gpu} too little data-parallel work each (the compute "
            "equilibrium) — large pre-training runs grow the batch (Llama 3 405B: 4M → 16M tokens, Dubey et al. "
            "2024, Sec. 3.4.1); give --global-batch")
