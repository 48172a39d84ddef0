"""Megatron-LM sources: Narayanan et al. 2021 (Tables 1 and 2), the 2022 README MFU table, BLOOM."""

from __future__ import annotations

from corpus.common import catalogue_config, entry, gpt, hardware, pct, published, reported, skipped

MEGATRON_2021_TRAINING = {"precision": "fp16", "framework": "megatron-lm", "attention": "eager", "dropout": 0.1}
NOTE_FP16 = ("Precision 'mixed precision (16-bit)' read as fp16 (as runs.json did; fp16 and bf16 share the "
             "312 TFLOP/s A100 peak).")
NOTE_EAGER = ("attention eager, dropout 0.1: pre-FlashAttention Megatron-LM (fused softmax over materialised "
              "scores); 0.1 is Megatron-LM's default --hidden-dropout/--attention-dropout, as runs.json cites.")
NOTE_PTDP = ("zero 0, sequence_parallel false: PTD-P of 2021 had no optimizer sharding (the paper sets it against "
             "ZeRO-3) and sequence parallelism arrived in 2022 (Korthikanti et al.). dp_overlap is left to the "
             "megatron-lm framework default (runs.json recorded false for this era).")
IB_HDR = "ib-hdr-200g"  # '8x 200 Gb/s HDR InfiniBand HCAs per node' (Selene)


def _megatron_scenario(row: dict, layout: dict) -> dict:
    m, p = row["model"], row["parallelism"]
    hw, _ = hardware(row, scale_out=IB_HDR)
    training = {"seq_len": m["seq_len"], "global_batch": p["global_batch"], **MEGATRON_2021_TRAINING}
    return {"model": gpt(m, m["vocab"]), "hardware": hw, "training": training, "layout": layout}


def megatron2021_table1(row: dict) -> list[dict]:
    """Table 1 (weak scaling): t, p, n, batch stated; micro-batch and interleaving degree not given;
    eq. 3 counts the recompute forward → hardware TFLOP/s and 'full' recompute as the row states."""
    p = row["parallelism"]
    layout = {"tp": p["tp"], "pp": p["pp"], "dp": p["dp"], "zero": 0, "recompute": "full",
              "sequence_parallel": False}
    open_ = ["micro_batch"]
    if p["pp"] > 1:  # 'interleaved 1F1B with scatter/gather' for every row; chunks per stage not given
        layout["pp_schedule"] = "interleaved"
        open_.append("virtual_stages")
    pub = published("hardware_tflops_per_gpu", reported(row, "achieved_tflops_per_gpu"),
                    hfu=pct(reported(row, "pct_of_peak")))
    notes = ["Published TFLOP/s follow eq. 3 (counts the recomputed forward): hardware FLOPs; the % of 312 "
             "TFLOP/s is kept as hfu.", f"Aggregate {reported(row, 'aggregate_pflops')} PFLOP/s.",
             "dp = n/(t·p) as the paper defines it.", NOTE_FP16, NOTE_EAGER, NOTE_PTDP]
    return [entry(row, "megatron2021", "throughput", _megatron_scenario(row, layout), pub, open_, notes)]


