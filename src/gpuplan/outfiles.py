"""Files gpuplan writes (``export -o``, ``--plot``, ``--report``): checked before any work, written
atomically.

Rules: only a regular file of the user's own, or a new path, in a folder the process may write is a
target. An existing file is never overwritten without ``--force``; a symlink is never followed (with
``--force`` a link to a regular file, or a dangling one, is replaced itself, never its target); a
folder, device, FIFO or socket, a symlink to one of them, and anything in or linked into the
machine's own folders (/dev, /proc, /sys: ``/dev/stdout``, ``/dev/null``, ``/proc/self/fd/1``) is
never a target, ``--force`` or not; an input of the same command is never a target; one path is the
target of one artefact. Writing goes to a temporary file in the same folder, then a rename: a reader
never sees half a file, and a failure leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from gpuplan.errors import GpuplanError, kind_of, shown

# the kernel's and the devices' folders: what lives there belongs to the machine, never an output
SYSTEM_DIRS = ("/dev", "/proc", "/sys")
NEVER = "gpuplan writes only regular files, --force or not; give a file name in a folder of yours"


def _same(a: Path, b: Path) -> bool:
    try:
        if os.path.lexists(a) and os.path.lexists(b) and os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.abspath(a) == os.path.abspath(b)


def _system(path: str) -> str | None:
    """The machine's folder (``/dev``, ``/proc``, ``/sys``) that the absolute ``path`` lies in."""
    return next((d for d in SYSTEM_DIRS if path == d or path.startswith(d + "/")), None)


def _check_link(where: str, p: Path, force: bool) -> None:
    """A symlink is replaced itself (with ``force``) only when it leads to a regular file or nowhere,
    outside the machine's folders."""
    try:
        text = os.readlink(p)
        real = os.path.realpath(p)
    except (OSError, ValueError) as err:
        raise GpuplanError(f"{where}: cannot write it ({getattr(err, 'strerror', None) or 'error'})") from None
    into = _system(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(p)), text))) or _system(real)
    if into:
        raise GpuplanError(f"{where} is a symbolic link into {into}: {NEVER}")
    try:
        mode = os.stat(p).st_mode
    except OSError:  # dangling (or a loop): nothing behind it to harm
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):
        raise GpuplanError(f"{where} is a symbolic link to {kind_of(mode)}: {NEVER}")
    if not force:
        raise GpuplanError(f"{where} is a symbolic link: gpuplan does not write through links; "
                           "give another name (or --force to replace the link itself)")


def _check_folder(where: str, folder: Path) -> None:
    """The folder exists, is not one of the machine's, and this process may create files in it."""
    if not folder.is_dir():
        raise GpuplanError(f"{where}: cannot write it (no such folder)")
    system = _system(os.path.realpath(folder))
    if system:
        raise GpuplanError(f"{where} is in {system}, the machine's own folder: {NEVER}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise GpuplanError(f"{where}: cannot write in its folder {shown(str(folder))} (permission denied): "
                           "give a path in a folder of yours")


def _check_owner(where: str, st: os.stat_result) -> None:
    uid = getattr(os, "geteuid", lambda: None)()
    if uid is not None and st.st_uid != uid:
        raise GpuplanError(f"{where} belongs to another user (uid {st.st_uid}): gpuplan replaces only your own "
                           "files; give another name")


def check_target(flag: str, path: str | os.PathLike, force: bool) -> Path:
    """``path`` may be written by ``flag``: it does not exist, or (with ``force``) is a regular file of
    the user's own or a symlink to one (replaced itself); in a writable folder of the user's, not in
    /dev, /proc or /sys. Every refusal is one line."""
    p = Path(path)
    where = f"{flag} {shown(str(p))}"
    folder = p.parent if str(p.parent) else Path(".")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        _check_folder(where, folder)
        return p
    except (OSError, ValueError) as err:
        raise GpuplanError(f"{where}: cannot write it ({getattr(err, 'strerror', None) or 'error'})") from None
    if stat.S_ISLNK(st.st_mode):
        _check_link(where, p, force)
    elif not stat.S_ISREG(st.st_mode):
        kind = kind_of(st.st_mode)
        raise GpuplanError(f"{where} is {kind}: " + ("give a file name" if kind == "a folder" else NEVER))
    elif not force:
        raise GpuplanError(f"{where} exists: give another name, or --force to overwrite it")
    _check_folder(where, folder)
    _check_owner(where, st)
    return p


def check_targets(targets: dict[str, str | None], inputs: list[str | None], force: bool) -> None:
    """Every output ``flag → path`` given: writable (``check_target``), none an input, none twice."""
    given = [(flag, Path(path)) for flag, path in targets.items() if path]
    for i, (flag, p) in enumerate(given):
        for inp in inputs:
            if inp and _same(p, Path(inp)):
                raise GpuplanError(f"{flag} {shown(str(p))} is an input of this command: give another file name")
        for other_flag, q in given[:i]:
            if _same(p, q):
                raise GpuplanError(f"{flag} and {other_flag} name the same file {shown(str(p))}: "
                                   "give each its own file")
        check_target(flag, p, force)


def write_atomic(flag: str, path: str | os.PathLike, data: bytes | str, force: bool) -> Path:
    """Write ``data`` to ``path`` (checked again now, not only before the work) via a temporary file
    in the same folder and a rename."""
    p = check_target(flag, path, force)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    folder = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:40]}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise GpuplanError(f"{flag} {shown(str(p))}: cannot write it ({err.strerror or 'error'})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o666 & ~_umask())
        if not force and os.path.lexists(p):  # appeared while we worked
            raise GpuplanError(f"{flag} {shown(str(p))} exists: give another name, or --force to overwrite it")
        os.replace(tmp, p)
    except OSError as err:
        raise GpuplanError(f"{flag} {shown(str(p))}: cannot write it ({err.strerror or 'error'})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return p


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
