"""Single-node trial launcher, used instead of ``torchrun --standalone``:
``python -P -m gpuplan.profile.local_launch NPROC CONFIG OUTDIR``.

Why not torchrun on one node: its rendezvous store (a TCPStore) listens on every network interface
whatever host it is given, so a trial run would open a port to the network. Here the ranks meet
through a file (``torch.distributed.FileStore`` in OUTDIR) and gloo/NCCL are told to use the
loopback interface: nothing listens beyond this machine.

Each rank runs ``python -P -m gpuplan.profile.worker`` (``-P`` and ``PYTHONSAFEPATH``: the current
folder is not on ``sys.path``, so a stray ``typing_extensions.py`` there is never imported), in a
session of its own, with its output in ``OUTDIR/rank<k>.log``. When a rank fails, the others get
``FAIL_GRACE_S`` to finish (they would otherwise wait in a collective), then SIGTERM and SIGKILL.
``OUTDIR/exits.json`` records each rank's exit status in the order they ended, so the report names
the rank that failed first and its own exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FAIL_GRACE_S = 5.0
LOOPBACK = "lo"


def rank_env(rank: int, nproc: int, out_dir: Path) -> dict[str, str]:
    """The environment of one rank: torchrun's variables, a file rendezvous, loopback sockets."""
    env = dict(os.environ)
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "NODE_RANK": "0",
                "GPUPLAN_INIT_FILE": str(out_dir / "rendezvous"), "PYTHONSAFEPATH": "1",
                "GLOO_SOCKET_IFNAME": LOOPBACK, "NCCL_SOCKET_IFNAME": LOOPBACK,
                "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RUN_ID": "gpuplan-trial"})
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    for sig, wait_s in ((signal.SIGTERM, FAIL_GRACE_S), (signal.SIGKILL, None)):
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, sig)
        deadline = time.monotonic() + (wait_s or 0)
        while wait_s and time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
    for p in procs:
        p.wait()


def main(argv: list[str]) -> int:
    nproc, cfg, out_dir = int(argv[0]), argv[1], Path(argv[2])
    from gpuplan.profile.launch import _parent_death_signal

    procs: list[subprocess.Popen] = []
    exits: list[dict] = []
    try:
        for rank in range(nproc):
            with open(out_dir / f"rank{rank}.log", "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-P", "-u", "-m", "gpuplan.profile.worker", cfg, str(out_dir)],
                    stdout=log, stderr=subprocess.STDOUT, env=rank_env(rank, nproc, out_dir),
                    start_new_session=True, preexec_fn=_parent_death_signal()))
        failed_at: float | None = None
        while len(exits) < nproc:
            for rank, p in enumerate(procs):
                if p.poll() is not None and all(e["rank"] != rank for e in exits):
                    exits.append({"rank": rank, "code": p.returncode})
                    if p.returncode and failed_at is None:
                        failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > FAIL_GRACE_S:
                _stop(procs)
                failed_at = float("inf")  # stopped once; the loop records what is left
            time.sleep(0.05)
    finally:
        _stop(procs)
        (out_dir / "exits.json").write_text(json.dumps(exits))
    return next((e["code"] for e in exits if e["code"]), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
