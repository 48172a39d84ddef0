"""Vendor and lab throughput tables: MosaicML llm-foundry, NVIDIA NeMo 24.07, Meta's Llama 3 paper,
TinyLlama."""

from __future__ import annotations

from corpus.common import entry, gpt, hardware, llama_model, megatron_padded_vocab, pct, published, reported

NOTE_ROCE = ("'1600 Gbps node-node (RoCE)' with 8 GPUs per node = 200 Gb/s per GPU: roce-200g (NIC count "
             "not stated).")


NOTE_TRITON = ("attn_impl triton: the tables were run by scripts/train/benchmarking/sweep.sh through "
               "submit_benchmarks.py, whose --attn_impl defaults to 'triton' and which writes it into every run's "
               "model config, from the first tables (300cc5c5, 2023-05) to the A100 RoCE ones (b2a43a14, 2023-10-19, "
               "whose pretrain yamls said triton too; the row's 'attn: flash' is the yaml of 2024): llm-foundry's "
               "triton_flash_attn_fn, FlashAttention's Triton "
               "kernel (flash-attn 1.x flash_attn_triton.py, vendored in llmfoundry/models/layers/flash_attn_triton.py "
               "for triton-pre-mlir).")


def llmfoundry(row: dict) -> list[dict]:
    """scripts/train/benchmarking/README.md (A100 80GB and 40GB tables): Composer + FSDP FULL_SHARD,
    12-step sweeps. Every degree, the batch and activation checkpointing are stated."""
    m, p, hw_row = row["model"], row["parallelism"], row["hardware"]
    assert m["ffn"] % m["hidden"] == 0 and m["kv_heads"] == m["heads"], row["id"]
    assert hw_row["count"] == p["dp"] and p["micro_batch"] * p["grad_accum"] * p["dp"] == p["global_batch"], row["id"]
    # MPTConfig defaults of the benchmark yamls: biases on; learned positions (the row: NumParams grows with
    # seq_len), so no ALiBi
    model = {"model_type": "mpt", "d_model": m["hidden"], "n_heads": m["heads"], "n_layers": m["layers"],
             "expansion_ratio": m["ffn"] // m["hidden"], "max_seq_len": m["seq_len"], "vocab_size": m["vocab"],
             "no_bias": False, "learned_pos_emb": True, "attn_config": {"alibi": False}}
    hw, hw_note = hardware(row, scale_out="roce-200g")
    training = {"seq_len": m["seq_len"], "global_batch": p["global_batch"], "precision": "bf16",
                "framework": "pytorch-fsdp", "attention": "flash1-triton"}
    recompute = "full" if p["activation_checkpointing"] else "none"
    layout = {"dp": p["dp"], "zero": 3, "micro_batch": p["micro_batch"], "recompute": recompute}
    if p["fsdp_mixed_precision"] == "PURE":
        prec = ("Precision 'bf16' with FSDP mixed_precision PURE: bf16 params, gradients and their reduction "
                "(fp32 sharded master and optimizer kept) → bf16; gpuplan's bf16 reduces gradients in fp32.")
    else:
        prec = "Precision 'amp_bf16' with FSDP mixed_precision DEFAULT (fp32 gradient reduction) → bf16."
    notes = [hw_note, NOTE_ROCE, prec, NOTE_TRITON,
             f"Published NumParams {m['n_params']:,}: this mapping (learned positions, biases) has the same count.",
             f"grad_accum {p['grad_accum']} (= global_batch / (micro_batch × dp)); activation checkpointing "
             f"{'on' if p['activation_checkpointing'] else 'off'} → recompute {recompute}.",
             f"tokens/s per GPU as published (total {reported(row, 'throughput_tokens'):,} tokens/s). MFU counts "
             "attention FLOPs; HFU ×4/3 under activation checkpointing."]
    pub = published("tokens_per_s_per_gpu", reported(row, "throughput_tokens_per_gpu"), mfu=pct(reported(row, "mfu")),
                    hfu=pct(reported(row, "hfu")), model_tflops_per_gpu=reported(row, "model_tflops_per_gpu"))
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return [entry(row, "llmfoundry", "throughput", scenario, pub, [], notes)]


