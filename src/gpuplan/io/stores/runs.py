"""The local store of measured runs: an SQLite file (embedded, no server), one row per run.

Path: ``--store PATH``, else the default of ``policy.store_path`` (``$GPUPLAN_STORE``, else
``runs.sqlite3`` in the cache folder: ``$GPUPLAN_CACHE_DIR``, ``$XDG_CACHE_HOME/gpuplan`` or
``~/.cache/gpuplan``). Opening a store creates nothing: an existing file is checked read-only (a
file that is not SQLite, an SQLite file of another program, a gpuplan store of another schema are
refused with one clear line), a missing one is made only by the first write (``add_run``,
``set_calibration``), and reading a missing store is an error. Every write is a transaction (a
crash leaves the previous state). Calibration factors are checked on the way in and on the way
out: finite numbers from ``MIN_FACTOR`` to ``MAX_FACTOR``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import stat
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from gpuplan.bounds import load_json
from gpuplan.errors import GpuplanError
from gpuplan.io.stores.policy import DEFAULT, choose, store_origin, store_path

APP, SCHEMA = "gpuplan", 1
SQLITE_HEADER = b"SQLite format 3\x00"
MIN_FACTOR, MAX_FACTOR = 0.1, 10.0  # a correction beyond 10× either way is a broken run, not a stack
RUN_COLUMNS = ("id", "created", "kind", "gpu", "model", "layout", "scenario", "measured", "predicted")
CALIBRATION_COLUMNS = ("gpu", "memory_factor", "compute_factor", "n", "created")
KEY = "hardware.calibration"
LOCK_WAIT_S = 60.0  # another gpuplan writing the store (a profile recording its run) holds it for milliseconds
WANTS = "default, false or the path of a store written by `gpuplan calibrate`"


def check_factor(value: Any, name: str, where: str) -> float:
    """``value`` as a float when it is a finite number from MIN_FACTOR to MAX_FACTOR; else one line."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and MIN_FACTOR <= value <= MAX_FACTOR
    if not ok:
        raise GpuplanError(f"{where}: {name} = {value!r} is not a number from {MIN_FACTOR:g} to {MAX_FACTOR:g}")
    return float(value)


def _locked(err: sqlite3.OperationalError) -> bool:
    return "locked" in str(err) or "busy" in str(err)


