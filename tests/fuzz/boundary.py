"""Case builders for the boundary's defect classes (issue 25), one generator per class, every choice a
draw from the ``Source`` (so hypothesis shrinks a failure to its smallest case):

- ``surrogate``: lone surrogates (``\\ud800``, bytes that are not UTF-8 as argv decodes them) in any
  text field of a scenario file, a flag or a request body;
- ``huge_count``: counts that overflow to infinity only after their suffix (``1e308k``) in every
  count flag of every command, ``serve`` included (always refused: it never starts);
- ``big_document``: YAML and JSON files under the 16 MiB cap but far past the value, entry or depth
  bounds — long block and flow lists, wide lists of lists, many keys, a name as a long list, deep
  nesting — and lists of scenarios with one bad value per item;
- ``safetensors``: headers nested just past their depth bound and headers at the 100 MiB cap;
- ``output_target``: output flags aimed at links into /dev and /proc, FIFOs, sockets and links to
  them, made in the case's own folder (``hostile._classify`` checks each is untouched afterwards);
- ``http``: request bodies for every endpoint (surrogates, 5,000-digit integers, options of any type)
  and Host headers (``[::1]evil.com``, ``localhost:8000, evil.com``), answered in-process by the
  web application (``hostile._http``): a 5xx is a failure like a traceback.

Large files are described, not held: ``("repeat", head, unit, count, tail)`` is written by the child
that runs the case, so a chunk of drawn cases stays small in the parent.
"""

from __future__ import annotations

import json
import struct
from typing import Any

SURROGATES = ["\ud800", "x\udfffy", "\udced\udca0\udc80", "h100\udc00", "\ud83d", "a\udc00"]
SUFFIXES = {"count": ["k", "M", "B", "T", "P", "G"], "bytes": ["GiB", "TiB", "TB"], "duration": ["y", "w", "d", "h"]}
FAMILY = {"--deadline": "duration", "--timeout": "duration", "--host-memory": "bytes"}
COUNT_FLAGS = {  # command -> its count flags (profile's are its own: --steps counts measured steps)
    "plan": ["--top", "--max-gpus", "--budget", "--deadline"], "fit": ["--max-gpus"],
    "export": ["--max-gpus"], "evaluate": ["--gpus", "--tokens", "--global-batch", "--host-memory", "--price"],
    "profile": ["--nproc", "--nnodes", "--steps", "--warmup", "--timeout"], "serve": ["--port", "--workers"]}
TEXT_FIELDS = ["name", "model", "hardware.gpu", "hardware.scale_out", "training.precision", "training.optimizer",
               "training.framework", "layout.recompute", "training.lora_targets", "a key"]
BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}}
MIB = 2**20


def huge_count(r: Any, family: str = "count") -> str:
    """A number that is finite as written and infinite once its suffix (at least 1,000) multiplies it."""
    if r.random() < 0.5:
        return r.huge_count(family)  # hypothesis' own
    mantissa = r.choice(["1", "9.99", "-1", "1.7976931348623157", "+5"])
    return f"{mantissa}e{r.randint(306, 308)}{r.choice(SUFFIXES[family])}"


def surrogate(r: Any) -> str:
    if r.random() < 0.4:
        return r.surrogate()  # hypothesis' own: surrogates among letters, digits, dashes
    text = r.choice(SURROGATES)
    return text if r.random() < 0.7 else "llama" + text + "-3.1-8b"


def _set(sc: dict, field: str, value: Any) -> None:
    if field == "a key":
        sc.setdefault("hardware", {})[value] = 1
        return
    sec, _, key = field.partition(".")
    if key:
        sc.setdefault(sec, {})[key] = [value] if key == "lora_targets" else value
    else:
        sc[sec] = value


