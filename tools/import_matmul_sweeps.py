"""Import the OpenXLA default GEMM performance table into catalog/matmul.json ``sweeps``.

The table (xla/service/gpu/model/matmul_interpolator_data.h, ROCm/xla @ea2c45f) holds, per GPU key
(sm_90, sm_100_B200, gfx942, gfx950), one measured FLOP/s per (b, m, n, k) in {1, 2, 4} x {256 ...
4096}^3 and dtype key. This script keeps b = 1 and the bf16 and e4m3 fp8 keys that
validation/components.json does not exclude, and leaves out every shape that components.json
validates the model with — so ``gpuplan validate --components`` checks the interpolation on shapes
the catalogue does not hold.

    python tools/import_matmul_sweeps.py path/to/matmul_interpolator_data.h
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "src" / "gpuplan" / "catalog" / "matmul.json"
COMPONENTS = ROOT / "src" / "gpuplan" / "validation" / "components.json"
# XLA key -> (catalogue architecture, the gpus.json id the key was measured on, GPU named in words)
KEYS = {"sm_90": ("hopper", "h100-sxm", "NVIDIA H100 SXM (XLA key sm_90)"),
        "sm_100_B200": ("blackwell", "b200", "NVIDIA B200 (XLA key sm_100_B200)"),
        "gfx942": ("cdna3", "mi300x", "AMD Instinct MI300X (XLA key gfx942)"),
        "gfx950": ("cdna4", "mi355x", "AMD Instinct MI355X (XLA key gfx950)")}
DTYPES = {"bf16": "bf16xbf16->bf16", "fp8": "f8e4m3fnxf8e4m3fn->bf16"}
# components.json 'excluded': sm_90 fp8 above the dense fp8 peak, gfx942 fp8 3x its own bf16
EXCLUDED = {("sm_90", "fp8"), ("gfx942", "fp8")}


def parse(text: str) -> dict[str, list[dict]]:
    """Entries per GPU key: {'b','m','n','k','flops': {dtype key: FLOP/s}} (both text layouts)."""
    out: dict[str, list[dict]] = {}
    gpu, cur, pending = None, None, None
    for line in text.splitlines():
        s = line.strip()
        if m := re.match(r'key: "((?:sm|gfx)\w*)"', s):
            gpu = m.group(1)
            out[gpu] = []
        elif m := re.match(r"([bmnk]): (\d+)$", s):
            if m.group(1) == "b":
                cur = {"b": int(m.group(2)), "flops": {}}
                out[gpu].append(cur)
            else:
                cur[m.group(1)] = int(m.group(2))
        elif m := re.match(r'flops \{ key: "([^"]+)" value: (\d+) \}', s):
            cur["flops"][m.group(1)] = int(m.group(2))
        elif cur is not None and (m := re.match(r'key: "([^"]+)"', s)):
            pending = m.group(1)
        elif cur is not None and pending and (m := re.match(r"value: (\d+)$", s)):
            cur["flops"][pending] = int(m.group(1))
            pending = None
    return out


def validated_shapes() -> set[tuple[str, str, int, int, int]]:
    doc = json.loads(COMPONENTS.read_text())
    return {(p["gpu"], p["inputs"]["dtype"], p["inputs"]["m"], p["inputs"]["n"], p["inputs"]["k"])
            for p in doc["points"] if p["source"] == "xla_gemm_table"}


def sweeps(table: dict[str, list[dict]]) -> list[dict]:
    held = validated_shapes()
    out = []
    for key, (arch, gpu_id, gpu) in KEYS.items():
        for dtype, dkey in DTYPES.items():
            if (key, dtype) in EXCLUDED:
                continue
            pts = [[e["m"], e["n"], e["k"], round(e["flops"][dkey] / 1e12, 2)] for e in table[key]
                   if e["b"] == 1 and dkey in e["flops"] and (gpu_id, dtype, e["m"], e["n"], e["k"]) not in held]
            out.append({"architecture": arch, "precision": dtype, "gpu": gpu, "gpu_id": gpu_id,
                        "source": "xla_gemm_table", "dtype_key": dkey,
                        "held_out": "the shapes validation/components.json checks the model on (b = 1, m in "
                                    "{256, 2048}, n and k in {256, 1024, 4096}, and the cubes 512-4096)",
                        "m_n_k_tflops": sorted(pts)})
    return out


def dump(doc: dict) -> str:
    """matmul.json's layout, with each [m, n, k, tflops] row on one line."""
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    return re.sub(r"\[\s+(\d+),\s+(\d+),\s+(\d+),\s+([\d.]+)\s+\]", r"[\1, \2, \3, \4]", text) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("header", type=Path)
    args = p.parse_args(argv)
    doc = json.loads(MATMUL.read_text())
    doc["sweeps"] = sweeps(parse(args.header.read_text()))
    MATMUL.write_text(dump(doc))
    print(f"{sum(len(s['m_n_k_tflops']) for s in doc['sweeps'])} points in {len(doc['sweeps'])} sweeps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
