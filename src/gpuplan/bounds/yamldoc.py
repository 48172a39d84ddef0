"""YAML read as a stream: the parser's events (libyaml's C parser when PyYAML has it) are built into
values as they come, and every bound is counted on the way — values (an alias counts its whole target
each time it is used), nesting, entries of one list or mapping, digits of a number — so a document
past a bound is refused at the event that crosses it, before the rest is read, whatever the file's
size (a 16 MiB list stops after its first 100,000 values, in a fraction of a second).

What it builds is what PyYAML's safe loader builds (the same resolver and scalar constructors, aliases
shared; merge keys ``<<`` as the YAML spec has them: the mapping's own keys win, then the merged
mappings in the order given — PyYAML 6.0.4 lets a later one win for some keys, depending on string
identity), with three differences, all refusals gpuplan made later anyway: a tag
other than the plain scalar, list and mapping ones (``!!python/...``, ``!!set``, ``!!omap``) is refused
where it stands; a value that contains itself (an alias inside its own anchor) is refused; an integer
or float of more than ``MAX_NUMBER_DIGITS`` digits becomes a ``LongNumber``, never converted
(``check_tree`` refuses it where it stands, so in a list of scenarios only its item fails).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

from gpuplan.bounds import long_number
from gpuplan.errors import GpuplanError, shown

_TAG = "tag:yaml.org,2002:"
STR, INT, FLOAT, MERGE_TAG, VALUE_TAG = (_TAG + t for t in ("str", "int", "float", "merge", "value"))
_COLLECTION_TAGS = (None, "!", _TAG + "seq", _TAG + "map")
_SCALAR_TAGS = {_TAG + t for t in ("null", "bool", "int", "float", "str", "binary", "timestamp")}
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_MERGE = object()  # the ``<<`` key
_NON_PRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF]")
_PLAIN: dict[str, str] = {}  # tag of a short plain scalar (keys and names repeat): at most 4,096 kept


def _plain_tag(value: str) -> str:
    tag = _PLAIN.get(value)
    if tag is None:
        tag = _RESOLVER.resolve(ScalarNode, value, (True, False))
        if len(value) <= 64 and len(_PLAIN) < 4096:
            _PLAIN[value] = tag
    return tag


@dataclass(slots=True)
class _Open:
    """A list or mapping being read: its value so far, where it started, what it waits for."""

    value: Any
    start: int                 # values counted before it began
    anchor: str | None
    line: int
    is_map: bool
    height: int = 0            # levels below it (0: empty)
    key: Any = None
    has_key: bool = False
    merges: list[dict] = field(default_factory=list)


class Builder:
    """Values from the events of one YAML document, within ``max_nodes`` values (a mapping's keys are
    not counted, as in ``check_tree``), ``max_depth`` levels and ``max_items`` entries per list or
    mapping; every refusal is one GpuplanError line."""

    def __init__(self, what: str, max_nodes: int, max_depth: int, max_items: int) -> None:
        self.what, self.max_nodes, self.max_depth, self.max_items = what, max_nodes, max_depth, max_items
        self.total = 0          # values so far, aliases expanded
        self.by_alias = 0       # of which through aliases
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}  # name -> (value, values, height)
        self.root: Any = None
        self.documents = 0

    def run(self, parser: Any) -> Any:
        get = parser.get_event
        while True:
            ev = get()
            kind = type(ev)
            if kind is ScalarEvent:
                self._on_scalar(ev)
            elif kind is MappingStartEvent or kind is SequenceStartEvent:
                self._start(ev)
            elif kind is MappingEndEvent or kind is SequenceEndEvent:
                self._end()
            elif kind is AliasEvent:
                self._alias(ev)
            elif kind is DocumentStartEvent:
                self.documents += 1
                if self.documents > 1:
                    raise self._error(f"holds a second document (---) at line {_line(ev)}: give one document")
            elif ev is None or kind is StreamEndEvent:
                return self.root

    # ---- bounds ----------------------------------------------------------------------------------
    def _error(self, text: str) -> GpuplanError:
        return GpuplanError(f"{self.what}: the YAML {text}")

    def _node(self, ev: Any, values: int, height: int) -> None:
        """A node of ``values`` values and ``height`` levels arrives at the current level."""
        if len(self.stack) + height > self.max_depth:
            raise self._error(f"is nested more than {self.max_depth} levels deep at line {_line(ev)}: "
                              "give a flat value")
        self.total += values
        if self.total > self.max_nodes:
            if self.by_alias:
                raise self._error(f"expands to more than {self.max_nodes:,} values (aliases repeated "
                                  "inside aliases): write the values out")
            raise self._error(f"holds more than {self.max_nodes:,} values (at line {_line(ev)}): "
                              "give a smaller document")

    def _anchor(self, ev: Any, name: str | None) -> None:
        if name is not None and name in self.anchors:
            raise self._error(f"anchor &{shown(name, 40)} at line {_line(ev)} is defined twice: "
                              "give each anchor its own name")

    # ---- events ----------------------------------------------------------------------------------
    def _on_scalar(self, ev: ScalarEvent) -> None:
        value = self._scalar(ev)
        if ev.anchor is not None:
            self._anchor(ev, ev.anchor)
            self.anchors[ev.anchor] = (value, 1, 0)
        parent = self.stack[-1] if self.stack else None
        if parent is not None and parent.is_map and not parent.has_key:  # a key: not a value of its own
            parent.key, parent.has_key = value, True
            return
        self._node(ev, 1, 0)
        self._place(value, 0)

    def _scalar(self, ev: ScalarEvent) -> Any:
        tag, value = ev.tag, ev.value
        if tag is None or tag == "!":
            tag = _plain_tag(value) if ev.implicit[0] else STR
        if tag == STR or tag == VALUE_TAG:
            return value
        if tag == INT or tag == FLOAT:
            long = long_number(value)
            if long is not None:
                return long
            if tag == INT and value.isdigit() and (value[0] != "0" or value == "0"):
                return int(value)
        elif tag == MERGE_TAG:
            return _MERGE
        elif tag not in _SCALAR_TAGS:
            raise self._error(f"tag {shown(tag, 60)} at line {_line(ev)} is not one gpuplan reads: "
                              "write a plain value")
        try:
            return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, ScalarNode(tag, value, ev.start_mark))
        except (ValueError, OverflowError, KeyError, TypeError, yaml.YAMLError):  # !!int abc, a bad date
            raise self._error(f"value at line {_line(ev)} cannot be read as {tag.removeprefix(_TAG)}") from None

    def _start(self, ev: CollectionStartEvent) -> None:
        if ev.tag not in _COLLECTION_TAGS:
            raise self._error(f"tag {shown(ev.tag, 60)} at line {_line(ev)} is not one gpuplan reads: "
                              "write a plain list or mapping")
        self._node(ev, 1, 0)
        self._anchor(ev, ev.anchor)
        is_map = isinstance(ev, MappingStartEvent)
        self.stack.append(_Open({} if is_map else [], self.total - 1, ev.anchor, _line(ev), is_map))
        if ev.anchor is not None:
            self.anchors[ev.anchor] = (None, 0, 0)  # open: an alias to it now is a value inside itself

    def _end(self) -> None:
        o = self.stack.pop()
        value = o.value
        if o.merges:  # the merged mappings' keys first (an earlier one wins), then its own keys win
            value = {}
            for m in reversed(o.merges):
                value.update(m)
            value.update(o.value)
        if o.anchor is not None:
            self.anchors[o.anchor] = (value, self.total - o.start, o.height)
        self._place(value, o.height)

    def _alias(self, ev: AliasEvent) -> None:
        if ev.anchor not in self.anchors:
            raise self._error(f"alias *{shown(ev.anchor, 40)} at line {_line(ev)} names no anchor before it: "
                              "define &name first")
        value, values, height = self.anchors[ev.anchor]
        if values == 0:
            raise self._error(f"alias *{shown(ev.anchor, 40)} at line {_line(ev)} is inside its own anchor "
                              "(a value that contains itself): write the values out")
        parent = self.stack[-1] if self.stack else None
        if parent is not None and parent.is_map and not parent.has_key:
            parent.key, parent.has_key = value, True  # refused below unless a name: keys are names
            return
        self.by_alias += values
        self._node(ev, values, height)
        self._place(value, height)

    # ---- building --------------------------------------------------------------------------------
    def _place(self, value: Any, height: int) -> None:
        """A finished value (not a key) into the list or mapping it belongs to, or the document."""
        if not self.stack:
            self.root = value
            return
        parent = self.stack[-1]
        if parent.height <= height:
            parent.height = height + 1
        if parent.is_map and not parent.has_key:  # a list or mapping as a key: refused with the value
            parent.key, parent.has_key = value, True
            return
        if not parent.is_map:
            parent.value.append(value if value is not _MERGE else "<<")
        else:
            self._entry(parent, value if value is not _MERGE else "<<")
        if len(parent.value) > self.max_items:
            kind = "mapping" if parent.is_map else "list"
            raise self._error(f"{kind} at line {parent.line} holds more than {self.max_items:,} entries: "
                              "give a shorter one")

    def _entry(self, parent: _Open, value: Any) -> None:
        key, parent.key, parent.has_key = parent.key, None, False
        if key is _MERGE:
            merged = value if isinstance(value, list) else [value]
            if not all(isinstance(m, dict) for m in merged):
                raise self._error(f"merge key << at line {parent.line} takes a mapping or a list of mappings: "
                                  "give *anchor of a mapping")
            parent.merges.extend(merged)
        elif isinstance(key, list | dict):
            raise self._error(f"mapping at line {parent.line} has a key that is a "
                              f"{'list' if isinstance(key, list) else 'mapping'}: keys are names")
        else:
            parent.value[key] = value


def _line(ev: Any) -> int:
    mark = getattr(ev, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


def load(text: str, what: str, max_nodes: int, max_depth: int, max_items: int) -> Any:
    """The one YAML document in ``text`` (None when empty), built within the bounds."""
    bad = _NON_PRINTABLE.search(text)  # PyYAML's own rule, checked first: libyaml's message spans lines
    if bad:
        raise GpuplanError(f"{what}: malformed YAML at line {text.count(chr(10), 0, bad.start()) + 1}: special "
                           f"characters such as {shown(bad.group())} are not allowed: remove them")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)  # the C parser: the same events, ~10× faster
    try:
        return Builder(what, max_nodes, max_depth, max_items).run(loader)
    except GpuplanError:
        raise
    except RecursionError:
        raise GpuplanError(f"{what}: malformed YAML: nested too deeply to read") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise GpuplanError(f"{what}: malformed YAML{where}: {shown(getattr(err, 'problem', None) or err, 120)}"
                           ) from None
    finally:
        loader.dispose()
