"""How gpuplan reads a published run whose source leaves a field out: each throughput row of the open corpus
(validation/corpus_check.py) evaluated as its scenario states it, and again with one field removed — the micro-batch,
the recomputation, the framework, or the whole layout but the GPU count — so the open-field readings
(model/micro_batch_open.py, recompute_open.py, zero_open.py, batch_split.py) are checked against the runs' published
throughput, not only against the layouts the runs stated. A check, not a fit: nothing here sets a constant.

Run: python tools/open_fields_check.py [micro_batch|recompute|framework|layout|SECTION.KEY ...]
Prints, per removed field, the rows answered and refused, the median |error| (predicted / published − 1), the share
within ±25 % and the median signed error, overall and per source.
"""

from __future__ import annotations

import copy
import statistics
import sys
from collections import Counter, defaultdict
from typing import Any

from gpuplan.api import evaluate
from gpuplan.errors import GpuplanError
from gpuplan.validation.corpus_check import corpus_rows, predicted_value, published_value

FIELDS = ("stated", "micro_batch", "recompute", "framework", "layout")


def without(scenario: dict[str, Any], field: str) -> dict[str, Any]:
    """The scenario with ``field`` removed (``stated``: as it is); a dotted field (``training.global_batch``,
    ``hardware.scale_out``) names its section."""
    sc = copy.deepcopy(scenario)
    if field == "framework":
        sc.get("training", {}).pop("framework", None)
    elif field == "layout":
        sc["layout"] = {}
    elif "." in field:
        section, key = field.split(".", 1)
        part = sc.get(section)
        if isinstance(part, dict):
            part.pop(key, None)
    elif field != "stated":
        sc.get("layout", {}).pop(field, None)
    return sc


def check(field: str) -> None:
    errors: list[float] = []
    by_source: dict[str, list[float]] = defaultdict(list)
    refused: Counter[str] = Counter()
    for row in corpus_rows():
        if row["category"] != "throughput" or "scenario" not in row:
            continue
        try:
            est = evaluate(without(row["scenario"], field))
            err = predicted_value(row, est) / published_value(row, est) - 1
        except GpuplanError as e:
            refused[str(e)[:100]] += 1
            continue
        errors.append(err)
        by_source[row["source_key"]].append(err)
    print(f"{field}: {len(errors)} answered, {sum(refused.values())} refused; {_summary(errors)}")
    for source, errs in sorted(by_source.items()):
        print(f"    {source:22s} {_summary(errs)}")
    for why, n in refused.most_common(5):
        print(f"    refused {n}: {why}")


def _summary(errs: list[float]) -> str:
    if not errs:
        return "no rows"
    absolute = [abs(e) for e in errs]
    within = sum(a <= 0.25 for a in absolute) / len(absolute)
    return (f"n {len(errs):3d}  median |e| {statistics.median(absolute):6.1%}  within ±25% {within:4.0%}  "
            f"signed {statistics.median(errs):+6.1%}")


if __name__ == "__main__":
    for name in sys.argv[1:] or FIELDS:
        if name not in FIELDS and name.split(".")[0] not in ("training", "hardware", "layout"):
            sys.exit(f"unknown field {name!r}: one of {', '.join(FIELDS)}, or SECTION.KEY (training.global_batch)")
        check(name)
