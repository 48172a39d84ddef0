"""Hostile inputs for every command, and a runner that executes each one in a forked child.

A case is a command line plus the files it needs (scenario files, model folders with config.json,
safetensors headers and index files, FIFOs, symlinks, existing output files). ``make_case`` builds
one from a source of choices: in ``strategies.py`` every choice is a hypothesis draw and the values
come from hypothesis' generators as well as the hand-picked breakers below, so a failure shrinks;
``generate(seed, n)`` draws ``n`` cases from a fixed seed; ``run_cases`` runs each through ``gpuplan.cli.main`` in a
fresh fork (so a hang can be killed and memory measured) and classifies the outcome:

- ``answer``: exit 0 (with ``--json``, stdout must be valid JSON),
- ``error``: exit 2 and exactly one line ``gpuplan: error: ...`` on stderr, printable and short,
- ``traceback``, ``hang`` (past the time limit), ``memory`` (peak RSS over the limit),
  ``bad-output`` (anything else: several lines, invalid JSON, an exit status other than 0 or 2).

Run ``python tests/fuzz/hostile.py --n 10000`` for the full numbers (README, "Hostile inputs").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Source(Protocol):
    """Where a case's choices come from (strategies.Draws: hypothesis draws)."""

    def choice(self, seq: Any) -> Any: ...
    def random(self) -> float: ...
    def randint(self, low: int, high: int) -> int: ...
    def value(self) -> Any: ...
    def shape(self) -> list[Any]: ...
    def surrogate(self) -> str: ...  # text holding a lone surrogate
    def huge_count(self, family: str) -> str: ...  # "1e308k": infinite once its suffix multiplies it


# ---- hostile values ------------------------------------------------------------------------------
BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
        "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n")
INLINE_BOMB = ("{a: &a [x,x,x,x,x,x,x,x,x], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b],"
               " d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d],"
               " f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e], g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f],"
               " params: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]}")

HOSTILE_NUMBERS: list[Any] = [
    10**309, -(10**309), 10**400, 2**64, 2**53 + 1, 1e308, 1e-320, -1, 0, -0.0, 0.5, 1.5, 3, 7, 8, 64, 4096,
    float("inf"), float("nan"), True, False, None, [], {}, [1, 2], {"a": 1},
    "1e309", "-1e309", "1e999999999", "0x" + "f" * 300, "0xff", "0o777", "0b1010", "190:20:30", "1:" * 200 + "1",
    "1" * 5000, "9" * 40000 + "!", "1" * 40000, "1." + "0" * 50000, "١٢٣", "٨", "1,000,000", "1,5", "1,5T",
    "1.4T", "7B", "16k", "80GiB", "30d", "1e4", " ", "", "nan", "inf", "-inf", ".inf", "1_000", "1__0",
    "+" * 1000, "1e" + "9" * 5000, "0" * 30000 + "1", "1" + "e" * 3000, "12345678901234567890123",
    "1e15", "1P", "2^20", "1/0", "NaNT", "\u0661e\u0669\u0669\u0669",
]


def _deep(depth: int, kind: str = "list") -> Any:
    out: Any = 1
    for _ in range(depth):
        out = [out] if kind == "list" else {"a": out}
    return out


def hostile_string(r: Source) -> str:
    return r.choice([
        "x" * 300, "llama-" * 60, "a" * 20_000_000 if r.random() < 0.05 else "a" * 200_000,
        "llama\nEVIL: injected line", "h100\r\nEVIL", "\x1b[31mred\x1b[0m", "\x00nul", "\x07bell",
        "../../../../etc/passwd", "/etc/shadow", "/dev/zero", "/dev/urandom", "/proc/self/environ",
        "/dev/stdin", "fifo", "link-zero", "~/nonexistent", "", "   ", "{", "{params: }", "{params: 1e15}",
        "{params: [[[[[[[[1]]]]]]]]}", "[" * 5000, "{" * 5000, "{a: " * 2000, INLINE_BOMB,
        "!!python/object/apply:os.system ['echo pwned']", "{params: !!python/object/apply:os.getpid []}",
        "\u202eevil", "\ud7ff" * 10, "é" * 500, "nvidia/h100", "H100-SXM5-80GB", "all", "all,all,all",
        ",".join(["h100-sxm"] * 500), "h100-sxm," * 3, "{base: h100-sxm, bf16_dense_tflops: 1e309}",
        "{base: a10g, hbm_gb: -1}", "{base: " + "x" * 300 + "}",
    ])


def hostile_value(r: Source) -> Any:
    pick = r.random()
    if pick < 0.25:  # hypothesis' own: any integer to 10^400, any float, any text, nested values
        return r.value()
    if pick < 0.45:
        return r.choice(HOSTILE_NUMBERS)
    if pick < 0.85:
        return hostile_string(r)
    if pick < 0.95:
        return _deep(r.choice([50, 500, 5000]), r.choice(["list", "dict"]))
    return [hostile_string(r) for _ in range(r.randint(0, 5))]


