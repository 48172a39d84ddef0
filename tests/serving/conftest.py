"""One `gpuplan serve` per test session, started as a user starts it (`gpuplan serve --port 0`), and
helpers to ask it and the CLI the same question."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    url: str
    host: str
    port: int


@dataclass
class Answer:
    status: int
    text: str
    headers: Any

    def json(self) -> Any:
        return json.loads(self.text)


def start(*extra: str) -> tuple[subprocess.Popen, Served]:
    argv = [sys.executable, "-m", "gpuplan", "serve", "--port", "0", "--quiet", *extra]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                                       if p))
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    line = proc.stderr.readline()
    if "serving http://" not in line:
        proc.kill()
        pytest.fail(f"gpuplan serve did not start: {line}{proc.stderr.read()}")
    address = line.split("http://", 1)[1].split("/", 1)[0]
    host, port = address.rsplit(":", 1)
    return proc, Served(f"http://{address}", host, int(port))


def stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


@pytest.fixture(scope="session")
def served():
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    proc, s = start("--workers", "2", "--time-limit", "60s")
    yield s
    console = stop(proc)
    # a bug answered as 500 leaves its traceback on the server's console, never in a response
    assert "Traceback" not in console, console[-3000:]


def ask(served: Served, path: str, body: Any = None, method: str | None = None,
        headers: dict[str, str] | None = None) -> Answer:
    data = body if isinstance(body, bytes) else None if body is None else (
        body.encode() if isinstance(body, str) else json.dumps(body).encode())
    req = urllib.request.Request(served.url + path, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return Answer(r.status, r.read().decode(), r.headers)
    except urllib.error.HTTPError as err:
        return Answer(err.code, err.read().decode(), err.headers)


def cli(*argv: str) -> tuple[int, str, str]:
    """The command line in this process: exit status, stdout, stderr."""
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def flags(body: dict[str, Any]) -> list[str]:
    """A flat request body as the command line's flags."""
    return [a for k, v in body.items() for a in (f"--{k.replace('_', '-')}", str(v))]


ARTIFACTS = Path(os.environ.get("GPUPLAN_ARTIFACTS", ROOT / "artifacts")) / "screenshots"


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) for the session."""
    import shutil

    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        message = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)  # .ci/run installs them: missing there is a broken CI, not a skip
        pytest.skip(message)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--disable-extensions", "--no-first-run", "--lang=en-US"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def screenshot(d: Any, name: str) -> Path:
    """The whole page as a PNG under artifacts/screenshots (``$GPUPLAN_ARTIFACTS`` to move it)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = d.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    d.set_window_size(1400, min(max(int(height) + 120, 900), 4000))
    d.execute_script("window.scrollTo(0, 0)")
    path = ARTIFACTS / f"{name}.png"
    d.save_screenshot(str(path))
    d.set_window_size(1400, 1000)
    return path