def megatron2021_table2(row: dict) -> list[dict]:
    """Table 2 (PTD-P vs ZeRO-3 at fixed batch). PTD-P gives only the model-parallel size: dp = n/MP
    is fixed, so the planner's t×p split keeps t·p = MP; the corpus's t=8 split is an assumption."""
    p = row["parallelism"]
    notes = ["Published TFLOP/s read in the paper's eq. 3 convention (hardware FLOPs, counting a recomputed "
             "forward), as in Table 1; the table does not restate it, nor the recompute setting."]
    if p.get("zero_stage") == 3:
        layout = {"tp": 1, "pp": 1, "dp": p["dp"], "zero": 3, "micro_batch": p["micro_batch"]}
        open_ = ["recompute"]
        scenario = _megatron_scenario(row, layout)
        scenario["training"]["framework"] = "deepspeed"
        notes += ["DeepSpeed ZeRO-3 inside the Megatron codebase, no model parallelism: framework deepspeed.",
                  "zero3_gather left to the deepspeed default (runs.json recorded DeepSpeed-2021 'tensor-sync')."]
    else:
        layout = {"dp": p["dp"], "cp": 1, "zero": 0, "micro_batch": p["micro_batch"], "sequence_parallel": False}
        open_ = ["tp", "pp", "pp_schedule", "virtual_stages", "recompute"]
        scenario = _megatron_scenario(row, layout)
        notes += [f"Model-parallel size {p['model_parallel_size']} stated, its t×p split not: dp = n/MP = "
                  f"{p['dp']} is fixed so a searched split keeps t·p = {p['model_parallel_size']} (the corpus "
                  f"assumed t={p['tp']}, p={p['pp']} from Table 1). cp 1: no context parallelism in 2021.",
                  "Pipeline schedule not restated for Table 2."]
    notes += [f"Authors' estimate of {reported(row, 'training_time_300b_tokens')} days for 300B tokens "
              "(not measured).", NOTE_FP16, NOTE_EAGER]
    if p.get("zero_stage") != 3:
        notes.append(NOTE_PTDP)
    if row["notes"].startswith("530B ZeRO-3 row at 640"):
        notes.append("Global batch 2560 as printed (did not fit on 560 GPUs with micro-batch 4).")
    pub = published("hardware_tflops_per_gpu", reported(row, "achieved_tflops_per_gpu"))
    return [entry(row, "megatron2021", "throughput", scenario, pub, open_, notes)]


def megatron_readme_2022(row: dict) -> list[dict]:
    """The README's MFU/HFU table: only params, seq and vocab; no shape, no GPU count or t/p split."""
    return [skipped(row, "megatron-readme-2022",
                    "model shape not given in the README (params only: layers/hidden/heads unknown) and the GPU "
                    "count and tensor/pipeline split are not stated; the MFU cannot be tied to a scenario")]


def bloom(row: dict) -> list[dict]:
    """BLOOM-176B on Jean Zay (Megatron-DeepSpeed): the iteration-85376 log line, every degree stated."""
    m, p = row["model"], row["parallelism"]
    cfg = catalogue_config("bloom-176b")
    assert (cfg["n_layer"], cfg["hidden_size"], cfg["n_head"]) == (m["layers"], m["hidden"], m["heads"]), row["id"]
    hw, _ = hardware(row, scale_out="opa-100g")
    training = {"seq_len": m["seq_len"], "global_batch": p["global_batch"], "precision": "bf16",
                "framework": "megatron-lm", "attention": "eager", "dropout": 0.0}
    layout = {"tp": p["tp"], "pp": p["pp"], "dp": p["dp"], "zero": 1, "micro_batch": p["micro_batch"],
              "recompute": "full", "sequence_parallel": False, "pp_schedule": "1f1b"}
    seqs_per_s = reported(row, "samples_per_second")
    tps = round(seqs_per_s * m["seq_len"] / hw["gpus"], 3)
    pub = published("tokens_per_s_per_gpu", tps, step_s=reported(row, "iteration_time"),
                    hardware_tflops_per_gpu=reported(row, "tflops_per_gpu"))
    notes = [f"tokens/s per GPU = {seqs_per_s} sequences/s × {m['seq_len']} / {hw['gpus']} GPUs (the log "
             "line's samples/s); its TFLOP/s use the '4*2' coefficient (recompute counted): hardware FLOPs.",
             "Megatron-DeepSpeed: framework megatron-lm; ZeRO-1 via DeepSpeed's BF16_Optimizer; "
             "activation checkpointing = full layer recompute; DeepSpeed's pipeline engine runs plain 1F1B.",
             "attention eager: fused softmax over materialised scores (pre-FlashAttention, 2022); dropout 0.0 as "
             "the released config.json states; no sequence parallelism in Megatron-DeepSpeed of 2022.",
             "Omni-Path, 4 links per node: opa-100g. Model: catalogue bloom-176b (vocab padded to 250880, as "
             "the README's size calculation uses)."]
    return [entry(row, "bloom", "throughput", {"model": "bloom-176b", "hardware": hw, "training": training,
                                               "layout": layout}, pub, [], notes)]
