"""``gpuplan trace``: the model's real training step on fake tensors (torch only; optional extra).

Import ``gpuplan.trace.api`` lazily: this package's ``__init__`` must not import torch, so that
``gpuplan`` works without the ``trace`` extra. ``trace_scenario`` raises a GpuplanError naming the
install command when torch is missing.
"""

from __future__ import annotations

from typing import Any

from gpuplan.errors import GpuplanError

TORCH_PIN = "torch==2.13.0"


def trace_scenario(sc: Any, **kwargs: Any) -> dict:
    """Trace ``sc`` (a Scenario) and compare with ``evaluate`` — see ``gpuplan.trace.compare``."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise GpuplanError(f"gpuplan trace needs torch: pip install 'gpuplan[trace]' (pins {TORCH_PIN})") from None
    from gpuplan.trace.compare import trace_and_compare

    return trace_and_compare(sc, **kwargs)
