"""Import the open corpus of published training runs into gpuplan's validation data.

    python tools/import_corpus.py [path/to/published_runs.yaml] [--out PATH]

Reads ``published_runs.yaml`` (default ``../shared/validation/published_runs.yaml`` from the repository
root) and writes ``src/gpuplan/validation/corpus.json``: one entry per scoreable row (throughput,
gpu_hours, memory; ``spec`` rows are catalogue facts and are not imported), in the YAML's order.
Deterministic: the same YAML gives the same bytes.

The rule (from the issue that introduced the corpus): a row states what its source states; what the
source leaves open is listed in ``open`` (searched by the planner) or left at the framework's documented
default, never chosen to fit the published figure. Each source family has one conversion function
(tools/corpus/*.py) whose docstring and notes say what it derives and why. A row gpuplan cannot express
is kept with ``skip`` and the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import megatron, papers, torchtitan, vendors  # noqa: E402
from corpus.common import REPO  # noqa: E402

DEFAULT_YAML = REPO.parent / "shared" / "validation" / "published_runs.yaml"
DEFAULT_OUT = REPO / "src" / "gpuplan" / "validation" / "corpus.json"
CATEGORIES = ("throughput", "gpu_hours", "memory")

Converter = Callable[[dict], list[dict]]
# (words in source.title, words in source.location or None, converter): the first match converts the row.
SOURCES: list[tuple[str, str | None, Converter]] = [
    ("Efficient Large-Scale Language Model Training on GPU Clusters", "Table 1", megatron.megatron2021_table1),
    ("Efficient Large-Scale Language Model Training on GPU Clusters", "Table 2", megatron.megatron2021_table2),
    ("NVIDIA Megatron-LM README", None, megatron.megatron_readme_2022),
    ("BigScience tr11 BLOOM-176B", None, megatron.bloom),
    ("llama3_h100_202412_torchtitan.md", None, torchtitan.torchtitan_2412),
    ("asyncTP_llama3_h100_2025-06_torchtitan.md", None, torchtitan.torchtitan_asynctp),
    ("llama3-8b_h200_202506_trainy-whitefiber.md", None, torchtitan.torchtitan_h200),
    ("torchtitan docs/performance.md", None, torchtitan.torchtitan_perf_md),
    ("MosaicML llm-foundry 'MPT Training Benchmarks'", None, vendors.llmfoundry),
    ("NVIDIA NeMo performance summary (NeMo 24.07", None, vendors.nemo),
    ("The Llama 3 Herd of Models", None, vendors.llama3),
    ("TinyLlama README", None, vendors.tinyllama),
    ("LLaMA: Open and Efficient Foundation Language Models", None, papers.llama1),
    ("Llama 2: Open Foundation and Fine-Tuned Chat Models", None, papers.llama2),
    ("ZeRO: Memory Optimizations Toward Training Trillion", "Table 1", papers.zero_table1),
    ("ZeRO: Memory Optimizations Toward Training Trillion", "Table 2", papers.zero_table2),
]

COMMENT = (
    "gpuplan's open validation corpus, made by tools/import_corpus.py from the cited corpus "
    "published_runs.yaml (one conversion function per source family; do not edit by hand, re-run the import). "
    "Rule: a row states what its source states; what the source leaves open is listed in 'open' (searched by "
    "the planner at the row's GPU count, or GPU count too where 'gpus' is open) or left at the framework's "
    "documented default; nothing is chosen to fit the published figure. 'notes' say what was derived or assumed. "
    "Rows gpuplan cannot express carry 'skip' with the reason. source_key names the source document (for "
    "leave-one-source-out cross-validation). scenario is a gpuplan scenario (parse_scenario); layout holds only "
    "stated fields (plus settings the framework or era fixes, each noted). published.metric is one of "
    "tokens_per_s_per_gpu, mfu, hfu (fractions), model_tflops_per_gpu, hardware_tflops_per_gpu (TFLOP/s per GPU "
    "as the name says: model FLOPs exclude, hardware FLOPs include recomputation), step_s (seconds per optimizer "
    "step), gpu_hours, peak_memory_bytes, model_state_bytes (bytes); published.also holds the other reported "
    "figures in the same names. Memory entries of a throughput row carry the suffix '#memory'; ZeRO Table 1 has "
    "one entry per (model, stage, DP degree) cell."
)


def converter(row: dict) -> Converter:
    title, location = row["source"]["title"], row["source"]["location"]
    for words, where, fn in SOURCES:
        if words in title and (where is None or location.startswith(where)):
            return fn
    raise SystemExit(f"row {row['id']}: no conversion rule for source {title!r} ({location!r})")


def convert(rows: list[dict]) -> list[dict]:
    out: list[dict] = []
    for row in rows:
        if row["category"] in CATEGORIES:
            out.extend(converter(row)(row))
    ids = [e["id"] for e in out]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise SystemExit(f"duplicate corpus ids: {', '.join(duplicates)}")
    return out


def render(rows: list[dict]) -> str:
    return json.dumps({"_comment": COMMENT, "rows": convert(rows)}, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("yaml", nargs="?", default=str(DEFAULT_YAML), help="published_runs.yaml")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="corpus.json to write")
    args = parser.parse_args(argv)
    data = yaml.safe_load(Path(args.yaml).read_text(encoding="utf-8"))
    text = render(data["rows"])
    Path(args.out).write_text(text, encoding="utf-8")
    entries = json.loads(text)["rows"]
    skipped = sum(1 for e in entries if e.get("skip"))
    print(f"wrote {args.out}: {len(entries)} entries ({skipped} skipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
