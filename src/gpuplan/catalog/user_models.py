"""Models of the user catalogue (catalog/user.py): built like any config.json or ``{params: N}``, once per
file, every error naming the file and the entry; names must not shadow the built-in catalogue's."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpuplan.catalog.user import active, load_user
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec


def _key(s: str) -> str:
    return s.strip().lower()


@cache
def _built(path: str) -> dict[str, tuple[dict, ModelSpec]]:
    """id and aliases (lower-case) → (row, spec) for the models of the catalogue file at ``path``."""
    from gpuplan.catalog.models import _find, _from_mapping

    out: dict[str, tuple[dict, ModelSpec]] = {}
    for i, (mid, row, config) in enumerate(load_user(path).models):
        where = f"{path}: models[{i}] ({mid})"
        for n in (mid, *row["aliases"]):
            if _find(_key(n)) is not None or _key(n) in out:
                raise GpuplanError(f"{where}: the model name {n!r} is already taken (built-in or earlier entry): "
                                   "choose another id")
        try:
            spec = _from_mapping({**config, "name": row["name"]})
        except GpuplanError as e:
            raise GpuplanError(f"{where}: {e}") from None
        for n in (mid, *row["aliases"]):
            out[_key(n)] = ({"id": mid, **row}, spec)
    return out


def _table() -> dict[str, tuple[dict, ModelSpec]]:
    cat = active()
    return _built(cat.path) if cat else {}


def user_model(ref: str) -> ModelSpec | None:
    """The user catalogue's model named ``ref`` (id or alias, case-insensitive), or None."""
    hit = _table().get(_key(ref))
    return hit[1] if hit else None


def user_model_rows() -> list[dict[str, Any]]:
    """Rows for `gpuplan models`, as the built-in ones."""
    cat = active()
    seen: dict[str, dict[str, Any]] = {}
    for row, s in _table().values():
        seen.setdefault(row["id"], {"id": row["id"], "name": row["name"], "model_type": s.model_type,
                                    "params": s.params, "params_active": s.params_active, "published_params": None,
                                    "hf_repo": None, "source": cat.path if cat else None,
                                    "aliases": list(row.get("aliases", ()))})
    return list(seen.values())


def check_active() -> None:
    """Read and check the whole user catalogue in use (GPUs, fabrics and models), so a bad entry is
    reported when the catalogue is chosen, not when that entry is first asked for."""
    _table()


def catalogue_id(ref: str) -> str:
    """The catalogue id that ``ref`` names (id, name, Hugging Face repo or alias), looked up in the
    catalogue only — never on disk; else the unknown-model error ``load_model`` gives."""
    from gpuplan.catalog.models import _find, _unknown

    s = ref.strip()
    mid = _find(s)
    if mid is None:
        if user_model(s) is not None:  # the user catalogue's (--catalog / $GPUPLAN_CATALOG)
            return s
        raise _unknown(s)
    return mid
