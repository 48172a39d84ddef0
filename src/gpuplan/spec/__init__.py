"""The inputs of every prediction — model, hardware, training job, parallel layout — as small
frozen values validated when they are built (Calculon's split of application / system /
execution), and the one table of layout rules that construction, fit and the search share."""

from gpuplan.spec.hardware import GPU, BusCurve, Fabric, Hardware, Market
from gpuplan.spec.job import (
    ATTENTIONS,
    FP8_RECIPES,
    FRAMEWORKS,
    GRAD_DTYPES,
    LORA_TARGETS_ALL,
    MAX_GLOBAL_BATCH,
    MAX_LORA_RANK,
    MAX_SEQ_LEN,
    MAX_STEPS,
    MAX_TOKENS,
    METHODS,
    OFFLOADS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PP_SCHEDULES,
    PRECISIONS,
    RECOMPUTES,
    ZERO3_GATHERS,
    Training,
)
from gpuplan.spec.layout import Layout, check_fixed_layout, check_layout, check_layout_fields
from gpuplan.spec.model import LayerGroup, ModelSpec, Weight
from gpuplan.spec.rules import RULES, divisors, ep_choices, tp_splits_heads
from gpuplan.spec.scenario import Scenario, complete_layout, normalized

__all__ = [
    "ATTENTIONS", "FRAMEWORKS", "GPU", "LORA_TARGETS_ALL", "MAX_GLOBAL_BATCH", "MAX_LORA_RANK", "MAX_SEQ_LEN",
    "MAX_STEPS",
    "MAX_TOKENS", "METHODS", "OFFLOADS", "OPTIMIZERS", "OPTIMIZER_IMPLS", "FP8_RECIPES", "GRAD_DTYPES", "PP_SCHEDULES",
    "PRECISIONS", "RECOMPUTES", "RULES", "ZERO3_GATHERS", "BusCurve", "Fabric", "Hardware", "LayerGroup", "Layout",
    "Market", "ModelSpec", "Scenario", "Training", "Weight", "check_fixed_layout", "check_layout",
    "check_layout_fields", "complete_layout",
    "divisors", "ep_choices", "normalized", "tp_splits_heads",
]
