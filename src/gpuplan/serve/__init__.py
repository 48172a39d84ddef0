"""``gpuplan serve``: the planner as a local web page and JSON API (``pip install "gpuplan[serve]"``).

    gpuplan serve                      # http://127.0.0.1:8000
    curl -s localhost:8000/api/evaluate -d '{"model": "llama-3.1-70b", "gpu": "h100-sxm", "gpus": 64}'

The answers are the CLI's ``--json`` answers; see answers.py for the request bodies.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from gpuplan.errors import GpuplanError

DEFAULT_PORT = 8000
KEEP_ALIVE_S = 30  # an idle page's connection stays open this long (uvicorn's default, 5 s, is shorter than a read)
INSTALL = 'gpuplan serve needs the web server: pip install "gpuplan[serve]" (starlette, uvicorn)'


def default_workers() -> int:
    """Search processes: one per core, at most four (they run at a lower priority than the event loop,
    which answers evaluate and the pages, so it keeps its share of a core)."""
    return max(1, min(4, os.cpu_count() or 1))


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port is one clear line (``port 0``: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP: asyncio then sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise GpuplanError(f"cannot listen on {host}:{port} ({err.strerror or err}): give another --port "
                           "(or --port 0 for any free one)") from None
    sock.listen(128)
    return sock


def serve(*, host: str = "127.0.0.1", port: int = DEFAULT_PORT, workers: int | None = None,
          limit_s: float = 60.0, allow_paths: bool = False, quiet: bool = False) -> None:
    """Run the server until interrupted; prints the address it listens on."""
    try:
        import uvicorn

        from gpuplan.serve.app import build_app
    except ImportError:
        raise GpuplanError(INSTALL) from None
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:  # said once the workers run: a client that waits for this line is answered at once
        print(f"gpuplan: serving http://{shown}:{sock.getsockname()[1]}/ (API at /api, described at /docs; "
              "Ctrl-C stops)", file=sys.stderr, flush=True)

    from gpuplan.serve.app import LOCAL_NAMES

    # on a loopback address only this machine's names are answered; `--host` exposing it answers any name
    hosts = LOCAL_NAMES if host in ("127.0.0.1", "localhost", "::1") else None
    app = build_app(workers=workers or default_workers(), limit_s=limit_s, allow_paths=allow_paths, ready=ready,
                    hosts=hosts)
    config = uvicorn.Config(app, log_level="warning" if quiet else "info", access_log=not quiet,
                            timeout_graceful_shutdown=2, timeout_keep_alive=KEEP_ALIVE_S)
    _server(uvicorn)(config).run(sockets=[sock])


def _server(uvicorn: Any) -> type:
    class Server(uvicorn.Server):  # type: ignore[misc,name-defined]
        """uvicorn's server, except that a signal arriving while the application starts still ends it through
        the application's shutdown: uvicorn returns from ``startup`` and ends without it, and the worker pool
        (which the shutdown ends) would be left running, holding the server's stderr and its semaphores."""

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.should_exit and not self.lifespan.should_exit:  # started, but a signal came meanwhile
                await self.shutdown(sockets=sockets)

    return Server
