"""The one validated boundary: every value and file that comes from outside passes here before any
arithmetic. Scenario files, flags, the Python API's keywords, Hugging Face config.json files,
safetensors headers and index files, calibration files.

What it guarantees, so that the code behind it never meets a pathological value:
- files: only regular files are read (a FIFO, a device such as /dev/zero, a socket or a folder is
  refused without blocking), and never more than a size cap;
- documents: JSON and YAML are parsed with bounded nesting, a bounded count of values, numbers of
  at most ``MAX_NUMBER_DIGITS`` digits, and YAML aliases whose expansion is counted before anything
  is built (a "billion laughs" document is refused in milliseconds); ``!!python`` tags never run;
- values: only JSON's kinds (mapping, list, text, number, true/false, null), integers below
  ``MAX_INT``, text of at most ``MAX_TEXT`` characters;
- messages: values are quoted shortened and escaped (``shown``), so an error is one honest line.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from gpuplan.errors import GpuplanError, described, shown

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT", "MAX_NUMBER_DIGITS", "MAX_TEXT", "check_text", "check_tree",
           "load_json", "load_yaml", "open_regular", "read_regular", "shown"]

MAX_FILE_BYTES = 16 * 2**20  # a scenario, config.json, index or calibration file: far above any real one
MAX_TEXT = 4096              # characters of one text value (a name, a path, a number written out)
MAX_DEPTH = 32               # nesting of mappings and lists (a scenario is 3 deep, a config.json 4)
MAX_NODES = 1_000_000        # values in one document (a safetensors index of a 1T model: ~200k)
MAX_NUMBER_DIGITS = 40       # digits of an integer written in a document (2**64 has 20)
MAX_INT = 10**30             # no count, size or length in gpuplan comes near this


# ---- files --------------------------------------------------------------------------------------
def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


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
            raise GpuplanError(f"{what} {shown(p)} is {_kind_of(mode)}: give a regular file")
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
    if not value.isprintable() and any(_is_control(ch) for ch in value):
        at = f"{where} = {shown(value)}" if quote else where
        raise GpuplanError(f"{at} holds control characters (a newline, tab or escape): remove them")
    return value


def _is_control(ch: str) -> bool:
    return ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029\u202d\u202e"


def check_number(value: int | float, where: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        raise GpuplanError(f"{where} = {_digits(value)} is too large: no count or size in gpuplan comes near "
                           f"{MAX_INT:.0e}; give a realistic value")


def _digits(value: int) -> str:
    n = value.bit_length() * 30103 // 100000 + 1  # digits, without converting (a 5,000-digit int cannot print)
    return f"a number of about {n:,} digits"


_LEAVES = (str, int, float, bool, type(None))


def check_tree(obj: Any, where: str, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES,
               max_text: int = MAX_TEXT, quote: bool = True) -> None:
    """A document of JSON kinds only, within the depth, count, integer and text bounds. Iterative:
    a nesting far past Python's recursion limit is refused, not a RecursionError."""
    stack: list[tuple[Any, str, int]] = [(obj, where, 0)]
    seen = 0
    while stack:
        node, at, depth = stack.pop()
        seen += 1
        if seen > max_nodes:
            raise GpuplanError(f"{where} holds more than {max_nodes:,} values: give a smaller document")
        if depth > max_depth:
            raise GpuplanError(f"{at} is nested more than {max_depth} levels deep: give a flat value")
        if isinstance(node, str):
            check_text(node, at, max_text, quote)
        elif isinstance(node, int | float):
            check_number(node, at)
        elif isinstance(node, Mapping):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise GpuplanError(f"{at} has a key that is not text ({shown(k) if quote else described(k)}): "
                                       "keys are names")
                check_text(k, f"a key in {at}", 256, quote)
                stack.append((v, f"{at}.{k}" if len(at) < 200 else at, depth + 1))
        elif isinstance(node, list | tuple):
            stack.extend((v, at, depth + 1) for v in node)
        elif not isinstance(node, _LEAVES) and not _is_spec(node):
            raise GpuplanError(f"{at} is a {type(node).__name__}: give a number, text, "
                               "true/false, a list or a mapping")


def _is_spec(node: Any) -> bool:
    """gpuplan's own typed values (a ModelSpec, a GPU) given through the Python API: already checked."""
    return type(node).__module__.startswith("gpuplan.") or isinstance(node, os.PathLike)


# ---- documents ----------------------------------------------------------------------------------
def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise GpuplanError(f"a number of {len(text):,} digits")
    return int(text)