def as_flag(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, bool | type(None)):
        return json.dumps(value)
    if isinstance(value, list | dict):
        try:
            return json.dumps(value)[:100000]
        except RecursionError:
            return "[" * 5000 + "]" * 5000
    return str(value) if not isinstance(value, int) or abs(value) < 10**4000 else "1" * 5000


# ---- valid bases that the mutations start from ---------------------------------------------------
MODELS = ["llama-3.1-8b", "gpt2", "mixtral-8x7b", "qwen2.5-0.5b", {"params": 7e9}, {"params": "1.4B"},
          {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 32000}]
GPUS = ["h100-sxm", "a100-80gb-sxm", "h200", "H100", "l40s", "mi300x"]
FIELDS = {  # scenario key → flag
    "hardware.gpu": "--gpu", "hardware.gpus": "--gpus", "hardware.gpus_per_node": "--gpus-per-node",
    "hardware.scale_up": "--scale-up", "hardware.scale_out": "--scale-out", "hardware.price_per_gpu_hour": "--price",
    "hardware.power_limit_w": "--power-limit", "hardware.calibration": "--calibration",
    "hardware.host_memory": "--host-memory",
    "training.seq_len": "--seq-len", "training.global_batch": "--global-batch",
    "training.global_batch_tokens": "--global-batch-tokens", "training.tokens": "--tokens",
    "training.steps": "--steps", "training.precision": "--precision", "training.optimizer": "--optimizer",
    "training.method": "--method", "training.lora_rank": "--lora-rank", "training.lora_targets": "--lora-targets",
    "training.attention": "--attention", "training.dropout": "--dropout",
    "training.trace_calibration": "--trace-calibration", "training.framework": "--framework",
    "training.compile": "--compile", "training.headroom": "--headroom", "training.fp8_recipe": "--fp8-recipe",
    "training.kernels": "--kernels", "training.lora_dropout": "--lora-dropout",
    "training.optimizer_impl": "--optimizer-impl",
    "hardware.nodes": None, "hardware.memory_factor": None, "hardware.compute_factor": None,
    "layout.dp": "--dp", "layout.tp": "--tp", "layout.pp": "--pp", "layout.cp": "--cp", "layout.ep": "--ep",
    "layout.zero": "--zero", "layout.zero_group": "--zero-group", "layout.micro_batch": "--micro-batch",
    "layout.recompute": "--recompute", "layout.sequence_parallel": "--sequence-parallel",
    "layout.pp_schedule": "--pp-schedule", "layout.virtual_stages": "--virtual-stages", "layout.offload": "--offload",
    "model": "--model", "name": None,
}
COMMAND_FLAGS = {
    "fit": {"--max-gpus": ["1", "64", "16384", "1048576", "1e309", "0", "-1", "9" * 40000 + "!", "1.5", "x"]},
    "plan": {"--max-gpus": ["1", "64", "1048576", "1e309", "0", "x"], "--top": ["1", "0", "1e9", "1e309", "-3"],
             "--deadline": ["14d", "0d", "-1d", "1e309d", "9" * 40000 + "d", "14"],
             "--budget": ["50000", "0", "1e309", "-1", "$" * 100], "--threshold": ["0.8", "2", "-1", "nan", "1e309"],
             "--objective": ["time", "cost", "speed"], "--explain": None},
    "export": {"--to": ["torchtitan", "deepspeed", "accelerate", "megatron", "torchrun", "jax"],
               "--max-gpus": ["64", "1e309", "0"]},
    "trace": {"--fidelity": ["cpu", "cuda", "tpu"], "--module": ["os:system", "nonexistent.mod:f", "x" * 300]},
    "profile": {"--nproc": ["1", "0", "1e309", "99999"], "--nnodes": ["1", "2", "1e309"],
                "--steps": ["1", "0", "1e9"], "--warmup": ["0", "-1"], "--timeout": ["60", "0", "1e309", "nan"],
                "--device": ["cpu", "cuda", "tpu", "\n"], "--no-store": None},
}
TINY = ("{model_type: llama, num_hidden_layers: 2, hidden_size: 64, num_attention_heads: 2, "
        "num_key_value_heads: 2, intermediate_size: 128, vocab_size: 256}")
COMMAND_WEIGHTS = {"evaluate": 30, "fit": 18, "plan": 12, "export": 10, "trace": 2, "profile": 4}
# round-robin, not one block per command: nearby draws (hypothesis makes many) still reach each one
COMMANDS = [k for j in range(max(COMMAND_WEIGHTS.values())) for k, w in COMMAND_WEIGHTS.items() if j < w]