def _nemo_layout(p: dict) -> tuple[dict, list[str]]:
    layout = {k: p[k] for k in ("tp", "pp", "cp", "dp", "micro_batch") if k in p}
    open_: list[str] = []
    if p["pp"] > 1:
        if "vp" not in p:
            open_ += ["pp_schedule", "virtual_stages"]
        elif p["vp"] > 1:
            layout.update(pp_schedule="interleaved", virtual_stages=p["vp"])
        else:
            layout["pp_schedule"] = "1f1b"
    open_ += ["zero", "recompute"] + (["sequence_parallel", "tp_overlap"] if p["tp"] > 1 else [])
    return layout, open_


# NeMo's performance scripts benchmark every Nemotron with a NullTokenizer of vocab_size=256000
# (NVIDIA/NeMo scripts/performance/llm/pretrain_nemotron3_8b.py, pretrain_nemotron3_22b.py,
# pretrain_nemotron4_340b.py at commit 8cfedd72): the Nemotron tokenizer's 256k vocabulary
NEMOTRON_VOCAB = 256000


def nemotron_model(m: dict) -> tuple[dict, str]:
    """A Nemotron row's model as NeMo builds it (nemo/collections/llm/gpt/model/nemotron.py NemotronConfig:
    squared-ReLU MLP, LayerNorm with zero-centred gamma, rotary_percent 0.5, untied embeddings, no biases),
    with the row's stated shape; head size hidden / heads (kv_channels None in the row's configs)."""
    model = {"model_type": "nemotron", "hidden_size": m["hidden"], "num_hidden_layers": m["layers"],
             "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"],
             "intermediate_size": m["ffn"], "vocab_size": NEMOTRON_VOCAB, "max_position_embeddings": m["seq_len"],
             "partial_rotary_factor": 0.5, "tie_word_embeddings": False}
    note = (f"Nemotron per NeMo's NemotronConfig (squared-ReLU MLP of 2 matrices, LayerNorm1P, rotary 0.5, untied, "
            f"no biases) → model_type nemotron. Vocabulary not stated in the row: {NEMOTRON_VOCAB:,}, what NeMo's "
            "performance scripts give every Nemotron (NullTokenizer vocab_size=256000, scripts/performance/llm/"
            "pretrain_nemotron*.py, commit 8cfedd72); a multiple of 128 × tp, so Megatron pads nothing.")
    return model, note


def nemo(row: dict) -> list[dict]:
    """NeMo 24.07 performance summary (commit 8e3d65dc): pretraining and fine-tuning tables on DGX H100,
    FP8. Degrees and batches stated; recompute, SP, distributed optimizer and comm overlap not."""
    m, p = row["model"], row["parallelism"]
    notes = []
    if m["name"].startswith("Nemotron"):
        model, model_note = nemotron_model(m)
        notes.append(model_note)
    elif m["name"].startswith("GPT3"):
        vocab = megatron_padded_vocab(50257, p["tp"])
        model: dict | str = gpt(m, vocab)
        notes.append(f"GPT-3 vocab 50257 padded to {vocab} (Megatron's make_vocab_size_divisible_by 128 × tp); "
                     "learned positions, tied embeddings (NeMo GPT defaults).")
    else:
        model, model_note = llama_model(m)
        notes.append(model_note)
    hw, _ = hardware(row)
    layout, open_ = _nemo_layout(p)
    training = {"seq_len": p.get("seq_len", p.get("packed_seq_len")), "global_batch": p["global_batch"],
                "precision": "fp8", "framework": "NeMo 24.07"}
    notes.append("Framework as the source names it, the NeMo 24.07 container: NeMo 1 (the 24.07 documentation: "
                 "'NeMo 2.0 is an experimental feature and currently released in the dev container only'), read as "
                 "the megatron-core profile.")
    if p.get("method") == "LoRA":
        training["method"] = "lora"
        notes.append("LoRA rank and targets not stated: NeMo 1's default (attention_qkv; the NeMo-Framework-Launcher's "
                     "peft/llama/squad.yaml, adapter_dim 32, names no target_modules).")
    if p.get("method"):
        notes.append(f"{p['method']} on {p['dataset']}: seq_len = packed length {p['packed_seq_len']}.")
    notes += ["FP8 via Transformer Engine → precision fp8. Network between DGX H100 nodes not stated (default).",
              "dp = GPUs/(tp·pp·cp) as the corpus derived it; vp → virtual_stages (interleaved when > 1)."]
    pub = published("tokens_per_s_per_gpu", reported(row, "tokens_per_sec_per_gpu"),
                    model_tflops_per_gpu=reported(row, "model_tflops_per_gpu"))
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return [entry(row, "nemo-2407", "throughput", scenario, pub, open_, notes)]


