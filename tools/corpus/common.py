"""What every source family shares: the output entry, units, GPU and model mappings.

Pure data transforms: nothing here imports gpuplan, so corpus.json depends only on the YAML and
the catalogue files it names (a model is a catalogue id only when its config has the row's shape).
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "src" / "gpuplan" / "catalog" / "models"

# The corpus's GPU names → (catalogue id, hardware.power_limit_w or None, note). Exact strings, so a
# new name in the YAML is an error here instead of a silent guess.
# a variant the catalogue does not list, as its source states it: the catalogue part with the stated figures
GRAND_TETON_H100 = {"base": "h100-sxm", "id": "h100-96gb-hbm2e", "name": "H100 96GB HBM2e (Grand Teton)",
                    "memory_gib": 96, "memory_bw_tb_per_s": 2.4}
GPUS: dict[str, tuple[str | dict, float | None, str]] = {
    "A100-SXM4-80GB": ("a100-80gb-sxm", None, ""),
    "A100-SXM4-80GB (Selene)": ("a100-80gb-sxm", None, ""),
    "A100-80GB": ("a100-80gb-sxm", None, "GPU form factor not stated: A100-80GB read as the SXM part."),
    "A100-80GB (400W)": ("a100-80gb-sxm", None, "A100-80GB at 400 W is the SXM part (its TDP)."),
    "A100-40GB": ("a100-40gb-sxm", None, "GPU form factor not stated: A100-40GB read as the SXM part."),
    "H100-SXM5-80GB (DGX H100)": ("h100-sxm", None, ""),
    "H100-80GB HBM3, 700 W TDP (Grand Teton)": ("h100-sxm", None, "700 W is the h100-sxm TDP (no cap)."),
    "H100 (Meta Grand Teton variant: 96 GB HBM2e, 2.4 TB/s, run at 500 W power limit)": (
        GRAND_TETON_H100, 500, "Grand Teton H100: 96 GB HBM2e at 2.4 TB/s as stated (an inline variant of "
        "h100-sxm), capped at the stated 500 W."),
    "H100 (HBM2e, lower-TDP SXM variant, 94-95 GB)": (
        "h100-sxm", None, "H100 HBM2e lower-TDP SXM variant (94-95 GB): the TDP is not stated, so no power cap "
        "is set; the catalogue h100-sxm is 80 GB HBM3 at 700 W."),
    "H200 (SXM, 141 GB)": ("h200", None, ""),
    "V100-32GB (DGX-2)": ("v100-32gb", None, ""),
}


def source_text(row: dict) -> str:
    s = row["source"]
    return f"{s['title']}, {s['location']}, {s['year']}, {s['url']}"


def entry(row: dict, key: str, category: str, scenario: dict, published: dict, open_: list[str],
          notes: list[str], suffix: str = "") -> dict:
    """One scoreable corpus.json entry, keys in a fixed order."""
    return {"id": row["id"] + suffix, "category": category, "source": source_text(row), "source_key": key,
            "scenario": scenario, "open": list(open_), "published": published,
            "notes": " ".join(n for n in notes if n)}


def skipped(row: dict, key: str, reason: str) -> dict:
    """A row gpuplan cannot express: kept, with the reason, so the count of unexpressed rows shows."""
    return {"id": row["id"], "category": row["category"], "source": source_text(row), "source_key": key,
            "skip": reason}


def published(metric: str, value: float, **also: float | None) -> dict:
    return {"metric": metric, "value": value, "also": {k: v for k, v in also.items() if v is not None}}


def reported(row: dict, name: str) -> Any:
    item = row["reported"].get(name)
    return None if item is None else item["value"]


def pct(value: float | None) -> float | None:
    """A published percentage as a fraction."""
    return None if value is None else round(value / 100, 6)


def gib(value: float) -> int:
    """GiB (2^30 bytes) → bytes."""
    return round(value * 2**30)


def whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def hardware(row: dict, scale_out: str | None = None, gpus: bool = True) -> tuple[dict, str]:
    """hardware section from the row: GPU id, stated count and node size, the given fabric; and a note."""
    hw = row["hardware"]
    gpu_id, power, note = GPUS[hw["gpu"]]
    out: dict[str, Any] = {"gpu": gpu_id}
    if gpus and isinstance(hw.get("count"), int):
        out["gpus"] = hw["count"]
    if hw.get("gpus_per_node"):
        out["gpus_per_node"] = hw["gpus_per_node"]
    if scale_out:
        out["scale_out"] = scale_out
    if power:
        out["power_limit_w"] = power
    return out, note


def drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


# ---- models --------------------------------------------------------------------------------------
@cache
def catalogue_config(model_id: str) -> dict:
    return json.loads((MODELS_DIR / f"{model_id}.json").read_text())


def model_ref(inline: dict, catalogue_id: str | None) -> dict | str:
    """The catalogue id when its config has every shape key of ``inline`` (position limits aside:
    RoPE/ALiBi models have no position weights), else the inline mapping."""
    if catalogue_id is None:
        return inline
    cfg = catalogue_config(catalogue_id)
    keys = [k for k in inline if k not in ("max_position_embeddings", "tie_word_embeddings")]
    same = cfg.get("model_type") == inline["model_type"] and all(cfg.get(k) == inline[k] for k in keys)
    return catalogue_id if same else inline


def llama(m: dict, ffn: int | None = None) -> dict:
    """Llama-style mapping (RMSNorm, RoPE, SwiGLU, untied) from the row's stated shape."""
    return {"model_type": "llama", "hidden_size": m["hidden"], "num_hidden_layers": m["layers"],
            "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"],
            "intermediate_size": ffn if ffn is not None else m["ffn"], "vocab_size": m["vocab"],
            "max_position_embeddings": m["seq_len"], "tie_word_embeddings": False}


def gpt(m: dict, vocab: int) -> dict:
    """GPT-2/Megatron GPT mapping: LayerNorm, GeLU MLP of ``ffn``, learned positions, tied embeddings."""
    return {"model_type": "gpt2", "n_layer": m["layers"], "n_embd": m["hidden"], "n_head": m["heads"],
            "n_inner": m["ffn"], "vocab_size": vocab, "n_positions": m["seq_len"]}


def megatron_padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron-LM/NeMo pad the vocabulary to a multiple of make_vocab_size_divisible_by (default 128) × tp."""
    step = divisible_by * tp
    return math.ceil(vocab / step) * step


# The corpus's model names whose shape may be a catalogue model (model_ref checks the shape).
CATALOGUE_IDS = {
    "Llama-3/3.1-8B": "llama-3.1-8b", "Llama-3/3.1-70B": "llama-3.1-70b", "Llama-3.1-405B": "llama-3.1-405b",
    "Llama-2-7B": "llama-2-7b", "Llama-2-13B": "llama-2-13b", "Llama-2-70B": "llama-2-70b",
}
CATALOGUE_NOTE = {
    "llama-3.1-8b": "Llama 3 and 3.1 8B share the shape: catalogue llama-3.1-8b.",
    "llama-3.1-70b": "Llama 3 and 3.1 70B share the shape: catalogue llama-3.1-70b.",
}


def llama_model(m: dict) -> tuple[dict | str, str]:
    """A Llama-family row's model: the catalogue id when the shape matches, else the inline mapping."""
    ref = model_ref(llama(m), CATALOGUE_IDS.get(m["name"]))
    return ref, CATALOGUE_NOTE.get(ref, "") if isinstance(ref, str) else ""