def base_scenario(r: Source) -> dict:
    sc: dict[str, Any] = {"model": r.choice(MODELS), "hardware": {"gpu": r.choice(GPUS), "gpus": r.choice([1, 8, 64])},
                          "training": {"seq_len": r.choice([1024, 4096]), "tokens": r.choice(["1T", 1e9])}}
    if r.random() < 0.5:
        sc["layout"] = {"tp": r.choice([1, 2, 8]), "zero": r.choice([0, 1, 3])}
    return sc


def _set(sc: dict, dotted: str, value: Any) -> None:
    if "." in dotted:
        sec, key = dotted.split(".")
        if not isinstance(sc.get(sec), dict):
            sc[sec] = {}
        sc[sec][key] = value
    else:
        sc[dotted] = value


# ---- model folders: config.json, safetensors headers, index files ----------------------------------
SMALL_CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "torch_dtype": "bfloat16",
                "tie_word_embeddings": False}


def safetensors(header: Any, raw: bytes | None = None) -> bytes:
    try:
        body = raw if raw is not None else json.dumps(header).encode()
    except RecursionError:
        body = b'{"w": {"shape": ' + b"[" * 3000 + b"]" * 3000 + b"}}"
    return struct.pack("<Q", len(body)) + body


def _tensor_headers(r: Source) -> bytes:
    good = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1000, 256], "data_offsets": [0, 0]},
            "model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [512, 256], "data_offsets": [0, 0]}}
    known = [[1e200, 1e200], [10**30, 10**30], [10**400], [-1, 5], ["a"], [2**63, 2**63, 2**63],
             _deep(3000), [1] * 100000, [True], None, [1.5], [0]]
    shape = r.shape() if r.random() < 0.4 else r.choice(known)
    return r.choice([
        safetensors({}), safetensors({"__metadata__": {"format": "pt"}}), safetensors(good),
        safetensors({"w": {"dtype": "BF16", "shape": shape}}) if not isinstance(shape, list) or len(shape) < 5000
        else safetensors(None, b'{"w": {"shape": [' + b",".join([b"1"] * 100000) + b"]}}"),
        safetensors(None, b"[" * 100000 + b"]" * 100000),
        safetensors(None, b'{"w": {"shape": [1' + b"0" * 5000 + b']}}'),
        safetensors(None, b'{"w": {"shape": [1e400, 1]}}'), safetensors(None, b"\xff\xfe garbage"),
        struct.pack("<Q", 2**63) + b"{}", struct.pack("<Q", 0), b"", b"\x01",
        safetensors({"w" * 300: {"shape": [2, 2]}, "__metadata__": [1, 2]}),
        safetensors({f"t{i}": {"shape": [1]} for i in range(50000)}),
    ])


def _index(r: Source) -> bytes:
    return r.choice([
        json.dumps({"metadata": {"total_size": 0}, "weight_map": {"lm_head.weight": "model.safetensors"}}),
        json.dumps({"metadata": {"total_size": -5}, "weight_map": {"a": "model.safetensors"}}),
        json.dumps({"metadata": {"total_size": 10**400}, "weight_map": {"a": "x.safetensors"}}),
        json.dumps({"metadata": {"total_size": 1.5}, "weight_map": {"a": "x.safetensors"}}),
        json.dumps({"metadata": [1], "weight_map": {"a": "x.safetensors"}}),
        json.dumps({"metadata": "x", "weight_map": {"a": "x.safetensors"}}),
        json.dumps({"metadata": {"total_size": 2000000}, "weight_map": {"a": 5, "b": None, "c": ["x"]}}),
        json.dumps({"metadata": {"total_size": 2000000}, "weight_map": {"a": "../../../../dev/zero"}}),
        json.dumps({"metadata": {"total_size": 2000000}, "weight_map": {"a": "/etc/passwd"}}),
        json.dumps({"metadata": {"total_size": 2000000}, "weight_map": {"a": "fifo.safetensors"}}),
        json.dumps({"metadata": {"total_size": 2000000}, "weight_map": {f"k{i}": "n.safetensors" for i in range(20)}}),
        json.dumps({"weight_map": []}), json.dumps([]), "[" * 100000,
        '{"metadata": {"total_size": 1' + "0" * 5000 + "}}",
        json.dumps({"metadata": {"total_size": 3000000}, "weight_map": {"model.layers.99.x": "m.safetensors"}}),
    ]).encode()


