"""Calibration as ONE value: the correction factors a user fitted on their own measured runs.

``gpuplan calibrate`` fits ``memory`` (measured/predicted peak) and ``compute`` (measured/
predicted throughput) per GPU type from ``gpuplan profile`` runs; ``gpuplan trace --calibrate``
fits ``activations`` (traced/predicted activation bytes) per architecture. A scenario carries
one ``Corrections``; the model applies it in exactly three places, each one way:
activations × ``activations`` (model/memory), peak × ``memory`` (model/memory), compute time
÷ ``compute`` (model/runtime). The GPU factors belong to the GPU they were measured on: for
any other GPU type (``plan --gpu all``) they are 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.spec._checks import positive


@dataclass(frozen=True, slots=True, kw_only=True)
class Corrections:
    memory: float = 1.0       # measured/predicted peak memory (`gpuplan calibrate`)
    compute: float = 1.0      # measured/predicted throughput (`gpuplan calibrate`)
    activations: float = 1.0  # traced/predicted activations (`gpuplan trace --calibrate`)
    gpu: str | None = None    # the GPU type memory and compute were measured on

    def __post_init__(self) -> None:
        for key in ("memory", "compute", "activations"):
            positive(getattr(self, key), f"calibration.{key}", integer=False)

    def on(self, gpu: str) -> Corrections:
        """The factors that hold on ``gpu``: the GPU factors only on the GPU they were fitted on."""
        if self.gpu is None or self.gpu == gpu or (self.memory == 1.0 and self.compute == 1.0):
            return self
        return Corrections(activations=self.activations)


NONE = Corrections()
