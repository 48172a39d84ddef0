"""Calibrate the runtime model's free constants on the calibration rows of validation/runs.json.

Free constants: the achievable GEMM efficiency of Ampere and Hopper (datasheet peaks are not
reached in training) and the communication-interference coefficient. Everything else comes
from papers and datasheets. The objective is the mean |log(pred/published)| over the rows
marked ``"calibration": true`` (the mean, not the median: with 7 rows a median rests on one row
and leaves the grid flat); the other rows are never looked at here, so their error
(``gpuplan validate``) is out-of-sample.

Run: python benchmarks/calibrate_runtime.py   (prints the best values; copy them into
src/gpuplan/catalog/constants.json by hand, with the date, so a change is reviewed)
"""

from __future__ import annotations

import itertools
import math
import statistics

from gpuplan.catalog.constants import override, table
from gpuplan.validation import runtime_check


def objective(values: dict) -> float:
    gemm = dict(table("gemm_efficiency")) | {"ampere": values["ampere"], "hopper": values["hopper"]}
    with override({"gemm_efficiency": gemm, "comm_interference": values["kappa"]}):
        rows = [r for r in runtime_check.score_runs()["rows"] if r["calibration"]]
    return statistics.mean(abs(math.log(1 + r["error"])) for r in rows)


def main() -> None:
    grid = {"ampere": [0.60, 0.65, 0.70, 0.75, 0.80, 0.85], "hopper": [0.50, 0.55, 0.60, 0.65, 0.70, 0.75],
            "kappa": [0.0, 0.25, 0.5, 0.75]}
    best = min((dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())), key=objective)
    print("best:", best, f"mean |log error| on calibration rows: {objective(best):.3f}")


if __name__ == "__main__":
    main()
