"""The analytic model: torch-free, no I/O. Spec values in, frozen results out.

states → activations → memory (per-GPU peak); flops, compute (device, roofline, layer time),
comm (collectives on the topology), pipeline (stage split, in-flight micro-batches, bubble,
worst stage: used by memory and time), runtime (step time), estimate (the Estimate).
"""
