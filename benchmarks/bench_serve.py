"""Load test of `gpuplan serve` on loopback: concurrent clients sending a mix of evaluate and plan
requests; evaluate latency idle, under the mixed load, and under the mixed load with a Llama 3.1
405B plan over every GPU type in flight the whole time.

    PYTHONPATH=src python benchmarks/bench_serve.py                 # 50 clients, 30 s per phase
    PYTHONPATH=src python benchmarks/bench_serve.py --clients 50 --seconds 10
    PYTHONPATH=src python benchmarks/bench_serve.py --soak 1800 --clients 20   # 30 min of distinct scenarios

Targets (issue 15): no errors; evaluate p95 < 100 ms under load, < 250 ms with the 405B plan in
flight. Reported as ratios too (p95 under load / p95 idle), since absolute numbers depend on the
machine. Each client is a person on the page: a request, then a pause (``--think``, mean seconds)
before the next, one in ``--plan-every`` requests a plan. Traffic goes to 127.0.0.1 only; every
loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-14b"]
GPUS = ["h100-sxm", "a100-80gb-sxm", "h200"]
PLAN_MODELS = ["llama-3.1-8b", "mistral-7b", "llama-3.2-3b"]
PLAN_GPUS = ["h100-sxm", "a100-80gb-sxm", "l40s"]
BIG_PLAN = {"model": "llama-3.1-405b", "gpu": "all", "global_batch": 2048}


def evaluate_body(rng: random.Random) -> dict:
    return {"model": rng.choice(MODELS), "gpu": rng.choice(GPUS), "gpus": rng.choice([8, 16, 64, 256]),
            "zero": rng.choice([1, 3]), "tp": rng.choice([1, 8]), "micro_batch": rng.choice([1, 2]),
            "tokens": "1T", "global_batch": 1024}


def plan_body(rng: random.Random) -> dict:
    """One of 108 distinct plans (the server keeps its 64 most recent answers: many are searched anew)."""
    return {"model": rng.choice(PLAN_MODELS), "gpu": rng.choice(PLAN_GPUS), "max_gpus": rng.choice([64, 256, 1024]),
            "tokens": "1T", "global_batch": rng.choice([512, 1024]), "objective": rng.choice(["time", "cost"]),
            "top": 3}


class Connection:
    """One keep-alive HTTP/1.1 connection (what a browser tab holds), requests one after another."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict) -> tuple[int, bytes, bool]:
        """One request; a kept-alive connection the server has closed meanwhile is opened anew once,
        as a browser does (nothing of the request was answered on it)."""
        fresh = self.writer is None
        try:
            return await self._post(path, body)
        except (ConnectionError, asyncio.IncompleteReadError) as err:
            if fresh or (isinstance(err, asyncio.IncompleteReadError) and err.partial):
                raise
            self.close()
            self.writer = None
            return await self._post(path, body)

    async def _post(self, path: str, body: dict) -> tuple[int, bytes, bool]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        lines = head.lower().split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
        return status, await self.reader.readexactly(length), b"x-gpuplan-cache: hit" in lines

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class Record:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {"evaluate": [], "plan": [], "big": []})
    errors: list[str] = field(default_factory=list)
    cache_hits: int = 0
    big_sent: int = 0


async def timed(conn: Connection, path: str, body: dict, kind: str, rec: Record) -> None:
    t0 = time.perf_counter()
    try:
        status, data, hit = await conn.post(path, body)
    except (OSError, asyncio.IncompleteReadError, ValueError) as err:
        rec.errors.append(f"{kind}: {type(err).__name__}: {err}")
        conn.close()
        conn.writer = None
        return
    if status != 200:
        rec.errors.append(f"{kind}: HTTP {status}: {data[:200]!r}")
    rec.latencies[kind].append(time.perf_counter() - t0)
    rec.cache_hits += hit and kind != "big"


async def client(host: str, port: int, seed: int, end: float, rec: Record, think_s: float, plan_every: int,
                 plan_think_s: float) -> None:
    rng = random.Random(seed)
    conn = Connection(host, port)
    await asyncio.sleep(rng.uniform(0, think_s))  # people do not all arrive at once
    try:
        while time.perf_counter() < end:
            if plan_every and rng.randrange(plan_every) == 0:
                await timed(conn, "/api/plan", plan_body(rng), "plan", rec)
                await asyncio.sleep(rng.uniform(0, 2 * plan_think_s))  # a plan is read before the next change
            else:
                await timed(conn, "/api/evaluate", evaluate_body(rng), "evaluate", rec)
                await asyncio.sleep(rng.uniform(0, 2 * think_s))
    finally:
        conn.close()