def _config(r: Source) -> bytes:
    pick = r.random()
    if pick < 0.55:
        cfg = dict(SMALL_CONFIG)
        for _ in range(r.randint(1, 2)):
            cfg[r.choice([*SMALL_CONFIG, "num_local_experts", "head_dim", "max_position_embeddings", "rope_scaling",
                          "quantization_config", "n_layer"])] = hostile_value(r)
        try:
            return json.dumps(cfg).encode()
        except (ValueError, RecursionError):
            return b"{}"
    return r.choice([
        b"[" * 100000 + b"]" * 100000, b'{"model_type": "llama", "hidden_size": 1' + b"0" * 5000 + b"}",
        b'{"model_type": "llama", "hidden_size": 1e400}', b"", b"\xff\xfe{\x00", b"null", b"[]", b'"llama"',
        json.dumps({**SMALL_CONFIG, "model_type": "x" * 300}).encode(), b"{" + b" " * 3_000_000 + b"}",
        json.dumps({**SMALL_CONFIG, "hidden_size": "not a number\nEVIL: line"}).encode(),
        json.dumps({"model_type": "llama", "secret": "TOPSECRET" * 3}).encode(),
    ])


def model_folder(r: Source, files: dict[str, Any], name: str = "m") -> str:
    files[f"{name}/config.json"] = _config(r) if r.random() < 0.6 else json.dumps(SMALL_CONFIG).encode()
    pick = r.random()
    if pick < 0.35:
        files[f"{name}/model.safetensors"] = _tensor_headers(r)
    elif pick < 0.6:
        files[f"{name}/model.safetensors.index.json"] = _index(r)
        if r.random() < 0.5:
            files[f"{name}/x.safetensors"] = _tensor_headers(r)
    elif pick < 0.7:
        files[f"{name}/config.json"] = ("fifo",)
    elif pick < 0.8:
        files[f"{name}/config.json"] = ("symlink", r.choice(["/dev/zero", "/dev/urandom", "/etc/shadow",
                                                             "/proc/self/mem"]))
    elif pick < 0.9:
        files[f"{name}/model.safetensors"] = r.choice([("fifo",), ("symlink", "/dev/zero")])
        files[f"{name}/fifo.safetensors"] = ("fifo",)
    return name if r.random() < 0.8 else f"{name}/config.json"


# ---- cases ---------------------------------------------------------------------------------------
RAW_YAML = ["0x" + "f" * 300, "190:20:30", "-190:20:30:10:10", "1" * 5000, "1e309", "-1e309", ".inf", ".nan",
            "0b" + "1" * 3000, "0o" + "7" * 2000, "1_000_000", "~", "!!python/object/apply:os.system ['echo x']",
            "!!python/name:os.system", "*undefined", "!!binary aGVsbG8=", "!!set {a, b}", "2001-12-14",
            "!!timestamp 2001-12-14", "!!float 1e999", "!!int '1" + "0" * 5000 + "'", "|\n    multi\n    line",
            "'" + "x" * 100000 + "'", "[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000, "&a x", "? complex",
            "\"\\x00\\n\\u202e\"", "!!str", "!<tag:yaml.org,2002:python/object:object> {}"]


@dataclass
class Case:
    argv: list[str]
    files: dict[str, Any] = field(default_factory=dict)
    kind: str = ""

    def wants_json(self) -> bool:
        return "--json" in self.argv


def _mutated(r: Source, n: int) -> dict:
    sc = base_scenario(r)
    for _ in range(n):
        key = r.choice(list(FIELDS))
        _set(sc, key, hostile_value(r))
    if r.random() < 0.15:  # a whole section that is not a mapping (issue 25 item 5: `hardware: 65536` in plan)
        sc[r.choice(["hardware", "training", "layout"])] = hostile_value(r)
    if r.random() < 0.1:  # shape hints that contradict the parameter count (issue 25 item 9: MFU 1086 %)
        sc["model"] = {"params": r.choice([7e9, 1e12, "1.4B", 1e6]), "layers": r.choice([1, 2, 32, 200, 10**4]),
                       "hidden": r.choice([1, 64, 128, 4096, 8192, 10**6])}
    return sc


def _dump(r: Source, obj: Any, as_json: bool) -> bytes:
    import yaml

    try:
        if as_json:
            return json.dumps(obj).encode()
        return yaml.safe_dump(obj, allow_unicode=r.random() < 0.5).encode()
    except (ValueError, RecursionError, yaml.YAMLError, OverflowError):
        return b"model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\n"


def _raw_yaml(r: Source) -> bytes:
    key = r.choice([k for k in FIELDS if k != "name"] + ["name"])
    lit = r.choice(RAW_YAML) if r.random() < 0.85 else BOMB.replace("\n", "\n  ")
    sec, _, sub = key.partition(".")
    body = (f"{sec}:\n  {sub}: {lit}\n" if sub else f"{sec}: {lit}\n")
    head = {"model": "model: llama-3.1-8b\n", "hardware": "hardware: {gpu: h100-sxm, gpus: 8}\n"}
    text = "".join(v for k, v in head.items() if k != sec) + body
    if r.random() < 0.3:
        text = BOMB + text
    return text.encode()


