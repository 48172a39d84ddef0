"""gpuplan: how many GPUs, of which type, in which parallel layout — will a training run fit, how
long will it take, what will it cost.

    import gpuplan
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, micro_batch=2)
    est.memory.total, est.time.step_s, est.to_json()
    p = gpuplan.plan(model={"params": 7e9}, gpu=["h100-sxm", "h200"], tokens="1.4T", max_gpus=512)
    p.best, p.equilibrium, p.scaling
    gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm").min_gpus

Bad input raises ``gpuplan.GpuplanError`` with the same one-line message the CLI prints.

The package face is lazy (PEP 562): ``import gpuplan.model.memory`` loads the model, not the public
API's parsers, reports, stores or the web server; the names below load their module when first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "Estimate": "gpuplan.api", "Fit": "gpuplan.api", "Plan": "gpuplan.api", "PlanOptions": "gpuplan.api",
    "evaluate": "gpuplan.api", "evaluate_scenario": "gpuplan.api", "fit": "gpuplan.api",
    "get_gpu": "gpuplan.api", "load_model": "gpuplan.api", "plan": "gpuplan.api",
    "plan_scenario": "gpuplan.api", "scenario": "gpuplan.api", "GpuplanError": "gpuplan.errors",
}

__all__ = ["Estimate", "Fit", "GpuplanError", "Plan", "PlanOptions", "__version__", "evaluate", "evaluate_scenario",
           "fit", "get_gpu", "load_model", "plan", "plan_scenario", "scenario"]

if TYPE_CHECKING:  # for type checkers and editors: the names as they are
    from gpuplan.api import (
        Estimate,
        Fit,
        Plan,
        PlanOptions,
        evaluate,
        evaluate_scenario,
        fit,
        get_gpu,
        load_model,
        plan,
        plan_scenario,
        scenario,
    )
    from gpuplan.errors import GpuplanError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuplan' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
