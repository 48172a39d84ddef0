"""Start a trial run with torchrun, wait with a timeout, collect every rank's result, clean up.

``torchrun --standalone`` picks a free rendezvous port on this machine; for several nodes pass
torchrun's own rendezvous options through ``extra_args`` (``--nnodes 2 --node-rank 0
--rdzv-backend c10d --rdzv-endpoint host:29400`` on every node, as torchrun documents).

torchrun runs in a session (process group) of its own and starts each rank in yet another one, so
stopping it means: SIGTERM to torchrun's group and to every process under it (found in /proc before
anything dies), a grace period, then SIGKILL to whatever is left. That happens on a timeout, on any
exception, and on SIGINT/SIGTERM/SIGHUP to gpuplan (handled while the trial runs; after the clean-up
gpuplan dies of the same signal). On Linux torchrun also gets SIGTERM if gpuplan itself is killed
with SIGKILL. The temporary folder is removed in every case.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.profile.trial_files import TMP_PREFIX, _claim, first_failure, sweep_stale

POLL_S = 0.25
KILL_GRACE_S = 10.0  # after SIGTERM, before SIGKILL


def usable_cpus() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_devices(device: str, nproc: int) -> None:
    """No GPU, fewer GPUs than ranks, more ranks than CPU cores: one clear message before anything starts."""
    if device not in ("cpu", "cuda"):
        raise GpuplanError(f"--device must be cpu or cuda, got {device!r}")
    if nproc < 1:
        raise GpuplanError(f"--nproc must be at least 1, got {nproc}")
    if device == "cpu":
        # gloo ranks may share cores (a CPU trial checks memory, not speed), but not without bound
        most = max(4, 4 * usable_cpus())
        if nproc > most:
            raise GpuplanError(f"--nproc {nproc} is more than {most} CPU ranks (4 per core, at least 4) here: "
                               f"use --nproc {most} or fewer")
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


def torchrun_command(cfg: Path, out_dir: Path, nproc: int, extra_args: list[str] | None) -> list[str]:
    """One node: gpuplan's own launcher (a file rendezvous, nothing listens on the network); several
    nodes: torchrun with the user's rendezvous options. ``-P``: the current folder is never on sys.path."""
    if not extra_args:
        return [sys.executable, "-P", "-m", "gpuplan.profile.local_launch", str(nproc), str(cfg), str(out_dir)]
    return [sys.executable, "-P", "-m", "torch.distributed.run", *extra_args, "--nproc-per-node", str(nproc),
            "--no-python", sys.executable, "-P", "-u", "-m", "gpuplan.profile.worker", str(cfg), str(out_dir)]


def run_trial(scenario: dict, *, device: str, nproc: int, steps: int, warmup: int, timeout_s: float,
              extra_args: list[str] | None = None, progress: Any = None) -> list[dict]:
    """Results of every rank (``ok``, ``oom``, ``error`` …); raises GpuplanError on timeout or when
    a rank dies without writing its result. ``progress`` (a ``ProgressBar``) is redrawn while
    waiting with the steps rank 0 has finished; it never extends the wait past ``timeout_s``."""
    try:
        with _stop_on_signals():  # a second signal during the clean-up below cannot cut it short
            sweep_stale(Path(tempfile.gettempdir()))  # folders of trials whose gpuplan was killed (SIGKILL)
            try:
                tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
                _claim(tmp)
            except OSError as err:
                raise GpuplanError(f"cannot make a temporary folder for the trial run ({err.strerror or err}): "
                                   "set TMPDIR to a writable folder") from None
            try:
                return _run(tmp, scenario, device=device, nproc=nproc, steps=steps, warmup=warmup,
                            timeout_s=timeout_s, extra_args=extra_args, progress=progress)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except _Signalled as sig:  # every rank stopped and the folder gone: now die of the signal as asked
        _die_of(sig.signum)
        raise


def _run(tmp: Path, scenario: dict, *, device: str, nproc: int, steps: int, warmup: int, timeout_s: float,
         extra_args: list[str] | None, progress: Any) -> list[dict]:
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({"scenario": scenario, "device": device, "steps": steps, "warmup": warmup}))
    cmd = torchrun_command(cfg, tmp, nproc, extra_args)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1",
           "PYTHONSAFEPATH": "1"}
    log_path = tmp / "torchrun.log"
    proc = None
    try:
        with open(log_path, "w") as log_file:  # a file, not a pipe: a chatty run can never block on it
            proc = start(cmd, stdout=log_file, env=env)
        _wait(proc, timeout_s, tmp / "progress", warmup + steps, progress)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise GpuplanError(f"trial run did not finish within {timeout_s:.0f} s and was stopped: "
                           "use fewer --steps, a smaller model or raise --timeout") from None
    except BaseException:  # Ctrl-C, SIGTERM and the like: leave no rank behind
        if proc is not None:
            _kill(proc)
        raise
    log = log_path.read_text(errors="replace")
    results = []
    for rank in range(nproc):
        f = tmp / f"rank{rank}.json"
        if f.exists():
            try:
                results.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue  # a rank killed while writing: reported as missing below
    if len(results) < nproc:
        missing = sorted(set(range(nproc)) - {r.get("rank") for r in results})
        raise GpuplanError(f"rank(s) {missing} died without a result (launcher exit {proc.returncode}): "
                           f"{first_failure(tmp, log)}")
    return results


# ---- processes and signals ---------------------------------------------------------------------

