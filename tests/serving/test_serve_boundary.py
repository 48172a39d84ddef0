"""Issue 25, the web side: a request body's numbers, options and text are refused in one line (HTTP
422, never a 500); a batch answers every item but a bad one; the host check takes a whole Host header
or nothing; a client that goes away mid-body is not a bug; `serve` ends without leaking semaphores."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from .conftest import start

pytest.importorskip("starlette")

from gpuplan.serve.pool import compute  # noqa: E402 - after the skip: starlette is optional

GOOD = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 8}
KINDS = ["evaluate", "fit", "plan", "export", "report"]


def _ask(kind: str, body: bytes | dict | list) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = compute(kind, data, False, 60.0)
    return reply.status, json.loads(reply.body) if reply.media_type == "application/json" else reply.body


def _one_line(status: int, answer: Any) -> str:
    assert status == 422, (status, answer)
    message = answer["error"]
    assert message.isprintable() and "internal error" not in message
    return message


@pytest.mark.parametrize("kind", KINDS)
def test_an_integer_of_5000_digits_is_422_on_every_endpoint(kind):
    to = b'"to": "torchrun", ' if kind == "export" else b""
    body = b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", ' + to + b'"gpus": ' + b"1" * 5000 + b"}"
    message = _one_line(*_ask(kind, body))
    assert message == ("scenario.hardware.gpus is a number of 5,000 digits: no value in gpuplan needs more than 40; "
                       "give a realistic value")


@pytest.mark.parametrize(("option", "says"), [
    ({"kind": []}, "kind must be evaluate or plan, got []"), ({"kind": {}}, "kind must be evaluate or plan, got {}"),
    ({"format": {}}, "format must be md or html, got {}"), ({"format": ["md"]}, "format must be md or html, got"),
    ({"kind": "\ud800"}, "kind = '\\ud800' holds a lone surrogate")])
def test_report_kind_and_format_of_any_type_are_422(option, says):
    assert says in _one_line(*_ask("report", {**GOOD, **option}))


@pytest.mark.parametrize(("kind", "option"), [
    ("plan", {"top": "1e308k"}), ("plan", {"max_gpus": "1e308k"}), ("fit", {"max_gpus": "1e308k"}),
    ("report", {"kind": "plan", "top": "1e308k"}), ("export", {"to": "torchrun", "max_gpus": "1e308k"})])
def test_an_overflowing_count_option_is_422(kind, option):
    assert "is too large to use (past 1e308)" in _one_line(*_ask(kind, {**GOOD, **option}))


def test_a_long_number_or_a_surrogate_in_an_option_is_422():
    body = b'{"model": "llama-3.1-8b", "gpu": "h100-sxm", "top": ' + b"9" * 400 + b"}"
    assert _one_line(*_ask("plan", body)).startswith("top is a number of 400 digits")
    assert "lone surrogate" in _one_line(*_ask("plan", {**GOOD, "objective": "time\udc00"}))


@pytest.mark.parametrize("kind", ["evaluate", "report"])
def test_a_lone_surrogate_in_a_scenario_is_422(kind):
    message = _one_line(*_ask(kind, {**GOOD, "name": "\ud800"}))
    assert message.startswith("scenario.name = '\\ud800' holds a lone surrogate")


def test_a_batch_answers_every_item_but_the_one_with_a_400_digit_number():
    flags = '{"model": "llama-3.1-8b", "gpu": "h100-sxm", "gpus": 1' + "0" * 399 + "}"
    section = '{"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 1' + "0" * 4500 + "}}"
    text = f"[{json.dumps(GOOD)}, {flags}, {section}, {json.dumps(GOOD)}]"
    status, out = _ask("evaluate", text.encode())
    assert status == 200 and len(out) == 4
    assert "memory" in out[0] and "memory" in out[3]
    assert out[1] == {"error": "scenario.hardware.gpus is a number of 400 digits: no value in gpuplan needs more "
                               "than 40; give a realistic value"}
    assert out[2]["error"].startswith("scenario.hardware.gpus is a number of 4,501 digits")


# ---- the host check and a client that goes away: the ASGI application itself ----------------------------------
def _call(app: Any, headers: list[tuple[bytes, bytes]], messages: list[dict], path: str = "/api/gpus",
          method: str = "GET") -> list[dict]:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
    sent: list[dict] = []
    inbox = list(messages)

    async def receive() -> dict:
        return inbox.pop(0) if inbox else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


@pytest.mark.parametrize(("host", "status"), [
    ("[::1]evil.com", 421), ("localhost:8000, evil.com", 421), ("localhost:80:80", 421), ("evil.com", 421),
    ("localhost.evil.com", 421), ("", 421), ("localhost:8000", 200), ("[::1]:8000", 200), ("127.0.0.1", 200),
    ("LOCALHOST", 200)])
def test_the_host_check_reads_the_whole_header(host, status):
    from gpuplan.serve.app import LOCAL_NAMES, HostCheck

    async def ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = _call(HostCheck(ok, LOCAL_NAMES), [(b"host", host.encode())], [])
    assert sent[0]["status"] == status


def test_two_host_headers_are_refused():
    from gpuplan.serve.app import LOCAL_NAMES, HostCheck

    sent = _call(HostCheck(None, LOCAL_NAMES), [(b"host", b"localhost"), (b"host", b"evil.com")], [])
    assert sent[0]["status"] == 421


def test_a_client_gone_mid_body_is_not_an_exception(capsys):
    from gpuplan.serve.app import build_app

    app = build_app(workers=1)
    body = [{"type": "http.request", "body": b'{"model": ', "more_body": True}, {"type": "http.disconnect"}]
    sent = _call(app, [(b"host", b"localhost"), (b"content-type", b"application/json")], body,
                 path="/api/evaluate", method="POST")  # raised ClientDisconnect: "Exception in ASGI application"
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"]) == {"error": "the client closed the connection before the whole body was sent"}
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_ends_without_leaking_semaphores(sig):
    proc, _ = start("--workers", "2")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)  # the resource tracker holds stderr open until it has spoken
    assert "leaked semaphore" not in err and "resource_tracker" not in err, err[-2000:]
    assert proc.returncode in (-signal.SIGTERM, 0, 130), (proc.returncode, err[-2000:])
