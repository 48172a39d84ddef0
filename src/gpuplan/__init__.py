"""gpuplan: how many GPUs, of which type, in which parallel layout — will a training run fit, how
long will it take, what will it cost.

    import gpuplan
    est = gpuplan.evaluate(model="llama-3.1-8b", gpu="h100-sxm", gpus=8, zero=3, seq_len=8192, micro_batch=2)
    est.memory.total, est.time.step_s, est.to_json()
    p = gpuplan.plan(model={"params": 7e9}, gpu=["h100-sxm", "h200"], tokens="1.4T", max_gpus=512)
    p.best, p.equilibrium, p.scaling
    gpuplan.fit(model="llama-3.1-70b", gpu="h100-sxm").min_gpus

Bad input raises ``gpuplan.GpuplanError`` with the same one-line message the CLI prints.
"""

from gpuplan.api import Fit, Plan, evaluate, fit, get_gpu, load_model, plan, scenario
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import Estimate

__version__ = "0.1.0"

__all__ = ["Estimate", "Fit", "GpuplanError", "Plan", "__version__", "evaluate", "fit", "get_gpu", "load_model",
           "plan", "scenario"]
