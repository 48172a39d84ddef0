"""Whole-run totals and memory tables from papers: LLaMA and Llama 2 GPU-hours, ZeRO (2020) Tables 1-2."""

from __future__ import annotations

import math

from corpus.common import entry, hardware, llama, published, reported, skipped, whole

SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def count(text: str) -> float:
    """'1.4T' → 1.4e12 (decimal suffixes, as the papers write token counts)."""
    return float(text[:-1]) * SUFFIX[text[-1]]


def _gpu_hours_open(hw: dict) -> list[str]:
    return ([] if "gpus" in hw else ["gpus"]) + ["tp", "pp", "dp", "micro_batch", "zero", "recompute", "precision"]


def llama1(row: dict) -> list[dict]:
    """LLaMA (Touvron et al. 2023): Table 2 shapes, Table 15 GPU-hours; A100-80GB, 4M-token batches."""
    m = row["model"]
    ffn = 256 * math.ceil(8 * m["hidden"] / 3 / 256)
    model = llama(m, ffn)
    hw, hw_note = hardware(row)
    assert m["global_batch_tokens"] == "4M", row["id"]  # 4M tokens = 2^22 = 2048 sequences of 2048
    training = {"seq_len": m["seq_len"], "global_batch": 2**22 // m["seq_len"],
                "tokens": whole(count(m["tokens"])), "framework": "generic"}
    layout = {"sequence_parallel": True}
    notes = [hw_note, f"intermediate_size {ffn} = 2/3·4d (paper Sec. 2.2) rounded up to a multiple of 256 as in "
             f"the released model code; it reproduces the stated {m['params_b']}B.",
             "Batch '4M' tokens read as 2^22 = 2048 sequences of 2048.",
             "Model and sequence parallelism (Korthikanti et al.): sequence_parallel true; degrees not stated. "
             "Their checkpointing (keep linear-layer outputs, recompute the rest, hand-written backward) matches "
             "none of gpuplan's recompute modes: recompute open. xformers causal attention (memory-efficient, no "
             "materialised scores): attention left at flash. Precision not stated.",
             "GPU-hours are the whole run's, as published."]
    tps = reported(row, "tokens_per_sec_per_gpu")
    if tps is not None:
        notes.append(f"Also ~{tps} tokens/s/GPU on {hw['gpus']} GPUs over ~21 days (paper text).")
    pub = published("gpu_hours", reported(row, "total_gpu_hours"), tokens_per_s_per_gpu=tps)
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return [entry(row, "llama1", "gpu_hours", scenario, pub, _gpu_hours_open(hw), notes)]


def llama2(row: dict) -> list[dict]:
    """Llama 2 paper, Table 2 (GPU-hours): the 34B row, the one Llama 2 size without a model card."""
    m = row["model"]
    hw, hw_note = hardware(row)
    training = {"seq_len": m["seq_len"], "tokens": whole(count(m["tokens"])), "framework": "generic"}
    open_ = _gpu_hours_open(hw) + ["global_batch", "sequence_parallel"]
    notes = [hw_note, f"Shape as the corpus records it, from {m['config_source']}.",
             "Only GPU type, tokens and GPU-hours stated: batch, degrees and precision open."]
    pub = published("gpu_hours", reported(row, "total_gpu_hours"))
    scenario = {"model": llama(m), "hardware": hw, "training": training, "layout": {}}
    return [entry(row, "llama2", "gpu_hours", scenario, pub, open_, notes)]


ZERO_STAGES = (("P_os", 1, "model_state_memory_P_os"), ("P_os+g", 2, "model_state_memory_P_os_g"),
               ("P_os+g+p", 3, "model_state_memory_P_os_g_p"))


def zero_table1(row: dict) -> list[dict]:
    """ZeRO Table 1: per-device model-state memory (16Ψ mixed-precision Adam) by stage and DP degree,
    one entry per cell. 'GB' is 1e9 bytes: 7.5B × 16 B = 120 GB at DP 1."""
    params = row["model"]["params_b"] * 1e9
    assert reported(row, "model_state_memory_P_os")[1] == round(params * 16 / 1e9, 6), row["id"]
    out = []
    for label, stage, name in ZERO_STAGES:
        for dp, gb in reported(row, name).items():
            scenario = {"model": {"params": round(params)},
                        "hardware": {"gpu": "v100-32gb", "gpus": dp},
                        "training": {"precision": "fp16", "optimizer": "adam", "framework": "deepspeed"},
                        "layout": {"zero": stage, "dp": dp}}
            notes = [f"{label} at DP {dp}: {gb} GB (1e9 B) as printed (rounded); analytical, model states only "
                     "(fp16 weights and gradients 2+2 B, fp32 master/momentum/variance 12 B per parameter).",
                     "V100 32GB is the paper's reference device (bold cells fit it); Adam as the paper states."]
            out.append(entry(row, "zero2020", "memory", scenario, published("model_state_bytes", round(gb * 1e9)),
                             [], notes, suffix=f"#{label}-dp{dp}"))
    return out


def zero_table2(row: dict) -> list[dict]:
    return [skipped(row, "zero2020", "largest trainable model size per model-parallel degree (theoretical and "
                                     "measured parameter counts), not a per-GPU memory figure for one scenario")]
