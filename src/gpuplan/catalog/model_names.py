"""A model named as checkpoints and papers name it, read as the catalogue model with its shapes: a checkpoint's
variant suffix (a chat or instruction tune, a quantized format for inference), an Ollama tag, a paper's remarks, two
versions of one model ("Llama-3/3.1-8B")."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuplan.catalog import without_remarks

# what a checkpoint's name adds to its model's: a chat or instruction tune, or a quantized format for inference —
# the same shapes to train (an Ollama tag's "name:size" is "name-size")
_VARIANT_SUFFIX = re.compile(r"[-_](instruct|chat|it|base|hf|fp8|fp16|bf16|awq|gptq|gguf|int4|int8|w4a16|w8a8|"
                             r"bnb[-_]4bit|4bit|8bit)$", re.IGNORECASE)
_VERSIONS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)(?![\d.])")  # 'Llama-3/3.1-8B'


def variant_of(ref: str, find: Callable[[str], str | None], params: Callable[[str], int]) -> tuple[str, str] | None:
    """(catalogue id, why) of a checkpoint name the catalogue knows (``find``) once its variant suffixes, or remarks in
    parentheses or after a comma, are dropped ("Llama-3.1-405B-Instruct-FP8", "llama3.1:8b", "LLaMA-65B (paper)"), or
    of a name with two versions of one model whose shapes are the same (``params``: "Llama-3/3.1-8B"), else None."""
    s = ref.strip().replace(":", "-")
    remarks = (core := without_remarks(s)) not in (s, "")
    notes = ["its remarks are not read"] if remarks else []
    s = core if remarks else s
    if (m := _VERSIONS.search(s)) is not None:
        ids = [_suffixed(s[:m.start()] + v + s[m.end():], find) for v in m.groups()]
        if None in ids or len({params(i[0]) for i in ids if i}) != 1:
            return None
        key, why = ids[0]  # type: ignore[misc]
        notes.insert(0, f"one of the versions it names, {m.group(1)} and {m.group(2)}, "
                        "which have the same shapes")
        return key, "; ".join(w for w in (why, *notes) if w)
    hit = _suffixed(s, find)
    if hit is None:
        return None
    why = hit[1] or ("an Ollama-style tag" if ":" in ref else "")
    return hit[0], "; ".join(w for w in (why, *notes) if w)


def _suffixed(s: str, find: Callable[[str], str | None]) -> tuple[str, str] | None:
    """(catalogue id, which suffixes change no shape — "" for none) of ``s`` with up to four variant suffixes
    dropped, else None."""
    dropped: list[str] = []
    for _ in range(5):
        key = find(s)
        if key is not None:
            return key, (f"{' and '.join(dropped)} {'changes' if len(dropped) == 1 else 'change'} no shape"
                         if dropped else "")
        m = _VARIANT_SUFFIX.search(s)
        if m is None:
            return None
        dropped.insert(0, m.group(1))
        s = s[:m.start()]
    return None


_REPO = re.compile(r"([\w.-]+)/([\w.-]+)")  # a Hugging Face repo id: organisation/name
_SIZE = re.compile(r"\d")
# a parameter count as names write it: "350m", "5b", "1.3b", "1t" (not "8x7b": a mixture's experts)
_COUNT = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([mbt])(?![a-z0-9])")
_SCALE = {"m": 1e6, "b": 1e9, "t": 1e12}


def _other_size(rest: str, params: int) -> bool:
    """Whether ``rest`` (a name without its base model's) states a parameter count more than 15 % off ``params``."""
    return any(abs(float(n) * _SCALE[u] / params - 1) > 0.15 for n, u in _COUNT.findall(rest))


def copy_of(ref: str, find: Callable[[str], str | None], params: Callable[[str], int]) -> tuple[str, str] | None:
    """(catalogue id, why) of a Hugging Face repo id whose organisation re-publishes a catalogue model under its own
    name ("NousResearch/Llama-2-7b-hf", "unsloth/llama-3-8b-bnb-4bit", "TheBloke/Llama-2-7B-fp16"): the name without
    the organisation, read as ``variant_of`` reads it; else None."""
    m = _REPO.fullmatch(ref.strip())
    if m is None or (hit := find(m.group(2)) or variant_of(m.group(2), find, params)) is None:
        return None
    key, why = (hit, "") if isinstance(hit, str) else hit
    where = f"{m.group(2)!r} as the Hugging Face organisation {m.group(1)!r} publishes it (no such folder here)"
    return key, "; ".join(w for w in (where, why) if w)


def base_named_in(ref: str, keys: list[str], find: Callable[[str], str | None],
                  params: Callable[[str], int] | None = None) -> tuple[str, str] | None:
    """(catalogue id, why) of a fine-tune named after its base model ("OpenHermes-2.5-Mistral-7B",
    "dolphin-2.9-llama3-8b"): the longest catalogue name with a size in it that the name holds whole — bounded by the
    name's own separators, so "Llama-3.2-11B-Vision" never holds "llama-3.2-1b"; else None. A fine-tune keeps its
    base's shapes; a name holding none (or only a family word, "mistral") is not read, nor one that states a parameter
    count of its own beside the base's name that the base does not have (``params``: "GPT-3 350M" is not GPT-3 175B)."""
    s = ref.strip().lower()
    s = re.sub(r"[\s_:]", "-", m.group(2) if (m := _REPO.fullmatch(s)) else s)
    best, where = "", None
    for key in keys:  # a slash beside it joins two names ("LLaMA 7B/13B"): neither is read
        if len(key) > len(best) and _SIZE.search(key) and "/" not in key and key != s and \
                (hit := re.search(rf"(?<![a-z0-9./]){re.escape(key)}(?![a-z0-9/]|\.\d)", s)):
            best, where = key, hit
    mid = find(best) if best else None
    if mid is None or where is None:
        return None
    if params is not None and _other_size(s[:where.start()] + " " + s[where.end():], params(mid)):
        return None
    return mid, f"it names its base model {best!r}, whose shapes a fine-tune keeps"


_TRAILING_COUNT = re.compile(r"[\s_-]*(\d+(?:\.\d+)?)\s*([mbt])$", re.IGNORECASE)


def sized_name(ref: str, find: Callable[[str], str | None], params: Callable[[str], int]) -> tuple[str, str] | None:
    """(catalogue id, why) of a model named with its parameter count after a name the catalogue knows without one
    ("StarCoder 15.5B", "DBRX 132B"), where the count is the model's within 15 % (a paper's rounding); else None."""
    m = _TRAILING_COUNT.search(ref.strip())
    if m is None or not (name := ref.strip()[:m.start()]) or (mid := find(name)) is None:
        return None
    if abs(float(m.group(1)) * _SCALE[m.group(2).lower()] / params(mid) - 1) > 0.15:
        return None
    return mid, f"the parameter count it states, {m.group(1)}{m.group(2).upper()}, is that of {mid}"
