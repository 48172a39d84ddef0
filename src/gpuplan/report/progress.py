"""A one-line progress bar on stderr for long work (a large plan search, a trace, a profile).

Shown only on a terminal; quiet when stderr is redirected or the command prints JSON. No
dependency. Calling the bar is cheap: it redraws at most every ``MIN_REDRAW_S``.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

MIN_REDRAW_S = 0.1
WIDTH = 28


class ProgressBar:
    """``bar(fraction, label)`` updates; ``bar.close()`` clears the line."""

    def __init__(self, title: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = isatty() if enabled is None else enabled
        self._last = 0.0
        self._drawn = False
        self._t0 = time.monotonic()

    def __call__(self, fraction: float, label: str = "") -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < MIN_REDRAW_S and fraction < 1.0:
            return
        self._last = now
        f = min(max(fraction, 0.0), 1.0)
        filled = int(round(f * WIDTH))
        line = f"{self.title} [{'#' * filled}{'.' * (WIDTH - filled)}] {f:4.0%} {now - self._t0:5.1f}s {label}"
        self.stream.write("\r" + line[:100].ljust(100))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
        self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def for_command(title: str, json_output: bool) -> ProgressBar:
    """The bar a command should use: off with ``--json`` or when stderr is not a terminal."""
    return ProgressBar(title, enabled=False if json_output else None)


class Ticker:
    """Keeps a bar alive while one long call runs (no progress callbacks inside it): a daemon
    thread redraws ``bar(fraction(), label)`` every ``period_s`` so the elapsed time moves."""

    def __init__(self, bar: ProgressBar, label: str, fraction: float = 0.0, period_s: float = 0.25) -> None:
        import threading

        self.bar, self.label, self.fraction, self.period_s = bar, label, fraction, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True) if bar.enabled else None

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.bar(self.fraction, self.label)

    def __enter__(self) -> Ticker:
        if self._thread is not None:
            self.bar(self.fraction, self.label)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
