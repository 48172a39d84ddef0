"""The scenario's keys, once: the file's sections, the command-line flags and the Python API's
keyword arguments are all generated from these tables (DESIGN.md §3)."""

from __future__ import annotations

from dataclasses import fields

from gpuplan.spec import Layout

TOP_KEYS = ("name", "model", "hardware", "training", "layout")
HARDWARE_KEYS = ("gpu", "gpus", "gpus_per_node", "scale_up", "scale_out", "price_per_gpu_hour", "power_limit_w",
                 "calibration", "host_memory")
TRAINING_KEYS = ("seq_len", "global_batch", "global_batch_tokens", "tokens", "steps", "precision", "optimizer",
                 "optimizer_impl", "method", "lora_rank", "lora_targets", "attention", "dropout", "headroom",
                 "trace_calibration", "framework", "compile")
LAYOUT_KEYS = tuple(f.name for f in fields(Layout))
# keys of an answer's echoed scenario that a file may give back (answers are inputs), not flags:
# nodes must agree with gpus / gpus_per_node; the factors are a calibration's (1 = none)
ECHO_HARDWARE_KEYS = ("nodes", "memory_factor", "compute_factor")
SECTIONS = (("hardware", HARDWARE_KEYS), ("training", TRAINING_KEYS), ("layout", LAYOUT_KEYS))
# flags (and API keywords) that are shorter than their key; every other flag is the key itself
SHORT_NAMES = {"price_per_gpu_hour": "price", "power_limit_w": "power_limit"}


def flag_keys() -> dict[str, str]:
    """Flag name (``gpu``, ``seq_len``; ``--seq-len`` on the command line) → dotted scenario key."""
    out = {"model": "model"}
    for section, keys in SECTIONS:
        for key in keys:
            out[SHORT_NAMES.get(key, key)] = f"{section}.{key}"
    return out


FLAG_KEYS = flag_keys()