def _scenario_file(r: Source, c: Case) -> str:
    pick = r.random()
    name = "sc.json" if r.random() < 0.35 else "sc.yaml"
    if pick < 0.45:
        c.files[name] = _dump(r, _mutated(r, r.randint(1, 3)), name.endswith(".json"))
    elif pick < 0.65:
        name = "sc.yaml"
        c.files[name] = _raw_yaml(r)
    elif pick < 0.8:  # a list: good, hostile, good
        items = [base_scenario(r), _mutated(r, 2), base_scenario(r)]
        if r.random() < 0.3:
            items[1] = r.choice([None, 5, "x", [], _deep(100)])
        c.files[name] = _dump(r, items, name.endswith(".json"))
    elif pick < 0.9:  # a model folder beside the scenario
        sc = base_scenario(r)
        sc["model"] = model_folder(r, c.files)
        c.files[name] = _dump(r, sc, name.endswith(".json"))
    else:
        special = r.choice([("fifo",), ("symlink", "/dev/zero"), ("symlink", "/dev/urandom"), ("dir",),
                            b"\xff\xfe" + "model: x".encode("utf-16-le"), b"\x00" * 100, b"",
                            b"model: " + b"x" * 20_000_000, b"- " * 200000, BOMB.encode(), b"[]", b"null",
                            b"model: llama-3.1-8b\x00", b"---\n---\n", ("symlink", "/etc/shadow")])
        c.files[name] = special
    return name


def _flags(r: Source, c: Case, with_file: bool, cmd: str) -> list[str]:
    args: list[str] = []
    if not with_file or r.random() < 0.2:
        # a real trace of a full-size model takes a minute: trace gets the tiny model or a folder
        model = TINY if cmd == "trace" else r.choice(["llama-3.1-8b", "gpt2", "{params: 7e9}", "qwen2.5-0.5b"])
        if r.random() < 0.25:
            model = model_folder(r, c.files)
        args += ["--model", model, "--gpu", r.choice(GPUS)]
        if r.random() < 0.5:
            args += ["--gpus", r.choice(["1", "8", "64"])]
    for _ in range(r.choice([0, 1, 1, 2, 3])):
        flag = r.choice([f for f in FIELDS.values() if f])
        args += [flag, as_flag(hostile_value(r))]
    return args


def _outputs(r: Source, c: Case, cmd: str, scenario: str | None) -> list[str]:
    flags = {"evaluate": ["--plot", "--report"], "plan": ["--plot", "--report"], "export": ["-o"]}.get(cmd)
    if not flags or r.random() < 0.85:
        return []
    flag = r.choice(flags)
    target = r.choice(["out.md", "out.html", "out.png", "out.toml"])
    pick = r.random()
    if pick < 0.25:
        c.files[target] = b"precious"
    elif pick < 0.45:
        c.files[target] = ("symlink", r.choice(["precious.txt", "nowhere/x", "/dev/null"]))
        c.files["precious.txt"] = b"precious"
    elif pick < 0.55 and scenario:
        target = scenario
    elif pick < 0.65:
        c.files[target] = ("fifo",)
    elif pick < 0.75:
        c.files[target] = ("dir",)
    out = [flag, target]
    if cmd != "export" and r.random() < 0.3:
        out += ["--plot" if flag == "--report" else "--report", target]
    return out


def make_case(r: Source) -> Case:
    """A command line and its files (``boundary.py`` builds the cases of issue 25's defect classes)."""
    c = Case([])
    if r.random() < 0.03:
        cmd = r.choice(["gpus", "models", "fabrics", "calibrate", "validate"])
        c.argv = [cmd, "--json"] if r.random() < 0.5 else [cmd]
        if cmd == "validate":  # its input is the bundled corpus (a cross-validated fit: seconds), not the user's
            c.argv.append("--constants")
        if cmd == "calibrate":
            c.files["store"] = r.choice([b"not sqlite", ("fifo",), ("symlink", "/dev/zero"), ("dir",)])
            c.argv += ["--store", r.choice(["store", "x" * 300, "/dev/zero", "store\nEVIL"])]
        c.kind = cmd
        return c
    cmd = r.choice(COMMANDS)
    with_file = r.random() < 0.55
    scenario = _scenario_file(r, c) if with_file else None
    c.argv = [cmd] + ([scenario] if scenario else []) + _flags(r, c, with_file, cmd)
    if cmd == "trace":  # the tiny model first (the hostile flags may still override it)
        c.argv[1 + bool(scenario):1 + bool(scenario)] = ["--model", TINY, "--gpus", "1"]
    for flag, values in COMMAND_FLAGS.get(cmd, {}).items():
        if r.random() < (0.9 if flag == "--to" else 0.3):
            c.argv += [flag] if values is None else [flag, r.choice(values)]
    if cmd == "profile":
        c.argv += ["--device", "cpu", "--no-store"] if "--device" not in c.argv else ["--no-store"]
    c.argv += _outputs(r, c, cmd, scenario)
    if r.random() < 0.6:
        c.argv.append("--json")
    if r.random() < 0.03:
        c.argv += r.choice([["--bogus"], ["--", "--rdzv-endpoint", "0.0.0.0:1"], ["--gpu"], ["-o"]])
    c.kind = cmd + (":file" if with_file else ":flags")
    return c


