"""The ticker keeps a bar moving during one long call, and stays silent off a terminal."""

import io
import time

from gpuplan.report.progress import ProgressBar, Ticker


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ticker_redraws_while_the_call_runs():
    out = TTY()
    bar = ProgressBar("tracing", stream=out)
    with Ticker(bar, "1/1 llama", period_s=0.05):
        time.sleep(0.3)
    bar.close()
    assert out.getvalue().count("\r") >= 4 and "tracing" in out.getvalue() and "1/1 llama" in out.getvalue()


def test_ticker_is_silent_when_not_a_terminal():
    out = io.StringIO()
    bar = ProgressBar("tracing", stream=out)
    with Ticker(bar, "x", period_s=0.01):
        time.sleep(0.05)
    assert out.getvalue() == ""
