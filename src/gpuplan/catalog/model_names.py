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
