"""The local store of measured runs: it lives in ``gpuplan.io.stores.runs`` (the io layer reads it
for ``hardware.calibration``); this module keeps the names ``profile`` and ``calibrate`` use."""

from gpuplan.io.stores.policy import CACHE_ENV, DEFAULT_WORDS, OFF_WORDS, STORE_ENV
from gpuplan.io.stores.policy import store_path as default_path
from gpuplan.io.stores.runs import (
    APP,
    CALIBRATION_COLUMNS,
    MAX_FACTOR,
    MIN_FACTOR,
    RUN_COLUMNS,
    SCHEMA,
    SQLITE_HEADER,
    Store,
    calibration_factors,
    check_factor,
)

CALIBRATION_OFF, CALIBRATION_DEFAULT = OFF_WORDS, DEFAULT_WORDS

__all__ = [
    "APP", "CACHE_ENV", "CALIBRATION_COLUMNS", "CALIBRATION_DEFAULT", "CALIBRATION_OFF", "MAX_FACTOR",
    "MIN_FACTOR", "RUN_COLUMNS", "SCHEMA", "SQLITE_HEADER", "STORE_ENV", "Store", "calibration_factors",
    "check_factor", "default_path",
]
