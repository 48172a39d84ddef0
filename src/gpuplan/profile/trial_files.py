"""A trial run's temporary folder: who owns it, removing those of dead trials, and reading why a
rank failed from what it left there."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

TMP_PREFIX = "gpuplan-profile-"
OWNER = "owner.json"
STALE_AFTER_S = 60.0  # a folder without a readable owner this old was left by a killed trial
# an exception's last line: "RuntimeError: ...", "torch.OutOfMemoryError: ...", "[rank0]: ValueError: ..."
_EXC = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s*)?"
                  r"((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?)$")


def _start_time(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = data[data.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def _claim(tmp: Path) -> None:
    """Mark ``tmp`` as this process's (pid and start time: a reused pid is not mistaken for it)."""
    (tmp / OWNER).write_text(json.dumps({"pid": os.getpid(), "started": _start_time(os.getpid())}))


def _dead_owner(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER).read_text())
        pid, started = int(owner["pid"]), owner.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        with contextlib.suppress(OSError):  # no owner yet: being made now, or left by a kill long ago
            return time.time() - folder.stat().st_mtime > STALE_AFTER_S
        return False
    now = _start_time(pid)
    if now is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return started is not None  # alive but no /proc to compare: keep unless we know
    return started is not None and now != started


def sweep_stale(tmp_root: Path) -> list[Path]:
    """Remove the trial folders (this user's) whose gpuplan is gone: after a SIGKILL no clean-up ran."""
    removed = []
    try:
        folders = [p for p in tmp_root.iterdir() if p.name.startswith(TMP_PREFIX)]
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for folder in folders:
        try:
            st = folder.lstat()
        except OSError:
            continue
        if not folder.is_dir() or folder.is_symlink() or (uid is not None and st.st_uid != uid):
            continue
        if _dead_owner(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _exception_line(text: str) -> str | None:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _EXC.match(ln)
        if m and not m.group(1).startswith(("torch.distributed.elastic", "ChildFailedError")):
            return m.group(1)
    return None


def first_failure(tmp: Path, log: str) -> str:
    """Why the trial failed, in the words of the rank that failed first: its own exception."""
    try:
        exits = json.loads((tmp / "exits.json").read_text())
    except (OSError, ValueError):
        exits = []
    failed = [e for e in exits if isinstance(e, dict) and e.get("code")]
    for e in failed:
        try:
            text = (tmp / f"rank{int(e['rank'])}.log").read_text(errors="replace")
        except (OSError, ValueError, KeyError):
            continue
        line = _exception_line(text)
        how = f"exit {e['code']}" if e["code"] > 0 else f"killed by signal {-e['code']}"
        tail = line or (" | ".join(text.strip().splitlines()[-3:]) or "no output")
        return f"rank {e['rank']} failed first ({how}): {tail[-400:]}"
    line = _exception_line(log)
    if line:
        return line[-400:]
    tail = " | ".join(ln for ln in (log or "").splitlines()[-6:] if ln.strip())
    return tail[-400:] or "no output"
