"""`gpuplan serve` on the command line: bad flags are one line (exit 2); a taken port is one line;
without the extra, the install hint."""

from __future__ import annotations

import socket

import pytest

from .conftest import cli, start, stop

pytest.importorskip("starlette")


@pytest.mark.parametrize("argv,message", [
    (["--port", "70000"], "--port 70000: a port is at most 65535"),
    (["--port", "x"], "cannot read --port 'x': write a number with an optional unit, e.g. 1.4T, 80GiB, 30d"),
    (["--workers", "0"], "--workers must be a whole number of at least 1, got '0'"),
    (["--time-limit=0s"], "--time-limit must be positive, got 0"),
])
def test_bad_flags_are_one_line(argv, message):
    rc, out, err = cli("serve", *argv)
    assert (rc, out) == (2, "")
    assert err == f"gpuplan: error: {message}\n"


def test_a_taken_port_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        rc, _, err = cli("serve", "--port", str(port))
    assert rc == 2
    assert err.startswith(f"gpuplan: error: cannot listen on 127.0.0.1:{port} (")
    assert err.endswith("give another --port (or --port 0 for any free one)\n")


def test_without_the_extra_the_install_hint(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_uvicorn(name, *args, **kwargs):
        if name == "uvicorn":
            raise ImportError("No module named 'uvicorn'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvicorn)
    rc, _, err = cli("serve", "--port", "0")
    assert rc == 2 and 'pip install "gpuplan[serve]"' in err


def test_allow_paths_server_reads_a_config(tmp_path):
    import json
    import urllib.request

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
                               "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}))
    proc, s = start("--allow-paths", "--workers", "1")
    try:
        req = urllib.request.Request(s.url + "/api/evaluate", data=json.dumps(
            {"model": str(cfg), "gpu": "h100-sxm"}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            est = json.loads(r.read())
    finally:
        stop(proc)
    assert est["model"]["params"] == json.loads(cli("evaluate", "--model", str(cfg), "--gpu", "h100-sxm",
                                                    "--json")[1])["model"]["params"]
