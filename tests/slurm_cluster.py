"""A one-node Slurm cluster on localhost for the tests: munged, slurmctld and slurmd from Debian's ``munge`` and
``slurm-wlm`` (22.05 in bookworm; .ci/run installs them), started in the foreground in a temporary folder
with a generated slurm.conf — ``SlurmctldHost=localhost``, ``NodeName=localhost CPUs=2``, select/cons_tres
on CPUs, process tracking without cgroups (proctrack/linuxproc, task/none), no accounting. Without
accounting there is no sacct: a job's end is read with ``scontrol show job`` (the controller keeps a
finished job for MinJobAge, 300 s by default). Every process it starts is stopped by its own id."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")
DONE = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE"}


def why_not_here() -> str | None:
    """Why the cluster cannot start on this machine (a skip reason), or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge, as "
                ".ci/run does")
    if os.geteuid() != 0:
        return "slurmd launches jobs only as root here (CI runs as root)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 60) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log"):
            (r / d).mkdir(mode=0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = r / "munge" / "munge.socket"
        self._spawn([_which("munged"), "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                     f"--pid-file={r / 'munge' / 'munged.pid'}", f"--seed-file={r / 'munge' / 'seed'}",
                     f"--log-file={r / 'log' / 'munged.log'}"])
        self._wait(sock.exists, timeout_s, "munged did not create its socket")
        self.conf.write_text(self._conf(sock))
        self._spawn([_which("slurmctld"), "-D", "-c", "-f", str(self.conf)])
        self._spawn([_which("slurmd"), "-D", "-f", str(self.conf), "-N", "localhost"])
        self._wait(self._idle, timeout_s, "the node did not come up idle")

    def _conf(self, sock: Path) -> str:
        r = self.root
        return "\n".join([
            "ClusterName=gpuplantest", "SlurmctldHost=localhost", f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}", "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
            "SlurmUser=root", "SlurmdUser=root", f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none", "MpiDefault=none",
            "SwitchType=switch/none", "ReturnToService=2",
            "NodeName=localhost CPUs=2 State=UNKNOWN",
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP", ""])

    def _spawn(self, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{Path(argv[0]).name}.out", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))

    def _idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def _wait(self, ready, timeout_s: float, what: str) -> None:  # noqa: ANN001 - a predicate
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a Slurm daemon exited: {self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {timeout_s:.0f} s: {self.logs()}")

    def submit(self, script: Path, cwd: Path, env: dict[str, str]) -> str:
        out = subprocess.run(["sbatch", "--parsable", str(script)], cwd=cwd, capture_output=True, text=True,
                             env={**self.env, **env}, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch refused the script: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             env=self.env, timeout=30)
        return dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)

    def wait(self, job_id: str, timeout_s: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") in DONE:
                return info
            time.sleep(1)
        subprocess.run(["scancel", job_id], env=self.env, timeout=30)
        raise TimeoutError(f"job {job_id} did not finish within {timeout_s:.0f} s: {self.job(job_id)}")

    def logs(self) -> str:
        return " | ".join(f"{p.name}: {p.read_text(errors='replace')[-600:]}"
                          for p in sorted((self.root / "log").glob("*")) if p.is_file())

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)
