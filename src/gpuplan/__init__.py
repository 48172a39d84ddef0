"""gpuplan: how many GPUs, of which type, in which layout — will it fit, how long, what cost."""

__version__ = "0.1.0"
