"""profile's launcher under bad input and interruption (fuzz report B3, E16): --nproc bounded, an
unsupported model refused before torchrun starts, and torchrun's process tree and temporary folder
gone after a timeout, Ctrl-C or SIGTERM — checked with a dummy launcher (no torch run, no GPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.profile import launch

# A stand-in for torchrun at its worst: it ignores SIGTERM, as do its two "ranks", which run in
# sessions of their own (as torchrun starts them), so only the launcher's kill can reach them.
DUMMY = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the ranks
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
             for _ in range(2)]
    pids = " ".join(str(p.pid) for p in ranks) + f" {os.getpid()}"
    open(os.path.join(sys.argv[1], "pids.tmp"), "w").write(pids)
    os.rename(os.path.join(sys.argv[1], "pids.tmp"), os.path.join(sys.argv[1], "pids"))
    time.sleep(120)
""")


def _dummy_command(cfg, out_dir, nproc, extra_args):
    return [sys.executable, "-c", DUMMY, str(out_dir)]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")


def _gone(pids: list[int], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _wait_for(path: Path, within_s: float = 20.0) -> str:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _kill_leftovers(pids: list[int]) -> None:
    for p in pids:
        if _alive(p):
            os.kill(p, signal.SIGKILL)


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


# ---- --nproc bounds ---------------------------------------------------------------------------------

def test_nproc_above_four_per_core_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setattr(launch, "usable_cpus", lambda: 2)
    for n in (9, 10**9):
        with pytest.raises(GpuplanError, match=f"--nproc {n} is more than 8 CPU ranks.*use --nproc 8 or fewer"):
            launch.check_devices("cpu", n)


def test_cli_nproc_1e9_is_one_line_exit_2(capsys, monkeypatch):
    from gpuplan.cli import main

    def no_launch(*a, **k):
        raise AssertionError("torchrun must not start")
    monkeypatch.setattr("gpuplan.profile.run.run_trial", no_launch)
    rc = main(["profile", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--device", "cpu", "--nproc", "1e9",
               "--no-store"])
    err = capsys.readouterr().err
    assert rc == 2 and "--nproc 1e9 is more than" in err and err.count("\n") == 1


def test_nproc_within_the_cpu_count_is_accepted():
    pytest.importorskip("torch")
    launch.check_devices("cpu", 1)
    launch.check_devices("cpu", launch.usable_cpus())


# ---- E16: an unsupported model is refused before torchrun starts --------------------------------------

@pytest.mark.parametrize(("model", "kind"), [("gpt2", "a gpt2 model"), ("mixtral-8x7b", "mixture-of-experts")])
def test_an_unsupported_model_is_refused_before_launching(model, kind, monkeypatch):
    pytest.importorskip("torch")
    from conftest import make

    from gpuplan.profile import run

    def no_launch(*a, **k):
        raise AssertionError("torchrun must not start")
    monkeypatch.setattr(run, "run_trial", no_launch)
    with pytest.raises(GpuplanError, match=f"trial runs support dense .*{kind}"):
        run.profile(make(model, training={"seq_len": 64}), device="cpu", nproc=1)


def test_tp_that_does_not_split_the_heads_is_refused_before_launching(monkeypatch):
    pytest.importorskip("torch")
    from gpuplan.catalog.models import load_model
    from gpuplan.profile.model_check import check_model

    m = load_model("llama-3.2-1b")
    check_model(m, 1)
    with pytest.raises(GpuplanError, match="tp=3 must divide"):
        check_model(m, 3)


# ---- B3: the launcher's process tree and temporary folder -------------------------------------------

@needs_proc
def test_kill_stops_the_launcher_and_ranks_in_their_own_sessions(tmp_path):
    proc = launch.start(_dummy_command(None, tmp_path, 2, None))
    pids = [int(p) for p in _wait_for(tmp_path / "pids").split()]
    try:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)  # a process group of its own
        assert all(os.getpgid(p) != proc.pid for p in pids[:2])  # ranks outside it: killpg alone misses them
        t0 = time.monotonic()
        launch._kill(proc, grace_s=0.5)  # all of them ignore SIGTERM: SIGKILL after the grace
        assert time.monotonic() - t0 < 5
        assert proc.returncode is not None and _gone(pids)
    finally:
        _kill_leftovers(pids)


