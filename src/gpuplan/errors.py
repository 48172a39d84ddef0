"""The one exception type users see: a message that names the problem and the fix, on one honest
line: whatever it quotes is escaped (no newline or escape sequence can fake a second line) and
shortened (a 20 MB value is not echoed)."""

from __future__ import annotations

import re
import stat

MAX_MESSAGE = 1000  # characters of one error line
MAX_QUOTED = 80     # characters of one quoted value


def shown(value: object, limit: int = MAX_QUOTED) -> str:
    """``value`` for a message: its repr (escaped: ``'a\\nb'``), shortened in the middle to ``limit``."""
    try:
        text = repr(value) if isinstance(value, str | bytes) else str(value)
    except (ValueError, RecursionError):  # an int past Python's 4,300-digit limit; a nested value
        text = f"<{type(value).__name__}>"
    return _shorten(_escape(text), limit)


def described(value: object) -> str:
    """What a file holds at a key, without quoting its text: a number as it is, anything else by its
    kind (a message never carries a piece of a file the user pointed at, which may be any file)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int | float) or (isinstance(value, list) and len(value) <= 8 and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in value)):
        return shown(value)  # numbers carry nothing of the file's text
    if isinstance(value, str):
        return f"text of {len(value):,} character{'s' if len(value) != 1 else ''}"
    return {dict: "a mapping", list: "a list"}.get(type(value), f"a {type(value).__name__}")


def named(value: str, limit: int) -> str:
    """A name a file holds (a model_type, a tensor's key) for a message: as it is when it is a plain
    name of at most ``limit`` ASCII letters, digits, ``_ . -``; else only its kind (``described``)."""
    return value if re.fullmatch(rf"[A-Za-z0-9_.\-]{{1,{limit}}}", value) else f"({described(value)})"


def plain(value: object, limit: int = MAX_QUOTED) -> str:
    """Like ``shown`` but a short printable text goes in as it is, without quotes."""
    if isinstance(value, str) and len(value) <= limit and value.isprintable():
        return value
    return shown(value, limit)


def _escape(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 12, 8)
    return f"{text[: keep * 2 // 3]}…({len(text) - keep:,} chars)…{text[len(text) - keep // 3:]}"


def one_line(message: str, limit: int = MAX_MESSAGE) -> str:
    """A message made one printable line of at most ``limit`` characters; the end (the fix) is kept."""
    return _shorten(_escape(message), limit)


class GpuplanError(ValueError):
    """Bad input. The CLI prints ``str(err)`` on one line and exits with status 2."""

    def __init__(self, message: object = "") -> None:
        super().__init__(one_line(str(message)))


def kind_of(mode: int) -> str:
    """A file that is not a regular one, in words (the messages of inputs and of output files)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
