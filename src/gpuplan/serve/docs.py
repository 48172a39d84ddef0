"""The API's description: an OpenAPI 3.1 document (``/openapi.json``) and a page that reads it
(``/docs``), both served from here — no documentation viewer fetched from elsewhere."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from gpuplan.serve.answers import MAX_BODY_BYTES, MAX_ITEMS, MAX_TOP, MAX_WEB_GPUS

EXAMPLE = {"model": "llama-3.1-70b", "gpu": "h100-sxm", "gpus": 64, "tokens": "1.4T", "global_batch": 1024}
BODY = ("A scenario as JSON: the CLI's flags by name (`gpu`, `gpus`, `seq_len`, `tp`, ...; the values the "
        "CLI accepts, such as \"1.4T\" or \"30d\"), and/or a scenario file's sections (`model`, `hardware`, "
        "`training`, `layout`); flags win, as on the command line. A list of scenarios — a JSON list, or "
        "`{\"scenarios\": [...]}` with flags beside it that apply to each — gives a list of answers, a bad "
        "item its own `{\"error\": ...}`.")
ENDPOINTS: list[tuple[str, str, str, str, dict[str, Any]]] = [
    ("post", "/api/evaluate", "gpuplan evaluate --json",
     f"Memory, step time, time to train and cost of one configuration (≤ {MAX_ITEMS['evaluate']} per list).",
     EXAMPLE),
    ("post", "/api/fit", "gpuplan fit --json",
     "Smallest GPU count that fits and its fastest layout. Options: `max_gpus`; `gpu` may be "
     "\"h100-sxm,h200\", a list, or \"all\" (one answer per type).", {"model": "llama-3.1-70b", "gpu": "h100-sxm"}),
    ("post", "/api/plan", "gpuplan plan --json",
     f"Search GPU type × count × layout. Options: `objective` (time|cost), `deadline` (\"14d\"), `budget`, "
     f"`max_gpus` (≤ {MAX_WEB_GPUS:,}), `top` (≤ {MAX_TOP}), `threshold`; `gpu` as for fit.",
     {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tokens": "1T", "objective": "cost"}),
    ("post", "/api/export", "gpuplan export --json",
     "The scenario's (or the planned) layout as a launch config. Options: `to` (torchtitan | deepspeed | "
     "accelerate | megatron | torchrun), `objective`, `max_gpus`.",
     {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 16, "to": "torchtitan"}),
    ("post", "/api/report", "gpuplan evaluate|plan --report FILE",
     "The report document: `kind` (evaluate|plan), `format` (md|html), then the body of that endpoint.",
     {"kind": "evaluate", "format": "md", "model": "llama-3.1-8b", "gpu": "h100-sxm"}),
    ("get", "/api/gpus", "gpuplan gpus --json", "The GPU catalogue.", {}),
    ("get", "/api/models", "gpuplan models --json", "The model catalogue (with aliases).", {}),
    ("get", "/api/fabrics", "gpuplan fabrics --json", "The interconnect catalogue.", {}),
]
ERRORS = {"413": f"body over {MAX_BODY_BYTES:,} bytes", "422": "bad input: the CLI's one-line message",
          "503": "busy: too many searches waiting; try again"}
OTHER_ERRORS = {"404": "no such page or endpoint", "405": "wrong method", "421": "addressed to a name that is not "
                "this machine's (a server on 127.0.0.1 answers 127.0.0.1, localhost and [::1] only)",
                "500": "a bug in gpuplan (its traceback goes to the server's console, never to the client)"}


def _operation(method: str, path: str, cli: str, text: str, example: dict[str, Any]) -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    op: dict[str, Any] = {"summary": cli, "description": text,
                          "responses": {"200": {"description": f"what `{cli}` prints"}}}
    if method == "post":
        op["requestBody"] = {"required": True, "description": BODY, "content": {"application/json": {
            "schema": {"oneOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]},
            "example": example}}}
        op["responses"] |= {code: {"description": d} | err for code, d in ERRORS.items()}
    return op


def openapi(version: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for method, path, cli, text, example in ENDPOINTS:
        paths.setdefault(path, {})[method] = _operation(method, path, cli, text, example)
    return {"openapi": "3.1.0",
            "info": {"title": "gpuplan", "version": version,
                     "description": "The planner's answers over HTTP: the same inputs, numbers and errors as "
                                    "the command line's --json (SI units: bytes, seconds, FLOPs, USD)."},
            "paths": paths,
            "components": {"schemas": {"Error": {"type": "object", "required": ["error"],
                                                 "properties": {"error": {"type": "string"}}}}}}


def _text(s: str) -> str:
    """Escaped text with its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(s, quote=False))


def docs_page(version: str) -> str:
    rows = "".join(
        f"<section><h2><code>{m.upper()} {html.escape(p)}</code></h2><p>= <code>{html.escape(c)}</code>. "
        f"{_text(t)}</p>"
        + (f"<pre>curl -s localhost:8000{p} -d '{html.escape(json.dumps(ex))}'</pre>" if m == "post" else "")
        + "</section>" for m, p, c, t, ex in ENDPOINTS)
    errs = "".join(f"<li><b>{c}</b>: {_text(d)}</li>" for c, d in (ERRORS | OTHER_ERRORS).items())
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>gpuplan API</title>'
            f'<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/app.css"></head>'
            f'<body class="docs"><header><a class="brand" href="/">gpuplan</a><nav><a href="/">Size a run</a>'
            f'<a href="/plan">Plan</a><a href="/compare">Compare</a><a href="/export">Export</a>'
            f'<a href="/docs" aria-current=page>API</a></nav></header><main><h1>gpuplan {html.escape(version)} API</h1>'
            f'<p>{_text(BODY)}</p><p>Errors are <code>{{"error": "one line"}}</code>:</p><ul>{errs}</ul>'
            f'{rows}<p>Machine-readable: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p></main>'
            f'</body></html>')
