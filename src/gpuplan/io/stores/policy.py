"""Where gpuplan keeps its local files, and the words a scenario uses to name them: one policy.

The cache folder is ``$GPUPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpuplan``, else
``~/.cache/gpuplan``. In it live the run store (``runs.sqlite3``; ``$GPUPLAN_STORE`` names another
file) and the trace calibration (``calibration.json``).

A scenario key that names one of these files (``hardware.calibration``,
``training.trace_calibration``) takes the same words, in any case and with blanks around them:
null, false, '', 'false', 'no', 'off', 'none' mean "no calibration"; true, 'default', 'true',
'yes', 'on' mean "the default file"; any other text (or a path object) is the path of a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError

CACHE_ENV = "GPUPLAN_CACHE_DIR"
STORE_ENV = "GPUPLAN_STORE"
XDG_ENV = "XDG_CACHE_HOME"
STORE_FILE = "runs.sqlite3"
TRACE_CALIBRATION_FILE = "calibration.json"

OFF_WORDS = frozenset({"", "false", "no", "off", "none"})
DEFAULT_WORDS = frozenset({"default", "true", "yes", "on"})
DEFAULT = "default"  # what choose() returns for every word of DEFAULT_WORDS (and for true)


def cache_dir() -> Path:
    """``$GPUPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpuplan``, else ``~/.cache/gpuplan``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get(XDG_ENV) or os.path.expanduser(os.path.join("~", ".cache"))
    return Path(base) / "gpuplan"


def cache_origin() -> str:
    """How the cache folder came about, for messages: the variable to change (or '')."""
    for env in (CACHE_ENV, XDG_ENV):
        if os.environ.get(env):
            return f" (from {env})"
    return ""


def store_path() -> Path:
    """The default run store: ``$GPUPLAN_STORE``, else ``<cache folder>/runs.sqlite3``."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    return cache_dir() / STORE_FILE


def store_origin() -> str:
    """How the default run store's path came about, for messages."""
    return f" (from {STORE_ENV})" if os.environ.get(STORE_ENV) else cache_origin()


def trace_calibration_path() -> Path:
    """The default trace calibration file: ``<cache folder>/calibration.json``."""
    return cache_dir() / TRACE_CALIBRATION_FILE


def is_default_word(ref: str) -> bool:
    return ref.strip().lower() in DEFAULT_WORDS


def describe(value: Any) -> str:
    """``value`` for an error message: ``a list ['a']``, ``true``, ``5``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple | dict):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        return f"{kind} {value!r}"
    return repr(value)


def choose(value: Any, key: str, wants: str) -> str | None:
    """What a scenario key naming a local file asks for: None (no calibration), ``DEFAULT`` (the
    default file) or the path given, blanks around it dropped. Anything that is neither a word nor
    text is one GpuplanError line: ``{key} must be {wants}, got …``."""
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise GpuplanError(f"{key} must be {wants}, got {describe(value)}")
    word = value.strip().lower()
    if word in OFF_WORDS:
        return None
    if word in DEFAULT_WORDS:
        return DEFAULT
    return value.strip()