@needs_proc
def test_a_timeout_stops_every_process_and_removes_the_temp_folder(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(launch, "torchrun_command", _dummy_command)
    monkeypatch.setattr(launch, "KILL_GRACE_S", 0.5)
    seen: list[int] = []

    def progress(fraction, label):  # called while waiting: note the tree once it is up
        folders = list(tmp_path.glob("gpuplan-profile-*"))
        if not seen and folders and (folders[0] / "pids").exists():
            seen.extend(int(p) for p in (folders[0] / "pids").read_text().split())

    with pytest.raises(GpuplanError, match="did not finish within 3 s"):
        launch.run_trial({}, device="cpu", nproc=2, steps=1, warmup=0, timeout_s=3, progress=progress)
    try:
        assert len(seen) == 3 and _gone(seen)
        assert list(tmp_path.glob("gpuplan-profile-*")) == []
    finally:
        _kill_leftovers(seen)


RUNNER = textwrap.dedent("""
    import sys
    from gpuplan.profile import launch
    from tests_dummy import command
    launch.torchrun_command = command
    launch.KILL_GRACE_S = 0.5
    try:
        launch.run_trial({}, device="cpu", nproc=2, steps=1, warmup=0, timeout_s=60)
    except KeyboardInterrupt:
        sys.exit(130)
""")



def _default_signals() -> None:
    """The gpuplan under test starts with SIGINT and SIGHUP at their defaults even when pytest itself
    runs in the background or under nohup (which ignore them, and gpuplan leaves an ignored signal
    ignored, as nohup asks)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@needs_proc
@pytest.mark.parametrize(("sig", "rc"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130),
                                         (signal.SIGHUP, -signal.SIGHUP)])
def test_a_signal_to_gpuplan_stops_every_process_and_removes_the_temp_folder(sig, rc, tmp_path):
    (tmp_path / "tests_dummy.py").write_text(
        f"import sys\nDUMMY = {DUMMY!r}\n"
        "def command(cfg, out_dir, nproc, extra_args):\n    return [sys.executable, '-c', DUMMY, str(out_dir)]\n")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    gp = subprocess.Popen([sys.executable, "-c", RUNNER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, preexec_fn=_default_signals)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 20
        while not pids and time.monotonic() < deadline:
            for folder in tmpdir.glob("gpuplan-profile-*"):
                if (folder / "pids").exists():
                    pids = [int(p) for p in (folder / "pids").read_text().split()]
            time.sleep(0.05)
        assert pids, "the dummy launcher never started"
        gp.send_signal(sig)
        _, err = gp.communicate(timeout=20)
        assert gp.returncode == rc, err
        assert "Traceback" not in err
        assert _gone(pids)
        assert list(tmpdir.iterdir()) == []
    finally:
        if gp.poll() is None:
            gp.kill()
        _kill_leftovers(pids)


DEFERRED = textwrap.dedent("""
    import os, signal
    from gpuplan.profile import launch
    reached = False
    try:
        with launch._stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler at the next bytecode
            for _ in range(1000):
                pass
            reached = True
    except launch._Signalled as sig:
        print(reached, sig.signum)
""")


@needs_proc
def test_a_signal_is_raised_where_it_cuts_no_popen_bookkeeping_short():
    # CPython's Popen._wait / _internal_poll take _waitpid_lock before the try that releases it: a handler raising
    # in between leaves it held and the clean-up's wait() blocked for ever (a SIGHUP run once hung 20 s in CI). A
    # signal outside the wait's sleep is kept, then raised at the next safe point — here as the trial ends
    out = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=60,
                         preexec_fn=_default_signals)
    assert out.stdout.split() == ["True", str(int(signal.SIGTERM))], out.stderr