class Store:
    """``Store(path)`` checks an existing file and creates nothing; ``create=True`` makes the store now
    (for a writer that wants to fail before a long trial run rather than at ``add_run``)."""

    def __init__(self, path: str | os.PathLike | None = None, *, create: bool = False) -> None:
        given = path is not None and str(path) != ""
        self.path = Path(path).expanduser() if given else store_path()
        self.origin = "" if given else store_origin()
        self.con: sqlite3.Connection | None = None
        self._writable = False
        if self._kind() == "missing":
            reason = self._cannot_create()
            if reason:
                raise GpuplanError(f"there is no store at {self.path}{self.origin} and none can be made there "
                                   f"({reason}): choose another --store path (or set GPUPLAN_STORE)")
        else:
            self._open(write=False)
        if create:
            self._open(write=True)

    # ---- opening --------------------------------------------------------------------------------
    def _kind(self) -> str:
        """'missing' or 'file' (an SQLite file, checked by its header); anything else is one error line."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            return "missing"  # a parent is a file: _cannot_create names it
        except (OSError, ValueError) as err:
            raise GpuplanError(f"store {self.path}{self.origin} cannot be read "
                               f"({getattr(err, 'strerror', None) or err}): choose another --store path") from None
        if stat.S_ISDIR(st.st_mode):
            raise GpuplanError(f"store {self.path}{self.origin} is a folder: give a file path "
                               "(--store runs.sqlite3)")
        if not stat.S_ISREG(st.st_mode):
            raise GpuplanError(f"store {self.path}{self.origin} is not a regular file: choose another --store path")
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as err:
            raise GpuplanError(f"store {self.path}{self.origin} cannot be read ({err.strerror or err}): "
                               "choose another --store path") from None
        if not head:
            raise GpuplanError(f"{self.path}{self.origin} is an empty file, not a gpuplan store: delete it "
                               "or choose another --store path")
        if head != SQLITE_HEADER:
            raise GpuplanError(f"{self.path}{self.origin} is not a gpuplan store (not an SQLite file): "
                               "choose another --store path")
        return "file"

    def _cannot_create(self) -> str | None:
        """Why the store's file could not be made (without making anything), or None."""
        parent = self.path.parent
        while True:
            try:
                st = parent.stat()
            except (FileNotFoundError, NotADirectoryError):
                if parent.parent == parent:
                    return None
                parent = parent.parent
                continue
            except (OSError, ValueError) as err:
                return f"{parent}: {getattr(err, 'strerror', None) or err}"
            if not stat.S_ISDIR(st.st_mode):
                return f"{parent} is a file, not a folder"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None

    def _open(self, *, write: bool) -> sqlite3.Connection:
        """A connection: read-only for reading (never creates a file), read-write for writing
        (the folder and the file are made when missing)."""
        if self.con is not None and (self._writable or not write):
            return self.con
        if self.con is not None:
            self.con.close()
            self.con = None
        existed = self._kind() == "file"
        if not existed and not write:
            raise GpuplanError(f"there is no gpuplan store at {self.path}{self.origin}: record runs with "
                               "`gpuplan profile` (then `gpuplan calibrate`) first, or give the path of a store")
        if not existed:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                existed = self._create()
            except OSError as err:
                reason = self._cannot_create() or err.strerror or str(err)
                raise GpuplanError(f"cannot make the store {self.path}{self.origin} ({reason}): choose another "
                                   "--store path (or set GPUPLAN_STORE)") from None
        try:
            if write:
                con = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
            else:
                uri = "file:" + urllib.parse.quote(str(self.path.absolute())) + "?mode=ro"
                con = sqlite3.connect(uri, uri=True, timeout=LOCK_WAIT_S)
            try:
                self._check(con, existed)
                if write:
                    self._init_schema(con)
            except BaseException:
                con.close()
                raise
        except sqlite3.OperationalError as err:
            if _locked(err):
                raise self._locked_error() from None
            raise GpuplanError(f"{self.path}{self.origin} is corrupt or not a gpuplan store ({err}): "
                               "move it away or choose another --store path") from None
        except sqlite3.DatabaseError as err:
            if write and not existed:
                raise GpuplanError(f"cannot make the store {self.path}{self.origin} ({err}): choose another "
                                   "--store path (or set GPUPLAN_STORE)") from None
            raise GpuplanError(f"{self.path}{self.origin} is corrupt or not a gpuplan store ({err}): "
                               "move it away or choose another --store path") from None
        self.con, self._writable = con, write
        return con

    def _check(self, con: sqlite3.Connection, existed: bool) -> None:
        """An existing file must be a gpuplan store of this schema, with gpuplan's columns."""
        if not existed:
            return
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if tables and "gpuplan_meta" not in tables:
            raise GpuplanError(f"{self.path} is an SQLite file of another program, not a gpuplan store: "
                               "choose another --store path")
        if not tables:
            return  # an SQLite file with nothing in it yet (a store a crash left half-made)
        meta = dict(con.execute("select key, value from gpuplan_meta").fetchall())
        if meta.get("app") != APP:
            raise GpuplanError(f"{self.path} is not a gpuplan store: choose another --store path")
        if meta.get("schema") != str(SCHEMA):
            raise GpuplanError(f"{self.path} is a gpuplan store of schema {meta.get('schema')!r}, this gpuplan "
                               f"reads schema {SCHEMA}: use the gpuplan that wrote it, or choose another --store path")
        for table, want in (("runs", RUN_COLUMNS), ("calibration", CALIBRATION_COLUMNS)):
            if table not in tables:
                continue
            have = {r[1] for r in con.execute(f"pragma table_info({table})")}
            missing = [c for c in want if c not in have]
            if missing:
                raise GpuplanError(f"{self.path} is not a usable gpuplan store: its {table} table has no "
                                   f"{', '.join(missing)} column(s): move it away or choose another --store path")

    def _create(self) -> bool:
        """Make the store whole in a temporary file beside it, then link it into place: a store is
        never seen half-made, and of several first uses at once one makes it and the others open it.
        True: the store exists now."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".new", dir=self.path.parent)
        os.close(fd)
        try:
            con = sqlite3.connect(tmp)
            try:
                self._init_schema(con)
            finally:
                con.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process made it first: use theirs
            except OSError:  # a file system without hard links: rename, unless it appeared meanwhile
                if not self.path.exists():
                    os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return True

    @staticmethod
    def _init_schema(con: sqlite3.Connection) -> None:
        with con:
            con.execute("create table if not exists gpuplan_meta (key text primary key, value text)")
            con.execute("insert or ignore into gpuplan_meta values ('app', ?), ('schema', ?)", (APP, str(SCHEMA)))
            con.execute("""create table if not exists runs (
                id integer primary key, created real, kind text, gpu text, model text,
                layout text, scenario text, measured text, predicted text)""")
            con.execute("""create table if not exists calibration (
                gpu text primary key, memory_factor real, compute_factor real, n integer, created real)""")

    def _has_table(self, con: sqlite3.Connection, table: str) -> bool:
        return con.execute("select 1 from sqlite_master where type='table' and name=?", (table,)).fetchone() \
            is not None

    def _locked_error(self, what: str | None = None) -> GpuplanError:
        """Another process held the store past the lock wait (``what``: the operation that waited)."""
        where = f"store {self.path}{self.origin}" + (f": cannot {what}: it is" if what else " is")
        return GpuplanError(f"{where} locked by another process (waited {LOCK_WAIT_S:.0f} s): try again when it "
                            "has finished")

    def _sql(self, what: str, fn: Any) -> Any:
        """Run ``fn`` and turn SQLite's errors into one line naming the store."""
        try:
            return fn()
        except sqlite3.DatabaseError as err:  # OperationalError included
            if isinstance(err, sqlite3.OperationalError) and _locked(err):
                raise self._locked_error(what) from None
            raise GpuplanError(f"store {self.path}{self.origin}: cannot {what} ({err}): check the file or "
                               "choose another --store path") from None

    # ---- the public interface -------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return self.con is not None or self._kind() == "file"

    def add_run(self, *, kind: str, gpu: str, model: str, layout: dict, scenario: dict, measured: dict,
                predicted: dict) -> int:
        con = self._open(write=True)

        def insert() -> int:
            with con:
                cur = con.execute(
                    "insert into runs (created, kind, gpu, model, layout, scenario, measured, predicted) "
                    "values (?, ?, ?, ?, ?, ?, ?, ?)",
                    (time.time(), kind, gpu, model, json.dumps(layout), json.dumps(scenario),
                     json.dumps(measured), json.dumps(predicted)))
            return int(cur.lastrowid)
        return self._sql("record the run", insert)

    def runs(self) -> list[dict[str, Any]]:
        """Every stored run, JSON columns decoded; a row whose JSON is broken is one error line
        naming its id (and how to delete it)."""
        con = self._open(write=False)
        if not self._has_table(con, "runs"):
            return []
        rows = self._sql("read the runs", lambda: con.execute(
            f"select {', '.join(RUN_COLUMNS)} from runs order by id").fetchall())
        out = []
        for r in rows:
            d = dict(zip(RUN_COLUMNS, r, strict=True))
            for k in ("layout", "scenario", "measured", "predicted"):
                try:  # through the boundary: a store is a file from outside too
                    d[k] = load_json(d[k], f"run {d['id']} {k}") if isinstance(d[k], str | bytes) else None
                    if d[k] is None:
                        raise ValueError
                except (TypeError, ValueError):  # GpuplanError is a ValueError
                    shown = "NULL" if d[k] is None else "not JSON"
                    raise GpuplanError(f"store {self.path}: run {d['id']} is malformed ({k} is {shown}): "
                                       f"{self.delete_hint('runs', 'id', d['id'])}") from None
            out.append(d)
        return out

    def delete_hint(self, table: str, key: str, value: Any) -> str:
        return (f"delete it (sqlite3 {self.path} \"delete from {table} where {key} = {value!r}\") "
                "or choose another --store path")

    def set_calibration(self, gpu: str, memory_factor: float, compute_factor: float, n: int) -> None:
        where = f"calibration for {gpu}"
        memory_factor = check_factor(memory_factor, "memory_factor", where)
        compute_factor = check_factor(compute_factor, "compute_factor", where)
        con = self._open(write=True)

        def write() -> None:
            with con:
                con.execute("insert or replace into calibration values (?, ?, ?, ?, ?)",
                            (gpu, memory_factor, compute_factor, n, time.time()))
        self._sql("store the calibration", write)

    def calibration(self, gpu: str) -> tuple[float, float] | None:
        """(memory_factor, compute_factor) stored for ``gpu``, or None; a stored value that is not a
        finite number from MIN_FACTOR to MAX_FACTOR is one error line naming the store."""
        con = self._open(write=False)
        if not self._has_table(con, "calibration"):
            return None
        row = self._sql("read the calibration", lambda: con.execute(
            "select memory_factor, compute_factor from calibration where gpu = ?", (gpu,)).fetchone())
        if row is None:
            return None
        where = f"the store {self.path} holds a bad calibration for {gpu}"
        fix = f": {self.delete_hint('calibration', 'gpu', gpu)}, then run `gpuplan calibrate` again"
        try:
            return (check_factor(row[0], "memory_factor", where), check_factor(row[1], "compute_factor", where))
        except GpuplanError as err:
            raise GpuplanError(f"{err}{fix}") from None

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


def calibration_factors(ref: Any, gpu: str) -> tuple[float, float] | None:
    """The (memory_factor, compute_factor) a scenario's ``hardware.calibration`` asks for on ``gpu``.

    The words of ``policy.choose``: off (None, false, 'no', …) is no calibration (None); default
    (true, 'default', 'yes', …) is the default store; anything else is the path of a store. The
    store is opened read-only and must exist and hold a valid row for ``gpu``; every failure is
    one GpuplanError line beginning ``hardware.calibration``.
    """
    chosen = choose(ref, KEY, WANTS)
    if chosen is None:
        return None
    try:
        store = Store(None if chosen == DEFAULT else chosen)
        try:
            factors = store.calibration(gpu)
        finally:
            store.close()
    except GpuplanError as err:
        raise GpuplanError(f"{KEY}: {err}") from None
    if factors is None:
        raise GpuplanError(f"{KEY}: the store {store.path} has no calibration for {gpu}: "
                           "run `gpuplan profile` on it, then `gpuplan calibrate`")
    return factors
