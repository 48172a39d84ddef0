"""Parse and format numbers with units — the only module that does.

Inside gpuplan everything is SI: bytes, FLOPs, seconds, FLOP/s, bytes/s, USD.
"""

from __future__ import annotations

import math
import re

from gpuplan.errors import GpuplanError, shown

GiB = 2**30  # the only binary-prefix constants: bytes are printed as GiB, labelled GiB
MiB = 2**20

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}
# a sequence length, a batch or a GPU count written with k or M means 1024 or 1024²: "8k context" is 8,192
# positions, Llama 3's "16K H100s" 16,384 GPUs, a "4M-token" batch 4,194,304 tokens; token totals stay decimal
_BINARY_SUFFIX = {**_COUNT_SUFFIX, "k": 2.0**10, "m": 2.0**20}
BINARY_SIZES = ("seq_len", "global_batch", "micro_batch", "gpus", "gpus_per_node", "max_gpus")
_BYTE_SUFFIX = {
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_DURATION_SUFFIX = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400,
                    # the words people write: '14 days', '2 weeks', '36 hours'; a month is 30 days (said in the help)
                    "sec": 1, "secs": 1, "second": 1, "seconds": 1, "mins": 60, "minute": 60, "minutes": 60,
                    "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400,
                    "wk": 7 * 86400, "wks": 7 * 86400, "week": 7 * 86400, "weeks": 7 * 86400,
                    "mo": 30 * 86400, "month": 30 * 86400, "months": 30 * 86400,
                    "yr": 365 * 86400, "yrs": 365 * 86400, "year": 365 * 86400, "years": 365 * 86400}
_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


# a comma only groups thousands: 1,000,000 or 1,500.5 (groups of exactly three digits after each comma)
_GROUPED = re.compile(r"\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?![\d,])")


MAX_NUMBER_TEXT = 64  # characters of a number written out ("1,000,000,000,000 tokens" is 17)


def _split(text: str, what: str) -> tuple[float, str]:
    if len(text) > MAX_NUMBER_TEXT:  # before any regex: every parse is then linear (and short)
        raise GpuplanError(f"cannot read {what} {shown(text, 40)}: {len(text):,} characters is not a number; "
                           "write a number with an optional unit, e.g. 1.4T, 80GiB, 30d")
    if "," in text:
        if not _GROUPED.match(text):  # 2,5 or 1,5T: a decimal comma, not thousands
            raise GpuplanError(f"cannot read {what} {shown(text)}: a comma only groups thousands (1,000,000); "
                               f"write decimals with a point, e.g. {text.strip().replace(',', '.', 1)}")
        text = text.replace(",", "")
    m = re.fullmatch(_NUM + r"\s*([A-Za-z]*)", text.strip().replace("_", ""))
    if not m:
        raise GpuplanError(f"cannot read {what} {shown(text)}: write a number with an optional unit, "
                           "e.g. 1.4T, 80GiB, 30d")
    return _finite(float(m.group(1)), text, what), m.group(2).lower()


def _finite(num: float, value: object, what: str) -> float:
    if not math.isfinite(num):  # 1e400 overflows to inf; YAML has .inf and .nan
        raise GpuplanError(f"{what} must be a finite number, got {shown(value)}")
    return num


def _float(value: int | float, what: str) -> float:
    """A number as a float: an integer too large for one (≥ 1e308) is an error, not an OverflowError."""
    try:
        return _finite(float(value), value, what)
    except OverflowError:
        raise GpuplanError(f"{what} is a number too large to use (about {value.bit_length() * 0.30103:,.0f} "
                           "digits): give a realistic value") from None


def _scaled(num: float, factor: float, value: object, what: str) -> float:
    """``num`` times its suffix's ``factor``, finite: ``1e308k`` overflows to infinity, an error here
    rather than an OverflowError wherever the number is next converted."""
    out = num * factor
    if not math.isfinite(out):
        raise GpuplanError(f"{what} {shown(value)} is too large to use (past 1e308): give a realistic value")
    return out


