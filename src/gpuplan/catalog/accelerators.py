"""Accelerators that are not GPUs, by a word of their name: what a name the GPU catalogue does not hold names instead
(catalog/hardware.py ``get_gpu`` says it, rather than the nearest GPU name)."""

from __future__ import annotations

import re

# accelerators that are not GPUs: a word in the name → what it is (for the error, instead of a near GPU name)
_OTHER_ACCELERATORS = {"gaudi": "an Intel Gaudi HPU", "tpu": "a Google TPU", "ascend": "a Huawei Ascend NPU",
                       "trainium": "an AWS Trainium chip", "inferentia": "an AWS Inferentia chip",
                       "cerebras": "a Cerebras wafer-scale engine", "wse": "a Cerebras wafer-scale engine",
                       "groq": "a Groq LPU", "sambanova": "a SambaNova RDU", "ipu": "a Graphcore IPU",
                       "graphcore": "a Graphcore IPU", "habana": "an Intel Gaudi HPU", "mtia": "a Meta MTIA chip"}


def other_accelerator(text: str) -> str | None:
    """What a name that is not a GPU's names ("Gaudi2", "TPU v5p", "Ascend 910B"), or None."""
    words = re.findall(r"[a-z]+", text.lower())
    return next((what for w in words for k, what in _OTHER_ACCELERATORS.items() if w.startswith(k)), None)
