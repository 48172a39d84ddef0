"""Short real trial runs (torchrun + FSDP2) that measure what a job uses (``gpuplan profile``).

torch is imported only inside this package's worker and model modules; the launcher, the
store and the calibration are plain Python so ``gpuplan calibrate`` works without torch.
"""