def start(cmd: list[str], *, stdout: Any = None, env: dict | None = None) -> subprocess.Popen:
    """Start ``cmd`` as the leader of a new session (its own process group), stdout and stderr to
    ``stdout``; on Linux it gets SIGTERM should this process die without cleaning up."""
    return subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None,
                            text=True, env=env, start_new_session=True, preexec_fn=_parent_death_signal())


def _parent_death_signal() -> Any:
    """A preexec_fn setting PR_SET_PDEATHSIG (Linux), or None where that is not available or not
    safe (several threads: preexec_fn must not run then)."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl: stop now
            os._exit(1)
    return setup


def _proc_info(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of ``pid`` from /proc, or None."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = data[data.rfind(")") + 2:].split()
    try:
        return int(fields[1]), fields[19]
    except (IndexError, ValueError):
        return None


def descendants(pid: int) -> dict[int, str]:
    """Every process under ``pid`` (children, their children …) with its start time; {} without /proc."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    try:
        entries = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    except OSError:
        return {}
    for p in entries:
        info = _proc_info(p)
        if info is not None:
            children.setdefault(info[0], []).append(p)
            started[p] = info[1]
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out[c] = started[c]
                todo.append(c)
    return out


def _signal_all(proc: subprocess.Popen, family: dict[int, str], sig: int) -> None:
    """``sig`` to the process group ``proc`` leads (while ``proc`` is not reaped its pid cannot be
    reused) and to each process of ``family`` that is still the same process."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
    for pid, started in family.items():
        info = _proc_info(pid)
        if info is None or info[1] != started:
            continue  # gone (or its pid reused by another process)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _kill(proc: subprocess.Popen, grace_s: float | None = None) -> None:
    """Stop torchrun and every rank it started: the ranks run in sessions of their own, so they are
    found under torchrun before anything is signalled. SIGTERM first, SIGKILL after ``grace_s``."""
    grace_s = KILL_GRACE_S if grace_s is None else grace_s
    family = descendants(proc.pid)
    _signal_all(proc, family, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    if proc.returncode is None:  # still running (not reaped, so its pid is still its own)
        family.update(descendants(proc.pid))  # anything it started meanwhile
    while time.monotonic() < deadline and any(_alive(p, s) for p, s in family.items()):
        time.sleep(0.05)
    _signal_all(proc, family, signal.SIGKILL)
    proc.wait()


def _alive(pid: int, started: str) -> bool:
    """Still running (a zombie waiting for its parent counts as stopped)."""
    info = _proc_info(pid)
    if info is None or info[1] != started:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2:].split()[0] not in ("Z", "X")


class _Signalled(BaseException):
    """SIGTERM or SIGHUP while a trial runs: unwinds like Ctrl-C so the ranks are stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class _Caught:
    """The signal a trial run received and whether it was raised yet. A handler that raises at any bytecode can
    cut ``Popen``'s own bookkeeping short — between ``_waitpid_lock.acquire(False)`` and the ``try`` that releases
    it (CPython Lib/subprocess.py ``Popen._wait`` / ``_internal_poll``) — leaving the lock held and the ``wait()``
    of the clean-up blocked for ever. So the signal is raised only while ``_wait`` sleeps between polls; one that
    comes at another moment waits for ``_wait``'s next turn, or for the end of the trial."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raised = False
        self.sleeping = False

    def take(self, signum: int) -> None:
        """The handler: the first signal only (later ones, during the clean-up, are ignored)."""
        if self.signum is not None:
            return
        self.signum = signum
        if self.sleeping:
            self.raise_pending()

    def raise_pending(self) -> None:
        """KeyboardInterrupt for SIGINT, ``_Signalled`` for SIGTERM/SIGHUP — once, if a signal came."""
        if self.signum is None or self.raised:
            return
        self.raised = True
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Signalled(self.signum)

    def sleep(self, seconds: float) -> None:
        """``time.sleep``, during which a signal is raised at once."""
        self.sleeping = True
        try:
            self.raise_pending()
            time.sleep(seconds)
        finally:
            self.sleeping = False


_caught = _Caught()  # the running trial's (``_stop_on_signals``); never signalled outside one


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """While the trial runs, SIGTERM and SIGHUP unwind (``_Signalled``) and SIGINT raises KeyboardInterrupt, once,
    at a moment that cuts no bookkeeping short (``_Caught``); a signal that came outside ``_wait`` is raised as the
    trial ends. Further signals during the clean-up are ignored rather than cut it short. Only default handlers
    are replaced (an ignored SIGHUP under nohup stays ignored), and only in the main thread (the only one Python
    lets set handlers)."""
    global _caught
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = _caught = _Caught()

    def handler(signum: int, frame: Any) -> None:
        caught.take(signum)

    old = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL),
                         (getattr(signal, "SIGHUP", None), signal.SIG_DFL)):
        if sig is not None and signal.getsignal(sig) is default:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
        caught.raise_pending()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        _caught = _Caught()


def _die_of(signum: int) -> None:
    """End this process by ``signum`` with its default action (the exit status a shell expects)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    time.sleep(1)  # the signal is delivered at once; this is not normally reached
    raise SystemExit(128 + signum)


def _wait(proc: subprocess.Popen, timeout_s: float, progress_file: Path, total: int, progress: Any) -> None:
    """Wait for torchrun, redrawing ``progress`` a few times a second; TimeoutExpired at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        _caught.raise_pending()  # a signal that came while Popen's bookkeeping ran
        if proc.poll() is not None:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        if progress is not None:
            done = 0
            try:
                done = int(progress_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
            label = "starting ranks" if not done else "finishing" if done >= total else f"step {done}/{total}"
            progress(done / total if total else 0.0, label)
        _caught.sleep(min(POLL_S, left))
