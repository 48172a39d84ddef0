"""Where answers are computed. ``evaluate`` is closed-form (under a millisecond) and runs on the
event loop; everything that searches (fit, plan, export, report) runs in a pool of worker
processes at a lower CPU priority, under a time limit, so one large plan never holds up the page
for others. Every outcome is a ``Reply``: the answer, or ``{"error": "one line"}`` — a bug is
logged on the server's console and answered without its traceback."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace

from gpuplan.errors import GpuplanError
from gpuplan.serve.answers import ANSWERS, REPORT_FORMATS, read_body

JSON = "application/json"
WORKER_NICE = 10      # workers yield the CPU to the event loop (evaluate, pages) when both want it
HARD_GRACE_S = 5.0    # past the limit, a job that never reached a check is stopped by ending its worker
QUEUE_PER_WORKER = 16 # searches waiting beyond this are refused (503) rather than piled up
CACHE_ENTRIES = 64    # recent search answers kept: a page reload, a report download or a shared link asks again
INTERNAL = "internal error: gpuplan failed on this request (a bug; the server's console has the details)"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    media_type: str = JSON
    cached: bool = False


def error(status: int, message: str) -> Reply:
    return Reply(status, json.dumps({"error": message}).encode())


class TimeLimit(Exception):
    """Raised inside a search when its time is up (at the search's own progress checks)."""


def compute(kind: str, data: bytes, allow_paths: bool, limit_s: float) -> Reply:
    """One request body → its Reply: the CLI's ``--json`` answer, or one error line (HTTP 422)."""
    from gpuplan.report.text import dumps

    deadline = time.monotonic() + limit_s

    def check_time(_fraction: float, _label: str) -> None:
        if time.monotonic() > deadline:
            raise TimeLimit

    try:
        req = read_body(data, kind)
        out = ANSWERS[kind](req, allow_paths, check_time)
    except GpuplanError as err:
        return error(422, str(err))
    except TimeLimit:
        return error(422, too_long(kind, limit_s))
    except Exception:  # a bug: the console gets the traceback, the client one line
        traceback.print_exc(file=sys.stderr)
        return error(500, INTERNAL)
    _answered()
    if kind == "report":
        return Reply(200, out.encode(), REPORT_FORMATS[req.options.get("format", "md")])
    return Reply(200, dumps(out).encode())


CLEAR_EVERY = 1000  # answers between emptying the model's caches (a plan fills them again in ~0.1 s)
_count = [0]


def _answered() -> None:
    """Count an answer; every ``CLEAR_EVERY`` empty the model's caches and the search's peak tables, so distinct
    scenarios do not grow the process (model/caches.py, search/book.py)."""
    _count[0] += 1
    if _count[0] % CLEAR_EVERY == 0:
        from gpuplan.api import clear_model_caches
        from gpuplan.search.book import clear_peak_tables

        clear_model_caches()
        clear_peak_tables()


def too_long(kind: str, limit_s: float) -> str:
    return (f"the {kind} took longer than this server's limit of {limit_s:g} s: narrow it (fewer GPU types, "
            "a smaller max_gpus, a fixed layout field) or start `gpuplan serve --time-limit` with more")


def _worker_start() -> None:
    try:
        os.nice(WORKER_NICE)
    except (AttributeError, OSError):  # no nice on this platform: same priority, still off the event loop
        pass
    from gpuplan.catalog.hardware import gpus
    from gpuplan.catalog.models import list_models

    gpus(), list_models()  # the catalogues read once per worker, before the first request


def _ready() -> int:
    return os.getpid()


def _cache_key(kind: str, data: bytes) -> tuple[str, str] | None:
    """The same question however its JSON is spaced or ordered; none for what reads a local file
    (calibration), which may change while the server runs."""
    try:
        text = json.dumps(json.loads(data), sort_keys=True)
    except (ValueError, RecursionError):
        return None
    return None if "calibration" in text else (kind, text)


class Pool:
    """Worker processes for the searches, each job under ``limit_s``."""

    def __init__(self, workers: int, limit_s: float, allow_paths: bool) -> None:
        self.workers, self.limit_s, self.allow_paths = workers, limit_s, allow_paths
        self.waiting = 0
        self.grace_s = HARD_GRACE_S
        self._cache: OrderedDict[tuple[str, str], Reply] = OrderedDict()
        self._free = asyncio.Semaphore(workers)  # a job is handed over only when a worker is free,
        self._ex = self._new()                    # so its time limit counts from its start
        self._retired: list[ProcessPoolExecutor] = []  # restarted pools, their queues freed at close

    def _new(self) -> ProcessPoolExecutor:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that runs threads
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_worker_start)

    async def warm(self) -> None:
        """Start every worker now, so the first plan does not wait for Python to start."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._ex, _ready) for _ in range(self.workers)))

    async def run(self, kind: str, data: bytes) -> Reply:
        key = _cache_key(kind, data)
        if key is not None and key in self._cache:
            self._cache.move_to_end(key)
            return replace(self._cache[key], cached=True)
        reply = await self._queue(kind, data)
        if key is not None and reply.status == 200:
            self._cache[key] = reply
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return reply

    async def _queue(self, kind: str, data: bytes) -> Reply:
        if self.waiting >= self.workers * QUEUE_PER_WORKER:
            return error(503, f"the server is busy: {self.waiting} searches are running or waiting; try again")
        self.waiting += 1
        try:
            async with self._free:
                return await self._run(kind, data)
        finally:
            self.waiting -= 1

    async def _run(self, kind: str, data: bytes) -> Reply:
        ex = self._ex
        try:
            job = asyncio.get_running_loop().run_in_executor(ex, compute, kind, data, self.allow_paths, self.limit_s)
            return await asyncio.wait_for(job, self.limit_s + self.grace_s)
        except TimeoutError:
            self._restart(ex)
            return error(422, too_long(kind, self.limit_s))
        except BrokenProcessPool:
            self._restart(ex)
            return error(503, "a worker stopped (another request ran past the time limit): try again")

    def _restart(self, ex: ProcessPoolExecutor) -> None:
        """End the pool's workers (a job past its limit cannot be stopped any other way) and start anew."""
        if ex is not self._ex:
            return  # already replaced by another request's restart
        _terminate(ex)
        ex.shutdown(wait=False, cancel_futures=True)  # not waited for here: the event loop goes on
        self._retired.append(ex)
        self._ex = self._new()

    def close(self) -> None:
        """End the workers and wait for each pool's own thread: it lets go of the pool's queues, whose
        semaphores are then freed now. `serve` may end by SIGTERM's default action right after, with no
        clean-up of the interpreter, and the resource tracker would report them as leaked."""
        for ex in (*self._retired, self._ex):
            _terminate(ex)
            ex.shutdown(wait=True, cancel_futures=True)
        self._retired.clear()


def _terminate(ex: ProcessPoolExecutor) -> None:
    for proc in list((getattr(ex, "_processes", None) or {}).values()):  # no public handle before 3.14
        proc.terminate()
