"""gpuplan's local files: one path policy (``policy``), the SQLite store of measured runs and the
hardware calibration it holds (``runs``), and the trace calibration file (``activations``).
Standard library only (sqlite3, json): no torch, so ``evaluate`` and ``plan`` can read them."""

from gpuplan.io.stores.activations import activation_factor, record_ratios, trace_activation_factor
from gpuplan.io.stores.policy import (
    CACHE_ENV,
    DEFAULT_WORDS,
    OFF_WORDS,
    STORE_ENV,
    cache_dir,
    choose,
    store_path,
    trace_calibration_path,
)
from gpuplan.io.stores.runs import MAX_FACTOR, MIN_FACTOR, Store, calibration_factors, check_factor

__all__ = [
    "CACHE_ENV", "DEFAULT_WORDS", "MAX_FACTOR", "MIN_FACTOR", "OFF_WORDS", "STORE_ENV", "Store",
    "activation_factor", "cache_dir", "calibration_factors", "check_factor", "choose", "record_ratios",
    "store_path", "trace_activation_factor", "trace_calibration_path",
]