def generate(seed: int, n: int) -> list[Case]:
    return list(iter_cases(seed, n))


# ---- running ------------------------------------------------------------------------------------
class _Launched(BaseException):
    """Raised instead of starting torchrun: a profile case that got this far is an answer."""


def _materialize(root: Path, files: dict[str, Any]) -> None:
    for rel, spec in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, bytes):
            p.write_bytes(spec)
        elif spec[0] == "fifo":
            os.mkfifo(p)
        elif spec[0] == "symlink":
            os.symlink(spec[1], p)
        elif spec[0] == "dir":
            p.mkdir(exist_ok=True)
        elif spec[0] == "socket":
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(str(p))
        elif spec[0] == "repeat":  # head + unit * count + tail, written a piece at a time
            _, head, unit, count, tail = spec
            with p.open("wb") as f:
                f.write(head)
                for done in range(0, count, 1 << 16):
                    f.write(unit * min(1 << 16, count - done))
                f.write(tail)


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(case: Case, root: Path, out: Path, err: Path, clock: Path) -> None:
    t0 = time.monotonic()
    os.setpgid(0, 0)
    fd_out, fd_err = os.open(out, os.O_WRONLY | os.O_CREAT), os.open(err, os.O_WRONLY | os.O_CREAT)
    os.dup2(fd_out, 1)
    os.dup2(fd_err, 2)
    # the streams on the new descriptors (under pytest sys.stdout/err are capture objects, not fds 1/2)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    rc = 1
    try:
        os.chdir(root)
        _materialize(root, case.files)
        room = _vm_bytes() + 4 * 2**30  # a runaway allocation fails here instead of taking the machine
        resource.setrlimit(resource.RLIMIT_AS, (room, room))
        import gpuplan.profile.launch as launch
        from gpuplan.cli import main

        def launched(*a: Any, **k: Any) -> Any:
            raise _Launched

        launch.run_trial = launched
        import gpuplan.profile.run as prun

        prun.run_trial = launched  # type: ignore[attr-defined]
        try:
            rc = _http(case) if case.argv[0] == "@http" else main(list(case.argv))
        except _Launched:  # profile got as far as starting the trial: an answer, in JSON when asked
            print(json.dumps({"launched": True}))
            rc = 0
    except BaseException:  # noqa: B036 - what the user would see: a traceback, exit 1
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            # the child's own wall time: the parent may look late (drawing the next chunk of cases)
            clock.write_text(f"{time.monotonic() - t0:.6f}")
        finally:
            os._exit(rc if isinstance(rc, int) else 1)


@dataclass
class Outcome:
    case: Case
    verdict: str
    rc: int
    wall_s: float
    rss_bytes: int
    detail: str = ""


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _batch_failed(rc: int, out: str, err: str) -> bool:
    """Exit 1 of a list of scenarios in which some item failed (cli._print): the text says which on stderr,
    the JSON is the list with the failed items' ``{"error": ...}``."""
    if rc != 1 or "Traceback (most recent call last)" in err:
        return False
    if re.search(r"^gpuplan: \d+ of \d+ items failed", err, re.M):
        return True
    try:
        res = json.loads(out, parse_constant=_not_json)
    except ValueError:
        return False
    return isinstance(res, list) and any(isinstance(r, dict) and "error" in r for r in res)


def _classify(case: Case, rc: int, out: str, err: str, root: Path, tmp: Path) -> tuple[str, str]:
    batch = _batch_failed(rc, out, err)
    if "Traceback (most recent call last)" in err or (rc == 1 and not batch):
        return "traceback", err[-2000:]
    for rel, spec in case.files.items():
        p = root / rel
        if spec == b"precious" and (not p.is_file() or p.read_bytes() != b"precious"):
            return "clobbered", rel
        if isinstance(spec, tuple) and not _still(p, spec):
            return "clobbered", f"{rel} is no longer {spec}"
    if not stat.S_ISCHR(os.stat("/dev/null").st_mode) or not os.path.islink("/dev/stdout"):
        return "clobbered", "/dev/null or /dev/stdout"
    # left behind in TMPDIR: a leak (torch's own compile cache, shared by every run, is not)
    left = [x.name for x in tmp.iterdir() if not x.name.startswith("torchinductor_")] if tmp.exists() else []
    if left:
        return "leak", ", ".join(left)
    if rc == 0 or batch:
        if case.wants_json():
            try:
                json.loads(out, parse_constant=_not_json)
            except ValueError as err:
                return "bad-output", f"invalid JSON ({err}): {out[:300]}"
        return "answer", ""
    lines = err.splitlines()
    errs = [ln for ln in lines if ln.startswith("gpuplan: error:")]
    if rc == 2 and len(errs) == 1 and len(errs[0]) <= 2000 and errs[0].isprintable():
        return "error", errs[0][:300]
    return "bad-output", f"rc={rc} {len(lines)} line(s): {err[:600]!r}"


