"""Start a trial run with torchrun, wait with a timeout, collect every rank's result, clean up.

``torchrun --standalone`` picks a free rendezvous port on this machine; for several nodes pass
torchrun's own rendezvous options through ``extra_args`` (``--nnodes 2 --node-rank 0
--rdzv-backend c10d --rdzv-endpoint host:29400`` on every node, as torchrun documents).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

POLL_S = 0.25


def check_devices(device: str, nproc: int) -> None:
    """No GPU, or fewer GPUs than ranks: one clear message before anything starts."""
    if device not in ("cpu", "cuda"):
        raise GpuplanError(f"--device must be cpu or cuda, got {device!r}")
    if nproc < 1:
        raise GpuplanError(f"--nproc must be at least 1, got {nproc}")
    try:
        import torch
    except ImportError:
        raise GpuplanError("gpuplan profile needs PyTorch: pip install 'gpuplan[profile]' (torch==2.13.0)") from None
    if device == "cuda":
        if not torch.cuda.is_available():
            raise GpuplanError("--device cuda but no CUDA GPU is visible here: use --device cpu, or run on a GPU host")
        have = torch.cuda.device_count()
        if nproc > have:
            raise GpuplanError(f"--nproc {nproc} but only {have} GPU(s) are visible: use --nproc {have} "
                               "or a layout for fewer GPUs")


def run_trial(scenario: dict, *, device: str, nproc: int, steps: int, warmup: int, timeout_s: float,
              extra_args: list[str] | None = None, progress: Any = None) -> list[dict]:
    """Results of every rank (``ok``, ``oom``, ``error`` …); raises GpuplanError on timeout or when
    a rank dies without writing its result. ``progress`` (a ``ProgressBar``) is redrawn while
    waiting with the steps rank 0 has finished; it never extends the wait past ``timeout_s``."""
    with tempfile.TemporaryDirectory(prefix="gpuplan-profile-") as tmp:
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"scenario": scenario, "device": device, "steps": steps, "warmup": warmup}))
        rdzv = extra_args if extra_args else ["--standalone", "--nnodes", "1"]
        cmd = [sys.executable, "-m", "torch.distributed.run", *rdzv, "--nproc-per-node", str(nproc),
               "-m", "gpuplan.profile.worker", str(cfg), tmp]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "PYTHONUNBUFFERED": "1"}
        log_path = Path(tmp) / "torchrun.log"
        with open(log_path, "w") as log_file:  # a file, not a pipe: a chatty run can never block on it
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
        try:
            _wait(proc, timeout_s, Path(tmp) / "progress", warmup + steps, progress)
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise GpuplanError(f"trial run did not finish within {timeout_s:.0f} s and was stopped: "
                               "use fewer --steps, a smaller model or raise --timeout") from None
        except BaseException:  # Ctrl-C and the like: leave no rank behind
            _kill(proc)
            raise
        log = log_path.read_text(errors="replace")
        results = []
        for rank in range(nproc):
            f = Path(tmp) / f"rank{rank}.json"
            if f.exists():
                results.append(json.loads(f.read_text()))
        if len(results) < nproc:
            tail = " | ".join(line for line in (log or "").splitlines()[-6:] if line.strip())
            missing = sorted(set(range(nproc)) - {r["rank"] for r in results})
            raise GpuplanError(f"rank(s) {missing} died without a result (torchrun exit {proc.returncode}): "
                               f"{tail[-400:] or 'no output'}")
        return results


def _wait(proc: subprocess.Popen, timeout_s: float, progress_file: Path, total: int, progress: Any) -> None:
    """Wait for torchrun, redrawing ``progress`` a few times a second; TimeoutExpired at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            proc.wait(timeout=min(POLL_S, left))
            return
        except subprocess.TimeoutExpired:
            pass
        if progress is not None:
            done = 0
            try:
                done = int(progress_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
            label = "starting ranks" if not done else "finishing" if done >= total else f"step {done}/{total}"
            progress(done / total if total else 0.0, label)


def _kill(proc: subprocess.Popen) -> None:
    """Stop torchrun and every rank it started (they share its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