# the word a count of it may carry ("2048 sequences", "1.4T tokens", "8-way"): dropped where it names the field's own
# quantity; a scale word is its suffix ("300 billion tokens" is 300B)
_UNIT_WORDS = {"tokens": r"tokens?", "seq_len": r"tokens?", "global_batch_tokens": r"tokens?",
               "global_batch": r"sequences?|seqs|samples", "micro_batch": r"sequences?|seqs|samples", "gpus": r"gpus?",
               "steps": r"steps|iterations|iters", "dp": r"way", "tp": r"way", "pp": r"way|stages?", "cp": r"way",
               "ep": r"way"}
_SCALE_WORDS = {"thousand": "k", "million": "M", "billion": "B", "trillion": "T"}
# fields that count sequences, and what to give for a count in tokens
_IN_SEQUENCES = {"global_batch": "a batch in tokens is training.global_batch_tokens (e.g. global_batch_tokens: 4M)",
                 "micro_batch": "give sequences per GPU per micro-step (tokens / seq_len), e.g. 1"}


def _field(what: str) -> str:
    """The field a dotted key or flag names ("training.seq_len", "--max-gpus" → seq_len, max_gpus)."""
    return what.rsplit(".", 1)[-1].lstrip("-").replace("-", "_")


def _unit_words(text: str, what: str) -> str:
    """``text`` without the word naming its field's quantity and with a scale word as its suffix (``what``: the
    dotted key or flag the count is for)."""
    if len(text) > MAX_NUMBER_TEXT:  # no regex over a long text: _split refuses it
        return text
    unit = _UNIT_WORDS.get(_field(what))
    out = re.sub(rf"(?<=[\d\s-])(?:{unit})\s*$", "", text.strip(), flags=re.IGNORECASE).rstrip(" -") if unit else text
    for word, suffix in _SCALE_WORDS.items():
        out = re.sub(rf"\s*\b{word}\b", suffix, out, flags=re.IGNORECASE)
    return out


# a count written in tokens ("4M tokens", "2048 tokens"): never a count of sequences
IN_TOKENS = re.compile(r"\d\s*[kmbt]?\s*-?\s*tokens?\s*$", re.IGNORECASE)


def parse_count(value: object, what: str = "number") -> float:
    """``1.4T`` → 1.4e12, ``7e9``, ``7B`` (billion), ``512k``; numbers pass through; for a field of ``BINARY_SIZES``
    (``what``: its dotted key or flag) k and M are 1024 and 1024²."""
    if isinstance(value, bool):
        raise GpuplanError(f"{what} must be a number, got {shown(value)}")
    if isinstance(value, int | float):
        return _float(value, what)
    if not isinstance(value, str):
        raise GpuplanError(f"{what} must be a number, got {shown(value)}")
    if _field(what) in _IN_SEQUENCES and IN_TOKENS.search(value.strip()):
        raise GpuplanError(f"{what} {shown(value)} counts tokens, but {_field(what)} counts sequences: "
                           + _IN_SEQUENCES[_field(what)])
    num, suffix = _split(_unit_words(value, what), what)
    binary = _field(what) in BINARY_SIZES
    if suffix not in _COUNT_SUFFIX:
        kind = "k = 1024, M = 1024²" if binary else "decimal"
        nodes = "; a node count is hardware.nodes" if suffix in ("nodes", "node") else ""
        raise GpuplanError(f"{what} {shown(value)}: unknown suffix {suffix!r}; use one of k, M, B, T ({kind}){nodes}")
    return _scaled(num, (_BINARY_SUFFIX if binary else _COUNT_SUFFIX)[suffix], value, what)