def _still(p: Path, spec: tuple) -> bool:
    """A special file of the case is what it was made (a link to the same place, a FIFO, a socket)."""
    try:
        mode = os.lstat(p).st_mode
    except OSError:
        return spec[0] in ("dir", "repeat")  # a folder a case may remove; a file written to a new name
    if spec[0] == "symlink":
        return stat.S_ISLNK(mode) and os.readlink(p) == spec[1]
    return {"fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK, "dir": stat.S_ISDIR}.get(spec[0], stat.S_ISREG)(mode)


def _http(case: Case) -> int:
    """``["@http", endpoint, host]``: one request (body: the case's file ``body``) to the web application
    in this process, as the CLI would say it: the answer (exit 0), ``gpuplan: error: …`` for a 4xx
    (exit 2), exit 1 for a 5xx (a failure, as a traceback). evaluate and the catalogues pass the whole
    application; the searches its host check and then the pool's job, ``compute``."""
    import asyncio

    try:
        from gpuplan.serve.app import LOCAL_NAMES, HostCheck, build_app
        from gpuplan.serve.pool import compute
    except ImportError:  # no web server installed: nothing to ask
        print("{}")
        return 0
    _, kind, host = case.argv
    body = Path("body").read_bytes()
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    async def reached(scope: Any, receive: Any, send: Any) -> None:
        sent.append({"type": "reached"})

    scope = {"type": "http", "method": "GET" if kind == "gpus" else "POST", "path": f"/api/{kind}", "root_path": "",
             "query_string": b"", "headers": [(b"host", host.encode("latin-1", "replace"))], "http_version": "1.1"}
    if kind in ("evaluate", "gpus"):
        asyncio.run(build_app(workers=1, hosts=LOCAL_NAMES)(scope, receive, send))
    else:
        asyncio.run(HostCheck(reached, LOCAL_NAMES)(scope, receive, send))
        if sent and sent[0]["type"] == "reached":
            reply = compute(kind, body, False, 8.0)
            sent = [{"status": reply.status}, {"body": reply.body}]
    status, answer = sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])
    if status == 200:
        print(answer.decode("utf-8", "replace"))
        return 0
    if 400 <= status < 500:
        print(f"gpuplan: error: {json.loads(answer)['error']}", file=sys.stderr)
        return 2
    print(f"HTTP {status}: {answer[:300]!r}", file=sys.stderr)
    return 1


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


