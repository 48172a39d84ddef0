"""Reading safetensors checkpoints' own files, through the boundary (gpuplan.bounds): a header
(never the weights) and an index's shard names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuplan.bounds import load_json, open_regular
from gpuplan.errors import GpuplanError, described

MAX_HEADER_BYTES = 100 << 20  # a safetensors header (the format's own limit)
MAX_DIMS, MAX_DIM = 8, 2**40  # a tensor's rank and one dimension: far above any weight's


def header(path: Path) -> dict[str, Any]:
    with open_regular(path, "safetensors file") as f:
        try:
            raw = f.read(8)
            n = int.from_bytes(raw, "little") if len(raw) == 8 else -1
            if n <= 0 or n > min(MAX_HEADER_BYTES, os.fstat(f.fileno()).st_size - 8):
                raise GpuplanError(f"{path} is not a safetensors file (bad header length): "
                                   f"remove or replace it")
            data = f.read(n)
        except OSError as e:
            raise GpuplanError(f"cannot read {path} ({e.strerror or 'error'}): check the file") from None
    try:
        hdr = load_json(data, f"safetensors header of {path}", max_depth=8, quote=False)
    except GpuplanError as err:
        raise GpuplanError(f"{err}: {path} has a malformed safetensors header: remove or replace it") from None
    if not isinstance(hdr, dict):
        raise GpuplanError(f"{path} has a malformed safetensors header: remove or replace it")
    return hdr


def shard_names(wmap: Mapping[str, Any], index_path: Path) -> list[str]:
    """The shard files an index names: plain file names in its folder, nothing else."""
    names = list(wmap.values())
    for name in names:
        if not isinstance(name, str) or not name.endswith(".safetensors") or "/" in name or "\\" in name \
                or name.startswith("."):
            raise GpuplanError(f"{index_path}: weight_map values must be file names such as "
                               f"model-00001-of-00002.safetensors in the same folder, got {described(name)}: "
                               "fix or remove the index")
    return names
