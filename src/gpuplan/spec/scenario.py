"""A scenario as spec values: the model, the hardware, the job, the layout fields the user fixed;
the one rule that completes a partial layout, and the normalized echo of an evaluated scenario."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpuplan.spec.corrections import NONE, Corrections
from gpuplan.spec.hardware import Hardware
from gpuplan.spec.job import Training
from gpuplan.spec.layout import Layout, check_layout
from gpuplan.spec.model import NO_EXPERTS, ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A parsed scenario: the model, the hardware, the job, and the layout fields the user fixed."""

    name: str | None
    model: ModelSpec
    hardware: Hardware
    training: Training
    layout: dict[str, Any] = field(default_factory=dict)  # partial: what the user fixed
    corrections: Corrections = NONE  # calibration fitted on the user's own runs (spec/corrections.py)
    model_ref: Any = None  # the model reference as given (resolved path, mapping or name)
    # the fields the input stated ("hardware.gpus", "training.global_batch", ...): never searched,
    # never listed as assumed (spec.defaults)
    given: frozenset[str] = frozenset()
    gpu_ref: Any = None  # an inline GPU mapping as given ({base: a10g, ...}); None for a catalogue id
    # words of the input read as something else, (field, word given, value, rule): a stack's name as its
    # profile (lightning → pytorch-fsdp), a framework's precision word as what it means (torchtune bf16 → bf16-pure)
    read_as: tuple[tuple[str, str, Any, str], ...] = ()

    def with_gpus(self, gpus: int) -> Scenario:
        return replace(self, hardware=replace(self.hardware, gpus=gpus))


def complete_layout(sc: Scenario, **overrides: Any) -> Layout:
    """The user's layout fields, the search's choices (``overrides``) and documented defaults:
    dp = gpus / (tp·pp·cp), zero 0, micro_batch 1, recompute none, sequence_parallel when tp > 1."""
    pair = {"micro_batch": 2} if sc.training.preference is not None else {}  # one pair: a chosen and a rejected
    layout = Layout.for_world(sc.hardware.gpus, **{**pair, **sc.layout, **overrides})
    check_layout(sc.model, sc.hardware, sc.training, layout)
    return layout


def normalized(sc: Scenario, layout: Layout) -> dict:
    """The scenario as evaluated: every field explicit, in the file's own units."""
    hw, tr = sc.hardware, sc.training
    corr, pair = sc.corrections.on(hw.gpu.id), 2 if tr.preference else 1
    return {
        "name": sc.name,
        "model": sc.model_ref if isinstance(sc.model_ref, str | dict) else sc.model.name,
        "hardware": {"gpu": sc.gpu_ref if sc.gpu_ref is not None else hw.gpu.id, "gpus": hw.gpus,
                     "gpus_per_node": hw.gpus_per_node, "nodes": hw.nodes,
                     "scale_up": hw.scale_up.id, "scale_out": hw.scale_out.id if hw.scale_out else None,
                     "price_per_gpu_hour": hw.price_per_gpu_hour, "power_limit_w": hw.power_limit_w,
                     "memory_factor": corr.memory, "compute_factor": corr.compute},
        # a preference run's batches in pairs, as its input counts them (io/preference.py): answers are inputs
        "training": {"seq_len": tr.seq_len, "global_batch": tr.global_batch // pair if tr.global_batch else None,
                     "tokens": tr.tokens,
                     "steps": tr.steps, "precision": tr.precision, "optimizer": tr.optimizer,
                     "optimizer_impl": tr.optimizer_impl,
                     "method": tr.method, "lora_rank": tr.lora_rank if tr.method != "full" else None,
                     "attention": tr.attention, "dropout": tr.dropout, "framework": tr.framework,
                     "compile": "model" if tr.compile and not tr.compile_loss else tr.compile, "headroom": tr.headroom,
                     **({"fp8_recipe": tr.fp8_recipe} if tr.fp8_recipe is not None else {}),
                     **({"grad_dtype": tr.grad_dtype} if tr.grad_dtype is not None else {}),
                     **({"moe_dispatcher": tr.moe_dispatcher} if tr.moe_dispatcher is not None else {}),
                     **({"expandable_segments": tr.expandable_segments}
                        if tr.expandable_segments is not None else {}),
                     **({"optimizer_in_backward": True} if tr.optimizer_in_backward else {}),
                     **({"activation_offloading": True} if tr.activation_offloading else {}),
                     **({"tf32": True} if tr.tf32 else {}),
                     **({"cuda_graphs": tr.cuda_graphs} if tr.cuda_graphs != "none" else {}),
                     **({"kernels": tr.kernels} if tr.kernels != "framework" else {}),
                     **({"lora_targets": [t for t in tr.lora_targets if t != NO_EXPERTS]}
                        if tr.method != "full" else {}),
                     **({"lora_dropout": tr.lora_dropout} if tr.lora_dropout else {}),
                     **({"dora": True} if tr.dora else {}),
                     **({"preference": tr.preference} if tr.preference else {})},
        "layout": {f.name: list(v) if isinstance(v := getattr(layout, f.name), tuple) else v // pair
                   if f.name == "micro_batch" else v for f in fields(Layout)},
    }