def run_cases(cases: Iterable[Case], *, jobs: int = 2, limit_s: float = 10.0, rss_limit: int = 640 * 2**20,
              on_done: Any = None) -> list[Outcome]:
    """Each case in a forked child, ``jobs`` at a time. ``cases`` may be a generator: the parent holds
    only the cases running. ``rss_bytes`` is the child's peak resident memory, the pages it shares
    with the parent included; what it grew past the parent's image (gpuplan and torch imported: ~0.4 GiB in a
    fresh process, more in a test worker that ran other modules first) is held against ``rss_limit``."""
    if not isinstance(cases, list) or any(c.argv and c.argv[0] == "trace" for c in cases):
        try:
            import torch  # noqa: F401 - imported once here, not in every forked child (seconds each)
        except ImportError:
            pass
    import gpuplan.cli  # noqa: F401 - likewise
    work = Path(tempfile.mkdtemp(prefix="gpuplan-fuzz-"))
    env_tmp = work / "tmp"
    results: dict[int, Outcome] = {}
    running: dict[int, tuple[int, float, Case, int]] = {}
    todo = enumerate(cases)
    left = True
    os.environ["GPUPLAN_STORE"] = str(work / "store.sqlite")
    try:
        while left or running:
            while left and len(running) < jobs:
                nxt = next(todo, None)
                if nxt is None:
                    left = False
                    break
                i, case = nxt
                if case.argv[:2] == ["@http", "report"]:
                    _warm_reports()
                root, tmp = work / f"c{i}", env_tmp / f"c{i}"
                root.mkdir()
                tmp.mkdir(parents=True)
                base = _rss_bytes()
                pid = os.fork()
                if pid == 0:
                    os.environ["TMPDIR"] = str(tmp)
                    tempfile.tempdir = str(tmp)
                    _child(case, root, work / f"c{i}.out", work / f"c{i}.err", work / f"c{i}.clock")
                running[pid] = (i, time.monotonic(), case, base)
            now = time.monotonic()  # every turn, not only when no child ended: a slow one is caught
            for p, (i, t0, case, _) in list(running.items()):
                if now - t0 > limit_s and not (work / f"c{i}.clock").exists():  # not one that ended unseen
                    with _quiet():
                        os.killpg(p, signal.SIGKILL)
                    os.waitpid(p, 0)
                    del running[p]
                    results[i] = Outcome(_light(case), "hang", -9, now - t0, 0)
                    _cleanup(work, i, on_done, results[i])
            pid, status, usage = os.wait4(-1, os.WNOHANG) if running else (0, 0, None)
            if pid == 0:
                time.sleep(0.002)
                continue
            if pid not in running:
                continue
            i, t0, case, base = running.pop(pid)
            try:
                wall = float((work / f"c{i}.clock").read_text())
            except (OSError, ValueError):
                wall = time.monotonic() - t0
            rc = os.waitstatus_to_exitcode(status)
            out = (work / f"c{i}.out").read_text(errors="replace")
            err = (work / f"c{i}.err").read_text(errors="replace")
            verdict, detail = _classify(case, rc, out, err, work / f"c{i}", env_tmp / f"c{i}")
            if wall > limit_s:  # ended between two looks, past the limit
                verdict, detail = "hang", f"{wall:.1f} s"
            rss = usage.ru_maxrss * 1024  # the child's peak, the parent's pages it started with included
            if verdict in ("answer", "error") and rss - base > rss_limit:
                verdict, detail = "memory", f"peak {rss / 2**20:.0f} MiB (the parent's image: {base / 2**20:.0f} MiB)"
            results[i] = Outcome(_light(case), verdict, rc, wall, rss, detail)
            _cleanup(work, i, on_done, results[i])
    finally:
        for p in running:
            with _quiet():
                os.killpg(p, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    return [results[i] for i in sorted(results)]


def _warm_reports() -> None:
    """A report states the model's accuracy on the published runs (a cross-validated fit, ~6 s once
    per process: the server's workers keep it): computed here once, before the children fork."""
    try:
        from gpuplan.serve.answers import accuracy_scores
    except ImportError:
        return
    accuracy_scores()


def _light(case: Case) -> Case:
    """The case as kept in the results: its file contents cut to their first 100 bytes."""
    return Case([a[:2000] for a in case.argv], {k: v[:100] if isinstance(v, bytes) else v
                                               for k, v in case.files.items()}, case.kind)


def iter_cases(seed: int, n: int) -> Iterator[Case]:
    """``generate(seed, n)``, a chunk at a time (the same cases, in the same order): hypothesis
    draws under a fixed seed (``strategies.draw_cases``: the command cases, and after every 8th a
    case of a defect class of ``boundary.py``)."""
    from strategies import draw_cases

    yield from draw_cases(seed, n)


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


def _cleanup(work: Path, i: int, on_done: Any, outcome: Outcome) -> None:
    for p in (work / f"c{i}", work / "tmp" / f"c{i}"):
        with _quiet():
            _chmod_all(p)
        shutil.rmtree(p, ignore_errors=True)
    for suffix in (".out", ".err", ".clock"):
        (work / f"c{i}{suffix}").unlink(missing_ok=True)
    if on_done is not None:
        on_done(outcome)


def _chmod_all(p: Path) -> None:
    for q in p.rglob("*"):
        if q.is_dir() and not q.is_symlink():
            q.chmod(0o755)


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    verdicts = Counter(o.verdict for o in outcomes)
    return {"cases": len(outcomes), **dict(sorted(verdicts.items())),
            "slowest_s": round(max((o.wall_s for o in outcomes), default=0), 2),
            "peak_rss_mib": round(max((o.rss_bytes for o in outcomes), default=0) / 2**20)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=float, default=10.0)
    ap.add_argument("--show", type=int, default=30, help="print this many failures")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    outcomes = run_cases(iter_cases(a.seed, a.n), jobs=a.jobs, limit_s=a.limit)
    bad = [o for o in outcomes if o.verdict not in ("answer", "error")]
    for o in bad[: a.show]:
        files = {k: (v[:60] if isinstance(v, bytes) else v) for k, v in o.case.files.items()}
        last = (o.detail.strip().splitlines() or [""])[-1][:300]
        print(f"--- {o.verdict} ({o.wall_s:.1f} s) {o.case.kind}: {[x[:60] for x in o.case.argv]} {files}\n    {last}")
    for o in sorted(outcomes, key=lambda o: -o.wall_s)[:3]:
        print(f"slowest: {o.wall_s:.1f} s {o.verdict} {[x[:60] for x in o.case.argv]}")
    print(json.dumps({**summary(outcomes), "seed": a.seed, "wall_s": round(time.monotonic() - t0, 1)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
