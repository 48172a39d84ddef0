"""The one validated boundary: every value and file that comes from outside passes here before any
arithmetic. Scenario files, flags, the Python API's keywords, Hugging Face config.json files,
safetensors headers and index files, calibration files.

What it guarantees, so that the code behind it never meets a pathological value:
- files: only regular files are read (a FIFO, a device such as /dev/zero, a socket or a folder is
  refused without blocking), and never more than a size cap;
- documents: JSON and YAML are read with bounded nesting, a bounded count of values and of entries
  in one list or mapping, counted before the document is built (JSON: on its text; YAML: on the
  parser's events, aliases expanded — ``yamldoc``), so a file of any size under the cap, or a
  "billion laughs", is refused in a fraction of a second; a number of more than ``MAX_NUMBER_DIGITS``
  digits is never converted; ``!!python`` tags never run;
- values: only JSON's kinds (mapping, list, text, number, true/false, null), integers below
  ``MAX_INT``, text of at most ``MAX_TEXT`` characters, without control characters or lone surrogates;
- messages: values are quoted shortened and escaped (``shown``), so an error is one honest line.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import GpuplanError, described, kind_of, shown

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT", "MAX_NUMBER_DIGITS", "MAX_TEXT", "LongNumber", "check_text",
           "check_tree", "load_json", "load_yaml", "long_number", "open_regular", "read_regular", "shown",
           "json_marks"]

MAX_FILE_BYTES = 16 * 2**20  # a scenario, config.json, index or calibration file: far above any real one
MAX_TEXT = 4096              # characters of one text value (a name, a path, a number written out)
MAX_DEPTH = 32               # nesting of mappings and lists (a scenario is 3 deep, a config.json 4)
MAX_NODES = 1_000_000        # values in one document (a safetensors index of a 1T model: ~200k)
MAX_NUMBER_DIGITS = 40       # digits of an integer written in a document (2**64 has 20)
MAX_INT = 10**30             # no count, size or length in gpuplan comes near this


# ---- files --------------------------------------------------------------------------------------
@contextmanager
def open_regular(path: str | os.PathLike, what: str) -> Iterator[IO[bytes]]:
    """``path`` opened for reading if it is a regular file (symlinks to one are fine). Opened
    non-blocking first, so a FIFO cannot stall the open; checked on the open descriptor, so a file
    swapped after a check cannot slip in."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise GpuplanError(f"{what} not found: {shown(p)}: check the path") from None
    except OSError as err:
        raise GpuplanError(f"cannot read {what} {shown(p)} ({err.strerror or 'error'}): check the path") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise GpuplanError(f"{what} {shown(p)} is {kind_of(mode)}: give a regular file")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_regular(path: str | os.PathLike, what: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else one GpuplanError line."""
    with open_regular(path, what) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise GpuplanError(f"cannot read {what} {shown(os.fspath(path))} ({err.strerror or 'error'})") from None
    if len(data) > limit:
        raise GpuplanError(f"{what} {shown(os.fspath(path))} is larger than {limit // 2**20} MiB: "
                           "give the file itself, not a larger one")
    return data


def is_path(text: str) -> bool:
    """``text`` names something on disk (false for names too long to be a path, not an error)."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


# ---- values -------------------------------------------------------------------------------------
def check_text(value: str, where: str, limit: int = MAX_TEXT, quote: bool = True) -> str:
    """Text of at most ``limit`` characters, with no control characters (newlines included). With
    ``quote`` False (a file's contents) the message names the place, never the text."""
    if len(value) > limit:
        start = f" (it starts {shown(value, 40)})" if quote else ""
        raise GpuplanError(f"{where} is {len(value):,} characters long, more than {limit:,}: "
                           f"give a shorter value{start}")
    if not value.isprintable():
        at = f"{where} = {shown(value)}" if quote else where
        if any(_is_control(ch) for ch in value):
            raise GpuplanError(f"{at} holds control characters (a newline, tab or escape): remove them")
        if _SURROGATE.search(value):
            raise GpuplanError(f"{at} holds a lone surrogate (half of a UTF-16 pair such as \\ud800, not a "
                               "character; or bytes that are not UTF-8): write the character itself")
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")  # no text can be written out (UTF-8, a terminal) with one


def _is_control(ch: str) -> bool:
    return ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029\u202d\u202e"


class LongNumber:
    """A number written with more than ``MAX_NUMBER_DIGITS`` digits, kept as its digit count: turning
    it into an int is quadratic (and past 4,300 digits refused by Python). ``check_tree`` refuses it
    where it stands, so in a list of scenarios only its item fails."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"a number of {self.digits:,} digits"


def long_number(text: str) -> LongNumber | None:
    """``text`` (a number as written) as a LongNumber when it has more than ``MAX_NUMBER_DIGITS`` digits."""
    if len(text) <= MAX_NUMBER_DIGITS:
        return None
    digits = len(_NOT_DIGIT.sub("", text))  # at C speed: a file may hold thousands of 4,000-digit numbers
    return LongNumber(digits) if digits > MAX_NUMBER_DIGITS else None


_NOT_DIGIT = re.compile("[^0-9]")


def check_number(value: int | float, where: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        raise GpuplanError(f"{where} = {_digits(value)} is too large: no count or size in gpuplan comes near "
                           f"{MAX_INT:.0e}; give a realistic value")


def _digits(value: int) -> str:
    n = value.bit_length() * 30103 // 100000 + 1  # digits, without converting (a 5,000-digit int cannot print)
    return f"a number of about {n:,} digits"


_LEAVES = (str, int, float, bool, type(None))


_BRANCHES = (Mapping, list, tuple)
Where = str | tuple  # a place in a document: its name, or (the parent's place, key), joined only for a message


def check_tree(obj: Any, where: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES,
               max_items: int | None = None, max_text: int = MAX_TEXT, quote: bool = True,
               values: bool = True) -> None:
    """A document of JSON kinds only, within the depth, count, entries (of one list or mapping),
    integer and text bounds. Iterative: a nesting far past Python's recursion limit is refused, not a
    RecursionError. With ``values`` False only the shape is checked (depth, counts): a list of
    scenarios has each item's values checked when the item is read, so a bad value fails its item."""
    if not isinstance(obj, _BRANCHES):
        if values:
            _check_leaf(obj, where, max_text, quote)
        return
    items = max_nodes if max_items is None else max_items
    stack: list[tuple[Any, Where, int]] = [(obj, where, 0)]
    seen = 1
    while stack:
        node, at, depth = stack.pop()
        if depth > max_depth or (node and depth + 1 > max_depth):
            raise GpuplanError(f"{_place(at)} is nested more than {max_depth} levels deep: give a flat value")
        if len(node) > items:
            raise GpuplanError(f"{_place(at)} holds {len(node):,} entries, more than {items:,}: give a shorter "
                               f"{'mapping' if isinstance(node, Mapping) else 'list'}")
        seen += len(node)
        if seen > max_nodes:
            raise GpuplanError(f"{where} holds more than {max_nodes:,} values: give a smaller document")
        pairs = node.items() if isinstance(node, Mapping) else ((None, v) for v in node)
        for k, v in pairs:
            place = at if k is None else (at, k)
            if k is not None and values:
                _check_key(k, at, quote)
            if isinstance(v, _BRANCHES):
                stack.append((v, place, depth + 1))
            elif values and not _plain(v, max_text):
                _check_leaf(v, place, max_text, quote)


def _plain(v: Any, max_text: int) -> bool:
    """The usual leaf, passed without building its place's name: short printable text, a small number."""
    t = type(v)
    return ((t is str and len(v) <= max_text and v.isprintable()) or (t is int and -MAX_INT < v < MAX_INT)
            or t is float or t is bool or v is None)


def _place(at: Where) -> str:
    keys: list[Any] = []
    while isinstance(at, tuple):
        at, key = at
        keys.append(key)
    for key in reversed(keys):
        if len(at) >= 200:
            break
        at = f"{at}.{key}"
    return at


def _check_key(k: Any, at: Where, quote: bool) -> None:
    if type(k) is str and len(k) <= 256 and k.isprintable():
        return
    if not isinstance(k, str):
        raise GpuplanError(f"{_place(at)} has a key that is not text ({shown(k) if quote else described(k)}): "
                           "keys are names")
    check_text(k, f"a key in {_place(at)}", 256, quote)


def _check_leaf(node: Any, at: Where, max_text: int, quote: bool) -> None:
    if isinstance(node, str):
        check_text(node, _place(at), max_text, quote)
    elif isinstance(node, int | float):
        check_number(node, _place(at))
    elif isinstance(node, LongNumber):
        raise GpuplanError(f"{_place(at)} is {node!r}: no value in gpuplan needs more than {MAX_NUMBER_DIGITS}; "
                           "give a realistic value")
    elif not isinstance(node, _LEAVES) and not _is_spec(node):
        raise GpuplanError(f"{_place(at)} is a {type(node).__name__}: give a number, text, "
                           "true/false, a list or a mapping")


def _is_spec(node: Any) -> bool:
    """gpuplan's own typed values (a ModelSpec, a GPU) given through the Python API: already checked."""
    return type(node).__module__.startswith("gpuplan.") or isinstance(node, os.PathLike)


# ---- documents ----------------------------------------------------------------------------------
def _bounded_int(text: str) -> int | LongNumber:
    return long_number(text) or int(text)


def _no_constant(text: str) -> float:
    raise GpuplanError(f"{text} (not a JSON number)")


def load_json(data: bytes | str, what: str, *, values: bool = True, constants: bool = False, **bounds: Any) -> Any:
    """JSON (UTF-8, an optional byte-order mark) within the bounds of ``check_tree``. The values are
    counted on the text (``json_marks``) before anything is built; an integer of more than
    ``MAX_NUMBER_DIGITS`` digits is never converted (a ``LongNumber``, refused by ``check_tree``).
    ``constants``: Python's ``Infinity``, ``-Infinity`` and ``NaN`` are read as floats (a Hugging Face
    config.json: ``save_pretrained`` writes ``float("inf")`` so, e.g. Mamba-2's ``time_step_limit``)."""
    max_nodes = bounds.get("max_nodes", MAX_NODES)
    commas, opens = json_marks(data, max_nodes)
    if commas + opens + 1 > max_nodes:
        if opens > bounds.get("max_depth", MAX_DEPTH) * (commas + 1):  # some path holds opens / (commas + 1)
            raise GpuplanError(f"{what}: malformed JSON: nested too deeply to read")
        raise GpuplanError(f"{what} holds more than {max_nodes:,} values: give a smaller document")
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{what} is not UTF-8 text (byte {err.start} cannot be read)") from None
    try:
        obj = json.loads(text, parse_int=_bounded_int, parse_constant=float if constants else _no_constant)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{what}: malformed JSON at line {err.lineno}, column {err.colno} ({err.msg})") from None
    except GpuplanError as err:
        raise GpuplanError(f"{what}: malformed JSON: {err}") from None
    except RecursionError:
        raise GpuplanError(f"{what}: malformed JSON: nested too deeply to read") from None
    except ValueError as err:
        raise GpuplanError(f"{what}: malformed JSON ({shown(str(err), 80)})") from None
    check_tree(obj, what, values=values, **bounds)
    return obj


_ESCAPE = {str: re.compile(r"\\.", re.DOTALL), bytes: re.compile(rb"\\.", re.DOTALL)}
_STRING = {str: re.compile(r'"[^"]*"'), bytes: re.compile(rb'"[^"]*"')}


def json_marks(data: bytes | str, limit: int) -> tuple[int, int]:
    """Commas and opening brackets of a JSON text (it holds at most one value more than their sum),
    counted at C speed before anything is built. When the plain count passes ``limit``, the marks inside
    strings are left out — on a prefix that doubles until it alone passes ``limit`` or is the whole text,
    so a refusal costs about what ``limit`` values take to write, whatever the text's size. Escapes go
    first: every quote left delimits a string, and the string pattern never backtracks."""
    comma, opens = ((",", ("[", "{")) if isinstance(data, str) else (b",", (b"[", b"{")))
    counts = data.count(comma), sum(data.count(m) for m in opens)  # strings' marks included: an upper bound
    if sum(counts) < limit:
        return counts
    kind, empty, quote = type(data), comma[:0], ('"' if isinstance(data, str) else b'"')
    size = max(limit, 1 << 16)
    while True:
        bare = _ESCAPE[kind].sub(empty, data[:size])
        if bare.count(quote) % 2:  # a string runs past the cut: its start is left out too
            bare = bare[:bare.rindex(quote)]
        bare = _STRING[kind].sub(empty, bare)
        counts = bare.count(comma), sum(bare.count(m) for m in opens)
        if sum(counts) >= limit or size >= len(data):
            return counts
        size *= 2


def load_yaml(text: str, what: str, *, values: bool = True, **bounds: Any) -> Any:
    """YAML (one document) read as a stream with the safe loader's rules (``yamldoc``): values
    (aliases expanded), nesting and entries are counted as they are read, so a document past a bound
    is refused where it crosses it, before the rest is built. Errors are GpuplanError lines naming ``what``."""
    from gpuplan.bounds import yamldoc  # PyYAML only when a YAML document is read

    obj = yamldoc.load(text, what, bounds.get("max_nodes", MAX_NODES), bounds.get("max_depth", MAX_DEPTH),
                       bounds.get("max_items") or bounds.get("max_nodes", MAX_NODES))
    check_tree(obj, what, values=values, **bounds)
    return obj
