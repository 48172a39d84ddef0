"""Write the snapshot files that tests/test_snapshots.py compares against.

    PYTHONPATH=src python tests/snapshots/make.py

Run it only when a change of behaviour is intended, and review `git diff tests/snapshots/data`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import DATA, EXPECTED_RC, HELP_COLUMNS, SCENARIOS, TEXTS, run  # noqa: E402


def main() -> int:
    os.environ["COLUMNS"] = HELP_COLUMNS  # before any parser is built: argparse reads it then
    os.environ.pop("FORCE_COLOR", None)
    import gpuplan

    print(f"gpuplan from {gpuplan.__file__}")
    DATA.mkdir(parents=True, exist_ok=True)
    for old in DATA.glob("*"):
        old.unlink()
    failed = 0
    for name, argv in SCENARIOS.items():
        t0 = time.perf_counter()
        rc, out, err = run(argv)
        if rc != EXPECTED_RC.get(name, 0):
            print(f"FAILED {name}: exit {rc}: {err.strip()}")
            failed += 1
            continue
        # key order kept as printed: the test pins it too
        (DATA / f"{name}.json").write_text(json.dumps(json.loads(out), indent=1) + "\n")
        print(f"{name:40s} {time.perf_counter() - t0:6.2f} s")
    for name, argv in TEXTS.items():
        rc, out, err = run(argv)
        if rc != 0:
            print(f"FAILED {name}: exit {rc}: {err.strip()}")
            failed += 1
            continue
        (DATA / f"{name}.txt").write_text(out)
        print(f"{name}.txt")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