def llama3(row: dict) -> list[dict]:
    """The Llama 3 Herd of Models, Table 4: 405B pre-training degrees and BF16 MFU on H100 (RoCE)."""
    m, p = row["model"], row["parallelism"]
    model, model_note = llama_model(m)
    hw, hw_note = hardware(row, scale_out="roce-400g")
    global_batch = p["batch_per_dp"] * p["dp"]
    training = {"seq_len": p["seq_len"], "global_batch": global_batch, "precision": "bf16", "framework": "generic"}
    layout = {"tp": p["tp"], "cp": p["cp"], "pp": p["pp"], "dp": p["dp"]}
    open_ = ["zero", "micro_batch", "pp_schedule", "virtual_stages", "recompute", "sequence_parallel"]
    notes = [model_note, hw_note, "RoCE at 400 Gb/s per GPU: roce-400g.",
             f"global_batch = batch per DP {p['batch_per_dp']} × DP {p['dp']} = {global_batch} sequences "
             f"(~{p['tokens_per_batch']} tokens, as stated).",
             "'DP stands for FSDP' without the sharding level: zero left open (runs.json read the paper's text as "
             "~ZeRO-2, parameters not resharded after forward). Meta's internal framework: generic."]
    if row["notes"].startswith("Row 3 DP"):
        notes.append("DP 8 as in arXiv v3 (v1 transcriptions print 4; 8 is consistent with 16,384 GPUs).")
    pub = published("mfu", pct(reported(row, "bf16_mfu")), model_tflops_per_gpu=reported(row, "tflops_per_gpu"))
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return [entry(row, "llama3", "throughput", scenario, pub, open_, notes)]


def tinyllama(row: dict) -> list[dict]:
    """TinyLlama README: 16 A100-40G, lit-gpt FSDP, 16k tokens per GPU micro-batch, no checkpointing."""
    m, p = row["model"], row["parallelism"]
    model, _ = llama_model(m)
    hw, hw_note = hardware(row)
    training = {"seq_len": m["seq_len"], "global_batch": p["global_batch"], "precision": "bf16",
                "framework": "pytorch-fsdp"}
    layout = {"dp": hw["gpus"], "zero": 3, "micro_batch": p["micro_batch"], "recompute": "none"}
    notes = [hw_note, "lit-gpt FSDP: zero 3 (FULL_SHARD, FSDP's default sharding strategy; the README does not "
             "name one); dp = all 16 GPUs. GPUs per node not stated (default).",
             f"micro_batch = 16k tokens per GPU / seq {m['seq_len']} (derived); precision bf16 = lit-gpt default.",
             f"Also: {reported(row, 'a100_gpu_hours_per_300b_tokens')} A100 GPU-hours per 300B tokens."]
    pub = published("tokens_per_s_per_gpu", reported(row, "tokens_per_sec_per_gpu"), mfu=pct(reported(row, "mfu")))
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return [entry(row, "tinyllama", "throughput", scenario, pub, [], notes)]
