"""A preference run's batch as its trainer counts it — in pairs (TRL's DPOConfig.per_device_train_batch_size, each
example a chosen and a rejected completion; LLaMA-Factory's stage dpo) — read as the sequences the step runs: TRL's
``DataCollatorForPreference`` (``concatenated_forward`` before TRL 1.0) stacks the chosen and the rejected sequences
into one batch of twice the pairs, so the model sees 2 sequences per pair and gpuplan's micro-batch, global batch and
tokens count sequences."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplan.io.words import Reading


def pairs_as_sequences(tr_raw: dict[str, Any], training: Any, layout: dict[str, Any]
                       ) -> tuple[Any, dict[str, Any], tuple[Reading, ...]]:
    """``training`` and ``layout`` with a preference run's given global batch and micro-batch (pairs) as sequences,
    and the readings; a global batch given in tokens is sequences already."""
    if training.preference is None:
        return training, layout, ()
    reads: tuple[Reading, ...] = ()
    why = f"{training.preference} trains on pairs: a chosen and a rejected sequence each, run as one batch"
    if "global_batch" in tr_raw and "global_batch_tokens" not in tr_raw:
        reads += (("training.global_batch", f"{training.global_batch} pairs", 2 * training.global_batch,
                   why + " (TRL's preference collator): sequences"),)
        training = replace(training, global_batch=2 * training.global_batch)
    if "micro_batch" in layout:
        reads += (("layout.micro_batch", f"{layout['micro_batch']} pairs", 2 * layout["micro_batch"],
                   why + " (per_device_train_batch_size counts pairs): sequences"),)
        layout = {**layout, "micro_batch": 2 * layout["micro_batch"]}
    return training, layout, reads
