"""The web application: four pages (a shell each; the page's script asks the JSON API) and the
API, whose answers are the CLI's ``--json`` answers byte for byte (see answers.py). Every
response that is not an answer is ``{"error": "one line"}``: 422 for bad input, 413 for a body
over the limit, 404/405 for a wrong address or method, 503 when busy, 500 for a bug — never a
traceback."""

from __future__ import annotations

import contextlib
import html
import json
import re
import sys
import traceback
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gpuplan.errors import shown
from gpuplan.serve.answers import MAX_BODY_BYTES
from gpuplan.serve.docs import docs_page, openapi
from gpuplan.serve.pool import INTERNAL, Pool, Reply, compute, error

STATIC = Path(__file__).parent / "static"
PAGES = {"/": ("size", "Size a run"), "/plan": ("plan", "Plan"), "/compare": ("compare", "Compare"),
         "/export": ("export", "Export")}
SCRIPTS = ("format.js", "charts.js", "form.js", "size.js", "plan.js", "compare.js", "export.js", "main.js")
# the page may load only what this server sends: no CDN, no third-party request
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
SEARCHES = ("fit", "plan", "export", "report")
WARM_UP = b'{"model": "llama-3.1-8b", "gpu": "h100-sxm"}'


def _reply(r: Reply, filename: str | None = None) -> Response:
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'} if filename and r.status == 200 else {}
    if r.cached:
        headers["X-Gpuplan-Cache"] = "hit"  # a search asked again: answered from the recent answers
    return Response(r.body, status_code=r.status, media_type=r.media_type, headers=headers)


async def _body(request: Request) -> bytes | Reply:
    """The request body, read no further than the limit."""
    too_big = error(413, f"request body over {MAX_BODY_BYTES:,} bytes: send one scenario (or a short list)")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        return too_big
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return too_big
            chunks.append(chunk)
    except ClientDisconnect:  # the client went away mid-body: nothing to answer, nothing to log
        return error(400, "the client closed the connection before the whole body was sent")
    return b"".join(chunks)


def _page(request: Request) -> Response:
    page, title = PAGES[request.url.path]
    nav = "".join(f'<a href="{path}"{" aria-current=page" if p == page else ""}>{html.escape(t)}</a>'
                  for path, (p, t) in PAGES.items())
    scripts = "".join(f'<script src="/static/{s}?v={_version()}" defer></script>' for s in SCRIPTS)
    text = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>gpuplan — {html.escape(title)}</title><link rel="icon" href="data:,">'
            f'<link rel="stylesheet" href="/static/app.css?v={_version()}">{scripts}</head>'
            f'<body data-page="{page}" data-choices="{html.escape(json.dumps(_choices()))}">'
            f'<header><a class="brand" href="/">gpuplan</a><nav>{nav}'
            f'<a href="/docs">API</a></nav></header><main id="app"><noscript>These pages need JavaScript; '
            f'the API at <a href="/docs">/docs</a> does not.</noscript></main></body></html>')
    return HTMLResponse(text, headers={"Content-Security-Policy": CSP})


@cache
def _choices() -> dict[str, list[Any]]:
    """The values the form's menus offer: the scenario's own typed choices."""
    from typing import get_args

    from gpuplan.spec import job

    # the 4-bit recipes by the words users give (catalog/stacks.json precision_words: the fp8 path, their recipe)
    return {"method": list(job.METHODS), "precision": [*job.PRECISIONS, *job.FP4_RECIPES],
            "optimizer": list(job.OPTIMIZERS),
            "framework": list(get_args(job.Framework)), "kernels": list(job.KERNELS),
            "moe_dispatcher": list(job.MOE_DISPATCHERS),
            "recompute": list(get_args(job.Recompute)),
            "pp_schedule": list(get_args(job.PPSchedule)), "offload": list(get_args(job.Offload)),
            "zero": [0, 1, 2, 3], "sequence_parallel": ["true", "false"], "expandable_segments": ["true", "false"]}


@cache
def _version() -> str:
    import gpuplan

    return gpuplan.__version__