def surrogate_case(r: Any, case: Any) -> None:
    cmd = r.choice(["evaluate", "fit", "plan", "export"])
    if r.random() < 0.5:  # a scenario file: JSON writes the escape \ud800, as a hostile file would
        sc = json.loads(json.dumps(BASE))
        _set(sc, r.choice(TEXT_FIELDS), surrogate(r))
        case.files["sc.json"] = json.dumps(sc).encode()
        case.argv = [cmd, "sc.json"]
    else:
        flag = r.choice(["--model", "--gpu", "--precision", "--recompute", "--scale-out", "--framework"])
        case.argv = [cmd, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", flag, surrogate(r)]
    case.argv += ["--to", "torchrun"] if cmd == "export" else ["--max-gpus", "8"] if cmd in ("fit", "plan") else []
    if cmd in ("evaluate", "plan") and r.random() < 0.5:
        case.argv += ["--report", "out.md"]  # written only if the input were accepted
    case.kind = "boundary:surrogate"


def huge_count_case(r: Any, case: Any) -> None:
    cmd = r.choice(list(COUNT_FLAGS))
    flag = r.choice(COUNT_FLAGS[cmd])
    value = huge_count(r, FAMILY.get(flag, "count"))
    value = "$" + value if flag == "--budget" and r.random() < 0.5 else value
    if cmd == "serve":  # always refused before it listens: a server that starts is a hang, a failure
        case.argv = [cmd, flag, value] + (["--port", "0"] if flag != "--port" else [])
    else:
        case.argv = [cmd, "--example", flag, value] + (["--to", "torchrun"] if cmd == "export" else []) \
            + (["--device", "cpu", "--no-store"] if cmd == "profile" else [])
    case.kind = "boundary:huge-count"


def _scenario_list(r: Any, n: int) -> bytes:
    """A list of scenarios, every item but a few valid, the others each with one bad value."""
    bad = ['"gpus": 1' + "0" * r.randint(41, 5000), '"gpus": "' + huge_count(r) + '"',
           '"gpu": ' + json.dumps(surrogate(r)), '"gpu": "' + "x" * 5000 + '"']
    items = [r.choice(bad) if i % max(1, n // 4) == 1 else '"gpus": 8' for i in range(n)]
    return ("[" + ", ".join('{"model": "gpt2", "hardware": {"gpu": "h100-sxm", ' + b + "}}" for b in items)
            + "]").encode()


def big_document(r: Any) -> tuple[str, Any]:
    """A scenario file under the size cap, past a bound (or, for a short list, within them)."""
    count = r.choice([1_001, 20_000, 300_000, 16 * MIB])  # cut to the cap: 16 MiB files are the point
    kind = r.choice(["block", "flow", "json", "wide-yaml", "wide-json", "keys", "name", "deep", "items"])
    head = b"model: gpt2\nhardware: {gpu: h100-sxm}\n"
    if kind == "block":
        return "sc.yaml", _repeat(b"", r.choice([b"- 1\n", b"- ~\n", b"- {}\n", b"- [x]\n", b"- gpt2\n"]), count, b"")
    if kind == "flow":
        return "sc.yaml", _repeat(b"[", b"1,", count, b"1]")
    if kind == "json":
        return "sc.json", _repeat(b"[", r.choice([b"1,", b"{},", b"[],", b'"a,[",', b"null,"]), count, b"1]")
    if kind == "wide-yaml":
        return "sc.yaml", _repeat(b"", b"- [" + b"1," * 999 + b"1]\n", count, b"")
    if kind == "wide-json":
        return "sc.json", _repeat(b"[", b"[" + b"1," * 999 + b"1],", count, b"1]")
    if kind == "keys":
        return "sc.yaml", _repeat(head + b"training: {", b"k: 1, ", count, b"k: 2}\n")
    if kind == "name":
        return "sc.yaml", _repeat(head + b"name: [", b"1,", count, b"1]\n")
    if kind == "deep":
        depth = r.choice([17, 33, 1000, 100_000])
        return "sc.json", b"[" * depth + b"]" * depth
    return "sc.json", _scenario_list(r, r.choice([3, 20, 200]))


def _repeat(head: bytes, unit: bytes, count: int, tail: bytes) -> tuple:
    """``head + unit * count + tail``, ``count`` cut so that the file stays under the 16 MiB cap."""
    return ("repeat", head, unit, min(count, (16 * MIB - len(head) - len(tail)) // len(unit)), tail)


def big_document_case(r: Any, case: Any) -> None:
    name, spec = big_document(r)
    case.files[name] = spec
    valid = isinstance(spec, bytes) and spec.startswith(b"[{")  # a list of scenarios: each one evaluated
    case.argv = [r.choice(["evaluate"] if valid else ["evaluate", "fit", "plan"]), name, "--json"]
    if case.argv[0] != "evaluate":
        case.argv += ["--max-gpus", "8"]
    case.kind = "boundary:big-document"


def safetensors_case(r: Any, case: Any) -> None:
    from hostile import SMALL_CONFIG

    case.files["m/config.json"] = json.dumps(SMALL_CONFIG).encode()
    pick = r.choice(["deep", "deep-wide", "cap-ints", "cap-lists", "cap-tensors"])
    if pick.startswith("deep"):
        depth = r.choice([8, 9, 12, 50, 3000])
        inner = b"[" * depth + (b"1," * 1000 + b"1" if pick == "deep-wide" else b"1") + b"]" * depth
        body = b'{"w": {"dtype": "BF16", "shape": ' + inner + b"}}"
        case.files["m/model.safetensors"] = struct.pack("<Q", len(body)) + body
    else:
        unit, head = {"cap-ints": (b"1,", b'{"w": {"dtype": "BF16", "shape": ['),
                      "cap-lists": (b"[],", b'{"w": {"dtype": "BF16", "shape": ['),
                      "cap-tensors": (b'"t":{},', b"{")}[pick]
        tail = b"1]}}" if pick != "cap-tensors" else b'"u":{}}'
        count = (r.choice([100, 99]) * MIB - len(head) - len(tail)) // len(unit)
        size = len(head) + len(unit) * count + len(tail)
        case.files["m/model.safetensors"] = ("repeat", struct.pack("<Q", size) + head, unit, count, tail)
    case.argv = ["evaluate", "--model", "m", "--gpu", "h100-sxm"]
    case.kind = "boundary:safetensors"


# links made in the case's folder (a regression replaces the link there, never the machine's file)
OUTPUT_TARGETS = [("symlink", "/dev/null"), ("symlink", "/dev/stdout"), ("symlink", "/proc/self/fd/1"),
                  ("symlink", "/proc/self/environ"), ("fifo",), ("socket",), ("symlink", "fifo-t"),
                  ("symlink", "socket-t")]


def output_target_case(r: Any, case: Any) -> None:
    cmd = r.choice(["export", "evaluate", "plan"])
    flag = "-o" if cmd == "export" else r.choice(["--report", "--plot"])
    spec = r.choice(OUTPUT_TARGETS)
    target = "out.md" if flag != "--plot" else "out.svg"
    case.files[target] = spec
    case.files["fifo-t"], case.files["socket-t"] = ("fifo",), ("socket",)
    case.argv = [cmd, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", flag, target]
    case.argv += (["--to", "torchrun"] if cmd == "export" else ["--max-gpus", "8"] if cmd == "plan" else [])
    if r.random() < 0.7:
        case.argv.append("--force")
    case.kind = "boundary:output-target"


HOSTS = ["[::1]evil.com", "localhost:8000, evil.com", "localhost:80:80", "evil.com", "localhost.evil.com", "",
         "LOCALHOST:8000", "[::1]:8000", "127.0.0.1", "127.0.0.1:8000@evil.com", "localhost\r\nX: y", "[::1",
         "localhost:" + "9" * 300]
BODY_OPTIONS = [{"kind": []}, {"kind": {}}, {"format": {}}, {"format": ["md"]}, {"top": "1e308k"},
                {"max_gpus": "1e308k"}, {"objective": "\ud800"}, {"to": 5}, {"deadline": "1e308y"}]


def http_case(r: Any, case: Any) -> None:
    """``["@http", endpoint, host]`` with the body in ``case.files["body"]`` (see ``hostile._http``)."""
    kind = r.choice(["evaluate", "fit", "plan", "export", "report", "gpus"])
    host = r.choice(HOSTS) if r.random() < 0.4 else "localhost"
    body: Any = dict(BASE, to="torchrun") if kind == "export" else dict(BASE)
    pick = r.random()
    if pick < 0.3:
        _set(body, r.choice(TEXT_FIELDS), surrogate(r))
    elif pick < 0.6:
        body.update(r.choice(BODY_OPTIONS))
    raw = json.dumps(body)
    if r.random() < 0.4:  # an integer json.loads cannot turn into an int (past 4,300 digits), or just long
        raw = raw.replace('"gpus": 8', '"gpus": 1' + "0" * r.choice([40, 400, 4300, 5000, 100_000]))
    if r.random() < 0.2 and kind in ("evaluate", "report"):  # a batch whose one item is bad
        raw = "[" + ", ".join([json.dumps(BASE), raw, json.dumps(BASE)]) + "]"
    case.files["body"] = raw.encode("utf-8", "surrogatepass")
    case.argv = ["@http", kind, host]
    case.kind = "boundary:http"


BUILDERS = [surrogate_case, huge_count_case, big_document_case, safetensors_case, output_target_case, http_case]
