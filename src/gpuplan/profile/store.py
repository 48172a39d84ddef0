"""The local store of measured runs: an SQLite file (embedded, no server), one row per run.

Path: ``--store PATH``, else ``$GPUPLAN_STORE``, else ``~/.cache/gpuplan/runs.sqlite3``.
Every write is a transaction (a crash leaves the previous state); a file that is not SQLite,
or an SQLite file that is not a gpuplan store, is refused with a clear message.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

APP, SCHEMA = "gpuplan", 1


def default_path() -> Path:
    env = os.environ.get("GPUPLAN_STORE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "gpuplan" / "runs.sqlite3"


class Store:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_path()
        existed = self.path.exists()
        if existed and self.path.is_dir():
            raise GpuplanError(f"store {self.path} is a folder: give a file path (--store runs.sqlite3)")
        if existed:
            with open(self.path, "rb") as f:
                head = f.read(16)
            if head and head != b"SQLite format 3\x00":
                raise GpuplanError(f"{self.path} is not a gpuplan store (not an SQLite file): "
                                   "choose another --store path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = sqlite3.connect(self.path)
            tables = {r[0] for r in self.con.execute("select name from sqlite_master where type='table'")}
            if existed and tables and "gpuplan_meta" not in tables:
                raise GpuplanError(f"{self.path} is an SQLite file of another program, not a gpuplan store: "
                                   "choose another --store path")
            with self.con:
                self.con.execute("create table if not exists gpuplan_meta (key text primary key, value text)")
                self.con.execute("insert or ignore into gpuplan_meta values ('app', ?), ('schema', ?)",
                                 (APP, str(SCHEMA)))
                self.con.execute("""create table if not exists runs (
                    id integer primary key, created real, kind text, gpu text, model text,
                    layout text, scenario text, measured text, predicted text)""")
                self.con.execute("""create table if not exists calibration (
                    gpu text primary key, memory_factor real, compute_factor real, n integer, created real)""")
            meta = dict(self.con.execute("select key, value from gpuplan_meta"))
            if meta.get("app") != APP:
                raise GpuplanError(f"{self.path} is not a gpuplan store: choose another --store path")
        except sqlite3.DatabaseError as err:
            raise GpuplanError(f"{self.path} is corrupt or not a gpuplan store ({err}): "
                               "move it away or choose another --store path") from None

    def add_run(self, *, kind: str, gpu: str, model: str, layout: dict, scenario: dict, measured: dict,
                predicted: dict) -> int:
        with self.con:
            cur = self.con.execute(
                "insert into runs (created, kind, gpu, model, layout, scenario, measured, predicted) "
                "values (?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), kind, gpu, model, json.dumps(layout), json.dumps(scenario), json.dumps(measured),
                 json.dumps(predicted)))
        return int(cur.lastrowid)

    def runs(self) -> list[dict[str, Any]]:
        rows = self.con.execute("select id, created, kind, gpu, model, layout, scenario, measured, predicted "
                                "from runs order by id").fetchall()
        keys = ("id", "created", "kind", "gpu", "model", "layout", "scenario", "measured", "predicted")
        out = []
        for r in rows:
            d = dict(zip(keys, r, strict=True))
            for k in ("layout", "scenario", "measured", "predicted"):
                d[k] = json.loads(d[k])
            out.append(d)
        return out

    def set_calibration(self, gpu: str, memory_factor: float, compute_factor: float, n: int) -> None:
        with self.con:
            self.con.execute("insert or replace into calibration values (?, ?, ?, ?, ?)",
                             (gpu, memory_factor, compute_factor, n, time.time()))

    def calibration(self, gpu: str) -> tuple[float, float] | None:
        row = self.con.execute("select memory_factor, compute_factor from calibration where gpu = ?",
                               (gpu,)).fetchone()
        return (row[0], row[1]) if row else None

    def close(self) -> None:
        self.con.close()
