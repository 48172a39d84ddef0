"""Published results (cited data files) and the code that scores gpuplan's predictions on them."""


def scores() -> dict:
    """Throughput and memory scores on the bundled published runs (``gpuplan validate``)."""
    from gpuplan.validation.memory_check import score_memory_runs
    from gpuplan.validation.runtime_check import score_runs

    return {"runtime": score_runs(), "memory": score_memory_runs()}