async def big_plans(host: str, port: int, end: float, rec: Record) -> None:
    """The 405B plan over every GPU type, again and again, so that one is always in flight (each asks
    for a different token count: a fresh search, never a remembered answer)."""
    conn = Connection(host, port)
    n = 0
    try:
        while time.perf_counter() < end:
            n += 1
            rec.big_sent += 1
            await timed(conn, "/api/plan", BIG_PLAN | {"tokens": f"{1000 + n}B"}, "big", rec)
    finally:
        conn.close()


async def load(host: str, port: int, *, clients: int, seconds: float, think_s: float, plan_every: int,
               big: bool, plan_think_s: float = 3.0, seed: int = 0) -> Record:
    rec = Record()
    end = time.perf_counter() + seconds
    tasks = [client(host, port, seed + i, end, rec, think_s, plan_every, plan_think_s) for i in range(clients)]
    big_task = asyncio.ensure_future(big_plans(host, port, end, rec)) if big else None
    await asyncio.gather(*tasks)
    if big_task is not None:  # the clients are done: the 405B plan still in flight is not waited for
        big_task.cancel()
        await asyncio.gather(big_task, return_exceptions=True)
    return rec


async def idle(host: str, port: int, n: int) -> Record:
    rec = Record()
    conn = Connection(host, port)
    rng = random.Random(0)
    for _ in range(n):
        await timed(conn, "/api/evaluate", evaluate_body(rng), "evaluate", rec)
    conn.close()
    return rec


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def start_server(workers: int | None = None, limit: str = "120s") -> tuple[subprocess.Popen, str, int]:
    """`gpuplan serve --port 0` in a child process; returns it with its host and port."""
    argv = [sys.executable, "-m", "gpuplan", "serve", "--port", "0", "--quiet", "--time-limit", limit]
    if workers:
        argv += ["--workers", str(workers)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "serving http://" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line}{proc.stderr.read()}")
    address = line.split("http://", 1)[1].split("/", 1)[0]
    host, port = address.rsplit(":", 1)
    return proc, host, int(port)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def summary(name: str, rec: Record, seconds: float) -> dict:
    ev = rec.latencies["evaluate"]
    row = {"phase": name, "evaluate_n": len(ev), "evaluate_per_s": len(ev) / seconds if seconds else None,
           "evaluate_p50_ms": pct(ev, 0.5) * 1e3, "evaluate_p95_ms": pct(ev, 0.95) * 1e3,
           "evaluate_p99_ms": pct(ev, 0.99) * 1e3, "plans": len(rec.latencies["plan"]),
           "plan_p95_s": pct(rec.latencies["plan"], 0.95), "plan_cache_hits": rec.cache_hits,
           "big_plans": len(rec.latencies["big"]),
           "big_plan_mean_s": sum(rec.latencies["big"]) / len(rec.latencies["big"]) if rec.latencies["big"] else None,
           "errors": len(rec.errors)}
    print(f"{name:28s} evaluate n={row['evaluate_n']:6d} p50 {row['evaluate_p50_ms']:7.1f} ms  p95 "
          f"{row['evaluate_p95_ms']:7.1f} ms  p99 {row['evaluate_p99_ms']:7.1f} ms | plans {row['plans']:4d} "
          f"p95 {row['plan_p95_s']:.2f} s ({rec.cache_hits} cached) | 405B plans {row['big_plans']} | "
          f"errors {row['errors']}", flush=True)
    for e in rec.errors[:5]:
        print(f"    {e}")
    return row


