"""The trace calibration file: it lives in ``gpuplan.io.stores.activations`` (torch-free, read by
``parse_scenario`` for ``training.trace_calibration``); this module keeps the names ``trace`` uses."""

from gpuplan.io.stores.activations import KEY, activation_factor, record_ratios
from gpuplan.io.stores.policy import trace_calibration_path as calibration_path

__all__ = ["KEY", "activation_factor", "calibration_path", "record_ratios"]