def _no_constant(text: str) -> float:
    raise GpuplanError(f"{text} (not a JSON number)")


def load_json(data: bytes | str, what: str, **bounds: Any) -> Any:
    """JSON (UTF-8, an optional byte-order mark) within the bounds of ``check_tree``."""
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:
        raise GpuplanError(f"{what} is not UTF-8 text (byte {err.start} cannot be read)") from None
    try:
        obj = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise GpuplanError(f"{what}: malformed JSON at line {err.lineno}, column {err.colno} ({err.msg})") from None
    except GpuplanError as err:
        raise GpuplanError(f"{what}: malformed JSON: {err}") from None
    except RecursionError:
        raise GpuplanError(f"{what}: malformed JSON: nested too deeply to read") from None
    except ValueError as err:
        raise GpuplanError(f"{what}: malformed JSON ({shown(str(err), 80)})") from None
    check_tree(obj, what, **bounds)
    return obj


def load_yaml(text: str, what: str, **bounds: Any) -> Any:
    """YAML (one document) with the safe loader; aliases' expansion and nesting are counted on the
    composed graph, before any value is built. Errors are GpuplanError lines naming ``what``."""
    import yaml

    loader = None
    try:
        try:
            _check_nesting(text, what, bounds.get("max_depth", MAX_DEPTH))
            loader = yaml.SafeLoader(text)
            node = loader.get_single_node()
            if node is None:
                return None
            _check_graph(node, what, bounds.get("max_nodes", MAX_NODES), bounds.get("max_depth", MAX_DEPTH))
            obj = loader.construct_document(node)
        except GpuplanError:
            raise
        except RecursionError:
            raise GpuplanError(f"{what}: malformed YAML: nested too deeply to read") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise GpuplanError(f"{what}: malformed YAML{where}: {shown(getattr(err, 'problem', None) or err, 120)}"
                               ) from None
        except (ValueError, OverflowError) as err:  # an integer of more than 4,300 digits, a bad date
            raise GpuplanError(f"{what}: YAML value cannot be read ({shown(str(err), 80)})") from None
    finally:
        if loader is not None:
            loader.dispose()
    check_tree(obj, what, **bounds)
    return obj


def _check_nesting(text: str, what: str, max_depth: int) -> None:
    """The nesting, from the parser's events (not recursive), before the recursive composer runs."""
    import yaml

    level = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            level += 1
            if level > max_depth:
                raise GpuplanError(f"{what}: the YAML is nested more than {max_depth} levels deep at line "
                                   f"{event.start_mark.line + 1}: give a flat value")
        elif isinstance(event, yaml.CollectionEndEvent):
            level -= 1


def _check_graph(root: Any, what: str, max_nodes: int, max_depth: int) -> None:
    """Count the values the composed YAML graph expands to (an alias counts its whole target each
    time it is used) and its depth, in one pass over the distinct nodes: a billion-laughs document
    is refused before it is built. Plain numbers are checked for their digit count here too."""
    import yaml

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    order: list[Any] = []
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # post-order without recursion: children are sized before their parent
        node, done = stack.pop()
        if id(node) in size:
            continue
        kids = _children(node)
        if done or not kids:
            sub = [(size[id(k)], depth[id(k)]) for k in kids]
            size[id(node)] = min(1 + sum(s for s, _ in sub), max_nodes + 1)
            depth[id(node)] = 1 + max((d for _, d in sub), default=0)
            if isinstance(node, yaml.ScalarNode) and _too_many_digits(node):
                raise GpuplanError(f"{what}: a number of {len(node.value):,} characters at line "
                                   f"{node.start_mark.line + 1}: no value in gpuplan needs more than "
                                   f"{MAX_NUMBER_DIGITS} digits")
            if size[id(node)] > max_nodes:
                raise GpuplanError(f"{what}: the YAML expands to more than {max_nodes:,} values (aliases "
                                   "repeated inside aliases): write the values out")
            if depth[id(node)] > max_depth + 1:
                raise GpuplanError(f"{what}: the YAML is nested more than {max_depth} levels deep: "
                                   "give a flat value")
            order.append(node)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)
        if len(stack) > 4 * max_nodes:
            raise GpuplanError(f"{what}: the YAML holds more than {max_nodes:,} values: give a smaller document")


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def _too_many_digits(node: Any) -> bool:
    value = node.value
    return (isinstance(value, str) and len(value) > MAX_NUMBER_DIGITS and node.tag.endswith((":int", ":float"))
            and sum(ch.isdigit() for ch in value) > MAX_NUMBER_DIGITS)
