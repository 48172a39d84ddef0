"""torch is an optional extra: the planner path never imports it (gpuplan.cli loads trace lazily)."""

from __future__ import annotations

import subprocess
import sys


def test_planner_path_does_not_import_torch():
    code = ("import sys, gpuplan.cli, gpuplan.trace, gpuplan.trace.text, gpuplan.model.estimate, gpuplan.search.plan; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