def distinct_body(rng: random.Random) -> dict:
    """An evaluate no client asked before (a sequence length and batch drawn from thousands): the server's
    caches see a new key with every request — the case that grew its memory (issue 25)."""
    return evaluate_body(rng) | {"seq_len": 256 * rng.randint(1, 64), "global_batch": 512 * rng.randint(1, 32)}


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def soak(host: str, port: int, pid: int, *, clients: int, seconds: float, think_s: float,
               every_s: float = 60.0) -> tuple[Record, list[tuple[float, int]]]:
    """Distinct evaluates from ``clients`` for ``seconds``, the server's main-process RSS sampled every
    ``every_s``."""
    rec, samples = Record(), []
    t0 = time.perf_counter()
    end = t0 + seconds

    async def one(seed: int) -> None:
        rng, conn = random.Random(seed), Connection(host, port)
        try:
            while time.perf_counter() < end:
                await timed(conn, "/api/evaluate", distinct_body(rng), "evaluate", rec)
                await asyncio.sleep(rng.uniform(0, 2 * think_s))
        finally:
            conn.close()

    async def sampler() -> None:
        while time.perf_counter() < end:
            samples.append((time.perf_counter() - t0, rss_bytes(pid)))
            await asyncio.sleep(min(every_s, max(0.0, end - time.perf_counter())))
        samples.append((time.perf_counter() - t0, rss_bytes(pid)))

    await asyncio.gather(sampler(), *(one(10_000 + i) for i in range(clients)))
    return rec, samples


def soak_main(args: argparse.Namespace) -> int:
    """``--soak S``: S seconds of distinct evaluates; the main process's RSS growth from the first minute's
    level to the end (target: under 10 %, no error)."""
    proc, host, port = start_server(args.workers)
    try:
        asyncio.run(idle(host, port, 200))  # imports, catalogues and the first caches: the baseline
        rec, samples = asyncio.run(soak(host, port, proc.pid, clients=args.clients, seconds=args.soak,
                                        think_s=args.think))
    finally:
        stop(proc)
    row = summary(f"soak {args.soak:.0f} s, {args.clients} clients", rec, args.soak)
    base = samples[min(1, len(samples) - 1)][1]  # after the first minute of load
    growth = samples[-1][1] / base - 1
    print("RSS MiB over time: " + ", ".join(f"{t / 60:.0f} min {b / 2**20:.1f}" for t, b in samples))
    print(f"main-process RSS {base / 2**20:.1f} -> {samples[-1][1] / 2**20:.1f} MiB ({growth:+.1%}) over "
          f"{row['evaluate_n']:,} distinct evaluates; errors {row['errors']}")
    ok = growth < 0.10 and not rec.errors
    print("target (RSS growth < 10 %, no error):", "met" if ok else "NOT met")
    if args.json:
        Path(args.json).write_text(json.dumps(row | {"rss": samples, "growth": growth}, indent=1) + "\n")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--soak", type=float, default=0.0,
                    help="instead: this many seconds of distinct evaluates, the server's RSS sampled (e.g. 1800)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--think", type=float, default=0.25, help="mean pause between a client's requests (s)")
    ap.add_argument("--plan-every", type=int, default=25, help="one request in N is a plan")
    ap.add_argument("--plan-think", type=float, default=3.0, help="mean pause after a plan (s): it is read")
    ap.add_argument("--workers", type=int, default=None, help="server's search processes (default: its own)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if args.soak:
        return soak_main(args)
    proc, host, port = start_server(args.workers)
    try:
        asyncio.run(idle(host, port, 50))  # warm
        rows = [summary("idle (1 client)", asyncio.run(idle(host, port, 300)), 0)]
        kw = {"clients": args.clients, "seconds": args.seconds, "think_s": args.think,
              "plan_every": args.plan_every, "plan_think_s": args.plan_think}
        rows.append(summary(f"{args.clients} clients, mixed", asyncio.run(load(host, port, big=False, **kw)),
                            args.seconds))
        rows.append(summary(f"{args.clients} clients + 405B plan",
                            asyncio.run(load(host, port, big=True, seed=1000, **kw)), args.seconds))
    finally:
        stop(proc)
    base = rows[0]["evaluate_p95_ms"]
    print(f"ratios: evaluate p95 under load / idle = {rows[1]['evaluate_p95_ms'] / base:.1f}, "
          f"with the 405B plan in flight / idle = {rows[2]['evaluate_p95_ms'] / base:.1f}")
    ok = (rows[1]["evaluate_p95_ms"] < 100 and rows[2]["evaluate_p95_ms"] < 250
          and not any(r["errors"] for r in rows))
    print("targets (p95 < 100 ms under load, < 250 ms with the 405B plan, no errors):", "met" if ok else "NOT met")
    plan_p95 = max(rows[1]["plan_p95_s"], rows[2]["plan_p95_s"])
    print(f"plan target (issue 23: a plan request p95 < 300 ms under this load): {plan_p95 * 1e3:.0f} ms,",
          "met" if plan_p95 < 0.3 else "NOT met")
    print(f"conditions: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} after the run")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
