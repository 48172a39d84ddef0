"""Files gpuplan writes (``export -o``, ``--plot``, ``--report``): checked before any work, written
atomically.

Rules: an existing file is never overwritten without ``--force``; a symlink is never followed (with
``--force`` the link itself is replaced, never its target); a folder, FIFO or device is never a
target; an input of the same command is never a target; one path is the target of one artefact.
Writing goes to a temporary file in the same folder, then a rename: a reader never sees half a file,
and a failure leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from gpuplan.errors import GpuplanError, shown


def _same(a: Path, b: Path) -> bool:
    try:
        if os.path.lexists(a) and os.path.lexists(b) and os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.abspath(a) == os.path.abspath(b)


def check_target(flag: str, path: str | os.PathLike, force: bool) -> Path:
    """``path`` may be written by ``flag``: it does not exist, or (with ``force``) is a regular
    file or a symlink (replaced itself). Its folder must exist."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        if not p.parent.is_dir() if str(p.parent) else False:
            raise GpuplanError(f"{flag} {shown(str(p))}: cannot write it (no such folder)") from None
        return p
    except OSError as err:
        raise GpuplanError(f"{flag} {shown(str(p))}: cannot write it ({err.strerror or 'error'})") from None
    if stat.S_ISLNK(st.st_mode):
        if not force:
            raise GpuplanError(f"{flag} {shown(str(p))} is a symbolic link: gpuplan does not write through links; "
                               "give another name (or --force to replace the link itself)")
        return p
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise GpuplanError(f"{flag} {shown(str(p))} is {kind}: give a file name")
    if not force:
        raise GpuplanError(f"{flag} {shown(str(p))} exists: give another name, or --force to overwrite it")
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
