"""An open data-parallel width that the given global batch cannot split over.

A run given by its GPU count and global batch, its parallel degrees unstated, reads by default as pure data
parallelism: every GPU a replica (spec/scenario.py ``complete_layout``). Where the batch does not split over that
many replicas — not even within the 5 % a rounded published batch is read to (spec/tokens_batch.py): BLOOM's 2,048
sequences on 384 GPUs, Llama 3's 2,048 on 16,384 —, the run cannot have been pure data parallelism: every framework
runs a step as data-parallel replicas × micro-batch × accumulation steps (Megatron-LM's ``get_num_microbatches``,
DeepSpeed's ``train_batch_size`` check), so its model was split over the other GPUs. Which split its source does not
say; a run sizes its degrees for throughput within memory, so it is read as the fastest of the data-parallel widths
the batch splits over (as given where any width splits it, else within its rounding), each read as ``evaluate``
reads a layout given only its dp (model/completion.py ``open_split``: tensor parallelism within a node, pipeline
stages across; its open ZeRO stage, recomputation and micro-batch), at which the layout fits — where none fits,
the one whose peak is least. A tie goes to the wider dp. Where one of tp and pp is given, the other is the one that
fills the GPUs at each width. The answer lists the reading under ``assumed``; a given degree is never changed (dp,
or tp and pp both, given: the layout's own check says why the batch does not split), and a batch that splits is
read as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model.completion import replicas_of
from gpuplan.model.tp_open import Read, Settle
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario
from gpuplan.spec.tokens_batch import batch_for_layout


def _splits(sc: Scenario, replicas: int) -> bool:
    """Whether the scenario's global batch (read within its rounding) splits over ``replicas`` (dp × micro-batch)."""
    gb = batch_for_layout(sc, replicas).training.global_batch
    return gb is not None and gb % replicas == 0


def batch_widths(sc: Scenario, overrides: dict[str, Any]) -> list[dict[str, int]]:
    """The degrees, widest data-parallel width first, to read a run at whose dp is open (and tp or pp) and whose given
    global batch does not split over the GPUs its other degrees leave as replicas: each width the batch splits over,
    with the one of tp and pp given, the other that fills the GPUs (none where the batch splits, dp or both tp and pp
    are given, or the batch was not given)."""
    given = {**sc.layout, **overrides}
    if "dp" in given or ("tp" in given and "pp" in given) or sc.training.global_batch is None \
            or not ({"training.global_batch", "training.global_batch_tokens"} & sc.given):
        return []
    cp, mb = given.get("cp", 1), given.get("micro_batch", 1)
    fixed = {k: given[k] for k in ("tp", "pp") if k in given}
    if any(not isinstance(v, int) or v < 1 for v in (cp, mb, *fixed.values())) \
            or _splits(sc, replicas_of(sc, overrides)):
        return []
    n, fix = sc.hardware.gpus, cp * (fixed.get("tp", 1) * fixed.get("pp", 1))
    if n % fix:
        return []
    other = {"tp": "pp", "pp": "tp"}
    dps = [dp for dp in range(n // fix - 1, 0, -1) if (n // fix) % dp == 0]
    # the batch as given where some width splits it; read within its rounding only where none does
    gb = sc.training.global_batch
    split = [dp for dp in dps if gb % (dp * mb) == 0] or [dp for dp in dps if _splits(sc, dp * mb)]
    return [{"dp": dp, **({other[k]: n // (fix * dp) for k in fixed})} for dp in split]


def open_batch_split(sc: Scenario, overrides: dict[str, Any], settle: Settle,
                     step_s: Callable[[Scenario, Layout], float]) -> tuple[Read, str] | None:
    """``settle``'s reading of the scenario at the data-parallel width the run is read at, and the rule — None where
    the degrees are not open or the batch splits over the GPUs as replicas (the layout's own check then says why)."""
    widths = batch_widths(sc, overrides)
    reads: list[tuple[int, Read]] = []
    for degrees in widths:
        dp = degrees["dp"]
        try:
            read = settle(sc, {**overrides, **degrees})
        except GpuplanError:  # a width no split of the model runs at (too many stages, heads that do not divide)
            continue
        reads.append((dp, read))
    if not reads:
        return None
    fitting = [(step_s(r[0], r[1]), -dp, dp, r) for dp, r in reads if r[3].fits]
    if fitting:
        _, _, dp, read = min(fitting, key=lambda t: t[:2])
        how = "the fastest of those at which the layout fits"
    else:
        dp, read = min(reads, key=lambda t: (t[1][3].total, -t[0]))
        how = "none of them fits: the one whose peak is least"
    lay, gb = read[1], sc.training.global_batch
    rule = (f"not given, and {gb:,} sequences do not split over {sc.hardware.gpus:,} GPUs as data-parallel replicas: "
            f"the run split its model over the others — dp {dp} (tp {lay.tp}, pp {lay.pp}) of the "
            f"{len(widths)} widths the batch splits over, {how} (model/batch_split.py); give layout.dp, tp or pp to "
            "change it")
    # the tensor/pipeline split open_split made of the width read here (not of a width given), or the one degree
    # the given one leaves
    rules = tuple((k, f"not given: with dp {dp} read (layout.dp), {v.split(': ', 1)[-1]}" if k in ("tp", "pp") else v)
                  for k, v in read[2])
    left = [k for k in ("tp", "pp") if k not in {**sc.layout, **overrides}]
    if len(left) == 1:
        rules = ((left[0], f"not given: the GPUs dp {dp} (read, layout.dp) and the degrees given leave"), *rules)
    return (read[0], read[1], rules, read[3]), rule
