"""The adapters a training stack builds where a LoRA/QLoRA run names no target modules or rank (stacks.json
``lora_defaults``, each row cited): PEFT resolves ``target_modules=None`` through its model-type mapping (the
attention's query and value projections on Llama, the fused query-key-value one on Falcon, q/v and the MLP on Phi)
and asks for the modules on a model type it has no entry for; torchtune's recipes, Unsloth, NeMo 1 and 2,
LLaMA-Factory and ms-swift name theirs whatever the model. Where a stack has no row the typical all-linear at rank 16
applies (spec/job.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplan.catalog.stacks import named_stack, stacks_table


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraDefault:
    """What one stack adapts by default: module names (or "all-linear"; None: only the model-type mapping), the model
    types its mapping names, the rank, the source and a note on how the names read."""

    targets: tuple[str, ...] | str | None
    rank: int
    source: str
    note: str | None = None
    by_model_type: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def targets_for(self, model_type: str) -> tuple[str, ...] | str | None:
        """The module names for ``model_type``: its mapping's entry, else the stack's own; None where the stack names
        none for it (PEFT: 'Please specify `target_modules` in `peft_config`')."""
        return self.by_model_type.get(model_type, self.targets)


def lora_row(word: str) -> dict[str, Any] | None:
    """The stacks.json ``lora_defaults`` row of the stack or profile a ``training.framework`` word names (``same_as``
    followed, with what the row states over it: TRL's rank); None where it has none."""
    table = stacks_table("lora_defaults")
    row = table.get(named_stack(word) or "")
    if row is not None and "same_as" in row:
        row = {**table[row["same_as"]], **{k: v for k, v in row.items() if k != "same_as"}}
    return row


def lora_defaults(word: str) -> LoraDefault | None:
    """The adapters the stack or profile a ``training.framework`` word names builds where a LoRA/QLoRA run names none;
    None where stacks.json has no row for it."""
    row = lora_row(word)
    if row is None:
        return None
    targets = row.get("targets")
    return LoraDefault(targets=tuple(targets) if isinstance(targets, list) else targets, rank=int(row["rank"]),
                       source=str(row["source"]), note=row.get("note"),
                       by_model_type={k: tuple(v) for k, v in row.get("by_model_type", {}).items()})