def _parse_unit(value: object, what: str, table: dict[str, float], like: str, units: str,
                bare: str | None = None) -> float:
    """A number with a unit from ``table``. A bare number is in unit ``bare``; with ``bare`` None it
    is an error (``--deadline 14`` is 14 what?), naming ``like`` as the fix."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise GpuplanError(f"{what} must be a {like}, got {shown(value)}")
    if isinstance(value, str):
        num, suffix = _split(value, what)
    else:
        num, suffix = _float(value, what), ""
    if suffix == "":
        if bare is None:
            raise GpuplanError(f"{what} {shown(value)} has no unit: write a {like} ({units})")
        suffix = bare
    if suffix not in table:
        raise GpuplanError(f"{what} {shown(value)}: unknown unit {suffix!r}; use {units}")
    return _scaled(num, table[suffix], value, what)


def parse_bytes(value: object, what: str = "size", bare: str | None = "b") -> float:
    """``80GiB`` → 85899345920, ``80GB`` → 8e10; a bare number is in unit ``bare`` (bytes; None: an error)."""
    return _parse_unit(value, what, _BYTE_SUFFIX, "size like 80GiB", "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB", bare)


def parse_duration(value: object, what: str = "duration", bare: str | None = None) -> float:
    """``30d`` → 2592000 s; ``12h``, ``90min``, ``2w``, ``45s``. A bare number is in unit ``bare``;
    by default it is an error (``--deadline 14`` would silently be 14 seconds)."""
    return _parse_unit(value, what, _DURATION_SUFFIX, "duration like 14d",
                       "s, min, h, d, w, mo (30 d) or y — or the words: 14 days, 2 weeks", bare)


def parse_money(value: object, what: str = "amount") -> float:
    """``50000``, ``$50k``, ``50k USD``, ``2.5`` → USD (``-$5k`` is -5000: its sign is the caller's to refuse); another
    currency is an error (prices are in US dollars)."""
    if isinstance(value, str):
        value = value.strip()
        if any(c in value for c in "€£¥") or re.search(r"\b(eur|gbp|jpy|cny|rmb|chf|cad|aud|inr)\b", value.lower()):
            raise GpuplanError(f"{what} {shown(value)}: prices here are in US dollars; write the amount in USD, "
                               "e.g. $50k")
        value = re.sub(r"(?i)^usd\s*|\s*usd$", "", value)
        sign = "-" if value.startswith("-") else ""
        value = sign + value.lstrip("-").lstrip("$")
    return parse_count(value, what)


# ---- formatting (only for printing) -------------------------------------------------------
def gib(n_bytes: float) -> float:
    return n_bytes / 2**30


def fmt_gib(n_bytes: float | None, digits: int = 1) -> str:
    return "-" if n_bytes is None else f"{n_bytes / GiB:,.{digits}f}"


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def fmt_count(n: float | None) -> str:
    """Decimal prefixes: 8.03B, 1.4T, 512k; never scientific notation: 999.96M rounds up to 1B
    (not 1e+03M), 2e18 is 2,000P, and a tiny share prints as a decimal."""
    if n is None:
        return "-"
    if n == 0 or not math.isfinite(n):
        return str(n)
    for i, (div, suffix) in enumerate(_PREFIXES):
        if abs(n) >= div or div == 1.0:
            text = f"{n / div:.3g}"
            if "e" not in text:
                return text + suffix
            if abs(n) >= 1e15:  # 1000P and more
                return f"{n / 1e15:,.0f}P"
            if abs(n) >= 1:  # rounded up to 1000 of this prefix: 1 of the next one
                return ("-1" if n < 0 else "1") + _PREFIXES[i - 1][1]
            return f"{n:.6f}".rstrip("0").rstrip(".")
    return str(n)  # not reached


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if not math.isfinite(seconds):
        return "inf"
    for div, suffix in ((365 * 86400, "y"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= div:
            return f"{seconds / div:.1f} {suffix}"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms"


def fmt_usd(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:,.0f}" if usd >= 100 else f"${usd:,.2f}"