@cache
def _catalogue(name: str) -> bytes:
    """``gpuplan gpus|models|fabrics --json``, as printed."""
    from gpuplan.catalog.hardware import fabrics, gpus
    from gpuplan.catalog.models import list_models
    from gpuplan.report.text import dumps

    rows = {"gpus": gpus, "fabrics": fabrics, "models": list_models}[name]()
    return dumps(rows).encode()


LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::[0-9]{1,5})?")  # a Host header: a name, an optional port


class HostCheck:
    """Answer only requests addressed to this server's own names (``hosts``; None: any). A page on
    another site that points a name of its own at 127.0.0.1 (DNS rebinding) is refused with 421."""

    def __init__(self, app: Any, hosts: frozenset[str] | None) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.hosts is not None and scope["type"] == "http":
            hosts = [v.decode("latin-1").lower() for k, v in scope["headers"] if k == b"host"]
            host = hosts[0] if len(hosts) == 1 else ""
            m = HOST.fullmatch(host)  # the whole header: `[::1]evil.com` or `localhost:8000, evil.com` is not a name
            if m is None or m.group(1) not in self.hosts:
                name = host if m is None else m.group(1)
                message = f"this server answers requests to {', '.join(sorted(self.hosts))}, not {shown(name, 60)}"
                await _reply(error(421, message))(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(*, workers: int = 2, limit_s: float = 60.0, allow_paths: bool = False,
              ready: Callable[[], None] | None = None, hosts: frozenset[str] | None = LOCAL_NAMES) -> Starlette:
    """The ASGI application. ``workers`` processes search (fit, plan, export, report), each request
    under ``limit_s`` seconds; ``allow_paths`` lets requests name files (model configs, calibration);
    ``ready`` is called once the workers have started and the first answer is warm; ``hosts``: the
    names requests may be addressed to (None: any, for a server exposed with ``--host``)."""
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state["pool"] = pool = Pool(workers, limit_s, allow_paths)
        await pool.warm()
        compute("evaluate", WARM_UP, allow_paths, limit_s)  # modules and catalogues read before the first visitor
        if ready is not None:
            ready()
        try:
            yield
        finally:
            pool.close()

    async def evaluate(request: Request) -> Response:
        data = await _body(request)
        return _reply(data if isinstance(data, Reply) else compute("evaluate", data, allow_paths, limit_s))

    def search(kind: str) -> Any:
        async def endpoint(request: Request) -> Response:
            data = await _body(request)
            if isinstance(data, Reply):
                return _reply(data)
            reply = await state["pool"].run(kind, data)
            fmt = "html" if reply.media_type.startswith("text/html") else "md"
            return _reply(reply, f"gpuplan-report.{fmt}" if kind == "report" else None)
        return endpoint

    def catalogue(name: str) -> Any:
        async def endpoint(_request: Request) -> Response:
            return Response(_catalogue(name), media_type="application/json")
        return endpoint

    routes: list[Route | Mount] = [Route(path, _page) for path in PAGES]
    routes += [Route("/api/evaluate", evaluate, methods=["POST"])]
    routes += [Route(f"/api/{kind}", search(kind), methods=["POST"]) for kind in SEARCHES]
    routes += [Route(f"/api/{name}", catalogue(name)) for name in ("gpus", "models", "fabrics")]
    routes += [Route("/openapi.json", lambda _r: JSONResponse(openapi(_version()))),
               Route("/docs", lambda _r: HTMLResponse(docs_page(_version()), headers={"Content-Security-Policy": CSP})),
               Mount("/static", StaticFiles(directory=STATIC), name="static")]
    handlers = {HTTPException: _http_error, Exception: _bug}
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)  # type: ignore[arg-type]
    app.add_middleware(HostCheck, hosts=hosts)
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = (f"no page or endpoint at {request.url.path}: the pages are {', '.join(PAGES)}; "
                   "the API is described at /docs")
    elif exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}: see /docs"
    else:
        message = str(exc.detail)
    return _reply(error(exc.status_code, message))


async def _bug(_request: Request, _exc: Exception) -> Response:
    traceback.print_exc(file=sys.stderr)
    return _reply(error(500, INTERNAL))
