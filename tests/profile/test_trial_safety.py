"""Safe trial runs (issue 14): no module of the working folder is imported by the launcher or the
ranks; on one node nothing listens beyond loopback; several nodes need rendezvous options; the
first failing rank's own exception is reported; folders of killed trials are removed at the next
start; a locked store is waited on and named as locked; simultaneous first uses of a store succeed."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.io.stores import runs
from gpuplan.profile import trial_files
from gpuplan.profile.store import Store

TINY = ("{model_type: llama, num_hidden_layers: 2, hidden_size: 64, num_attention_heads: 2, "
        "num_key_value_heads: 2, intermediate_size: 128, vocab_size: 256}")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _family(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(p.name))
    out, todo = {pid}, [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _listening(pids: set[int]) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) of the TCP sockets ``pids`` listen on."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                out.append(f[1].split(":")[0])
    return out


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_a_planted_module_is_not_imported_and_nothing_listens_beyond_loopback(tmp_path):
    pytest.importorskip("torch")
    marker = tmp_path / "PLANTED_RAN"
    for name in ("typing_extensions.py", "gpuplan.py", "numpy.py"):  # shadows of what the ranks import
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise ImportError('planted')\n")
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-P", "-m", "gpuplan", "profile", "--model", TINY, "--gpu", "h100-sxm",
                             "--device", "cpu", "--nproc", "2", "--steps", "3", "--warmup", "1", "--seq-len", "64",
                             "--no-store", "--json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    while proc.poll() is None:
        seen.update(_listening(_family(proc.pid)))
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert json.loads(out)["world"] == 2
    assert not marker.exists()
    assert seen <= LOOPBACK, seen  # gloo's pair sockets on loopback; no rendezvous port at all


def test_several_nodes_without_rendezvous_options_is_one_line(capsys):
    pytest.importorskip("torch")
    rc = main(["profile", "--model", TINY, "--gpu", "h100-sxm", "--device", "cpu", "--nnodes", "2", "--no-store"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "--nnodes 2 needs torchrun's rendezvous options after `--`" in err[0]


def test_the_rendezvous_options_get_the_node_count():
    from gpuplan.profile.run import _rendezvous

    assert _rendezvous(2, ["--rdzv-endpoint", "h:1"]) == ["--nnodes", "2", "--rdzv-endpoint", "h:1"]
    assert _rendezvous(2, ["--nnodes=2", "--rdzv-endpoint", "h:1"]) == ["--nnodes=2", "--rdzv-endpoint", "h:1"]
    assert _rendezvous(1, None) is None


def test_the_first_failing_rank_is_reported_with_its_own_exception(tmp_path):
    (tmp_path / "exits.json").write_text(json.dumps([{"rank": 1, "code": -15}, {"rank": 0, "code": 1}]))
    (tmp_path / "rank0.log").write_text("Traceback (most recent call last):\n  File x\n"
                                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    (tmp_path / "rank1.log").write_text("terminated\n")
    # rank 1 ended first but by the launcher's SIGTERM: not a failure of its own
    (tmp_path / "exits.json").write_text(json.dumps([{"rank": 0, "code": 1}, {"rank": 1, "code": -15}]))
    msg = trial_files.first_failure(tmp_path, "torchrun: ChildFailedError: worker killed")
    assert msg == "rank 0 failed first (exit 1): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"


def test_torchruns_log_gives_the_ranks_exception_not_the_kill(tmp_path):
    log = ("[rank0]: Traceback (most recent call last):\n[rank0]: ValueError: bad shape (3, 4)\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: worker failed\n")
    assert trial_files.first_failure(tmp_path, log) == "ValueError: bad shape (3, 4)"


def test_folders_of_killed_trials_are_removed_at_the_next_start(tmp_path):
    dead = tmp_path / f"{trial_files.TMP_PREFIX}dead"
    dead.mkdir()
    (dead / trial_files.OWNER).write_text(json.dumps({"pid": 2**22 + 12345, "started": "1"}))
    alive = tmp_path / f"{trial_files.TMP_PREFIX}alive"
    alive.mkdir()
    trial_files._claim(alive)
    other = tmp_path / "unrelated"
    other.mkdir()
    assert trial_files.sweep_stale(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()


def test_a_store_locked_for_a_while_is_waited_on(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite3"
    Store(path, create=True)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("begin exclusive")
    # held 6 s: past SQLite's default wait of 5 s, which used to end in "corrupt … move it away"
    threading.Timer(6.0, lambda: holder.execute("commit")).start()
    t0 = time.monotonic()
    run_id = Store(path).add_run(kind="profile", gpu="h100-sxm", model="m", layout={}, scenario={}, measured={},
                                 predicted={})
    assert run_id == 1 and time.monotonic() - t0 >= 5.5


def test_a_store_locked_past_the_wait_is_called_locked_not_corrupt(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite3"
    Store(path, create=True)
    monkeypatch.setattr(runs, "LOCK_WAIT_S", 0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("begin exclusive")
    try:
        with pytest.raises(GpuplanError, match="is locked by another process .waited 0 s.: try again"):
            Store(path).add_run(kind="profile", gpu="g", model="m", layout={}, scenario={}, measured={},
                                predicted={})
    finally:
        holder.execute("commit")


def _first_use(path: str) -> str:
    try:
        Store(path, create=True).add_run(kind="profile", gpu="g", model="m", layout={}, scenario={}, measured={},
                                         predicted={})
        return "ok"
    except GpuplanError as err:
        return str(err)


def test_simultaneous_first_uses_of_a_new_store_all_succeed(tmp_path):
    path = str(tmp_path / "new" / "runs.sqlite3")
    with multiprocessing.get_context("fork").Pool(6) as pool:
        outcomes = pool.map(_first_use, [path] * 6)
    assert outcomes == ["ok"] * 6
    assert len(Store(path).runs()) == 6
