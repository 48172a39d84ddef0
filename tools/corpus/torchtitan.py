"""torchtitan sources: the Dec-2024 H100 benchmark, the 2025 AsyncTP benchmark, the Trainy H200
submission and the 2024 docs/performance.md tables (A100 Llama 2/3, H100 Llama 3.1 405B)."""

from __future__ import annotations

from corpus.common import entry, gib, hardware, llama_model, pct, published, reported

# torchtitan's activation-checkpointing modes as the rows name them → layout.recompute. 'selective'
# in the llama3 train configs of these dates is selective_ac_option = 'op' (per-op SAC); 'selective
# layer' recomputes every k-th block whole, k not stated: torchtitan's documented default
# selective_ac_option '2' ("2 = checkpoint every other layer", torchtitan/config_manager.py, 2024).
RECOMPUTE = {"selective AC": "selective-op", "per-op SAC": "selective-op", "selective op": "selective-op",
             "llama3_8b.toml default (selective)": "selective-op", "full AC": "full", "full": "full",
             "none": "none", "selective layer": "full"}
RECOMPUTE_EVERY = {"selective layer": 2}
NOTE_LAYER_AC = ("'selective layer' AC with k not stated: torchtitan's default selective_ac_option '2' "
                 "(config_manager.py: '2 = checkpoint every other layer') → recompute full, recompute_every 2.")
PP_SCHEDULE = {"1F1B": "1f1b", "Interleaved 1F1B": "interleaved"}
NOTE_PP_MICROBATCHES = ("Pipeline micro-batch count not stated: torchtitan's documented default of that date, "
                        "--experimental.pipeline_parallel_microbatches None = 'the number of pipeline stages' "
                        "(torchtitan/config_manager.py, 2024) → {pp} micro-batches of the local batch {local}: "
                        "micro_batch {mb}.")
NOTE_FSDP = "FSDP2 full shard: zero 3 over the FSDP degree (dp); the local batch is per FSDP rank."
NOTE_TP = ("tp > 1: sequence_parallel true (torchtitan's TP always shards norms and block inputs over the "
           "sequence, apply_tp in parallelize_llama.py); tp_overlap = AsyncTP as stated.")
NOTE_NET = ("Network: RDMA at 400 Gb/s per GPU, type (RoCE/InfiniBand) not stated: scale_out left at the "
            "default, which has the stated rate.")

# torchtitan's train.py until early 2025 (the Dec-2024 benchmark's code) compiled the model only: "# TODO: compiling
# loss function causes CUDA errors, turning off for now" above a commented-out torch.compile(loss_fn); 2025's
# components/loss.py build_cross_entropy_loss compiles the loss with the model (later compile.components).
NOTE_LOSS_2024 = ("torch.compile of that date compiled the model only: train.py left torch.compile(loss_fn) "
                  "commented out ('compiling loss function causes CUDA errors') → compile: model (the loss eager "
                  "over fp32 logits).")


def _titan(row: dict, fp8: bool, compile_: bool | str | None, tp_overlap: bool,
           fp8_recipe: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(scenario, open fields, notes) of a torchtitan row; the caller picks the metric."""
    m, p = row["model"], row["parallelism"]
    model, model_note = llama_model(m)
    hw, hw_note = hardware(row)
    notes = [model_note, hw_note, NOTE_FSDP]
    layout = {"dp": p["fsdp"], "zero": 3}
    for key in ("tp", "pp", "cp"):
        if key in p:
            layout[key] = p[key]
    open_: list[str] = []
    if p.get("pp", 1) > 1:  # the local batch is split into pipeline micro-batches: their count not stated
        layout["pp_schedule"] = PP_SCHEDULE[p["pp_schedule"]]
        if layout["pp_schedule"] == "interleaved":
            open_.append("virtual_stages")
        local = p.get("local_batch") or (p["global_batch"] // p["fsdp"] if p.get("global_batch") else None)
        if row["source"].get("year") == 2024 and local and local % p["pp"] == 0:
            layout["micro_batch"] = local // p["pp"]
            notes.append(NOTE_PP_MICROBATCHES.format(pp=p["pp"], local=local, mb=local // p["pp"]))
        else:
            open_.append("micro_batch")
            notes.append("Pipeline micro-batch count (so micro_batch) not stated.")
    else:
        layout["micro_batch"] = p["local_batch"]
    layout["recompute"] = RECOMPUTE[p["recompute"]]
    if p["recompute"] in RECOMPUTE_EVERY:
        layout["recompute_every"] = RECOMPUTE_EVERY[p["recompute"]]
        notes.append(NOTE_LAYER_AC)
    if p.get("tp", 1) > 1:
        layout["sequence_parallel"] = True
        layout["tp_overlap"] = tp_overlap
        notes.append(NOTE_TP)
    global_batch = p.get("global_batch")
    if global_batch is None:
        global_batch = p["local_batch"] * p["fsdp"]
        notes.append(f"global_batch = local batch {p['local_batch']} × FSDP {p['fsdp']} (not printed).")
    if not isinstance(p.get("seq_len", m["seq_len"]), int):
        notes.append(f"seq_len {m['seq_len']}: {p['seq_len']}.")
    training = {"seq_len": m["seq_len"], "global_batch": global_batch, "precision": "fp8" if fp8 else "bf16",
                "framework": "torchtitan"}
    if compile_ is not None:
        training["compile"] = compile_
    if fp8:
        notes.append(f"'{p['precision']}': torchao Float8 linears, bf16 elsewhere → precision fp8"
                     + (f", fp8_recipe {fp8_recipe} as stated." if fp8_recipe else
                        "; scaling not stated: torchtitan's default (tensorwise dynamic scaling)."))
        if fp8_recipe:
            training["fp8_recipe"] = fp8_recipe
    scenario = {"model": model, "hardware": hw, "training": training, "layout": layout}
    return scenario, open_, notes


def _memory(row: dict, key: str, scenario: dict, open_: list[str], notes: list[str], name: str) -> dict:
    value = reported(row, name)
    pub = published("peak_memory_bytes", gib(value))
    extra = f"Peak memory {value} GiB (max across GPUs; torchtitan logs torch max_memory_reserved)."
    return entry(row, key, "memory", scenario, pub, open_, [*notes, extra], suffix="#memory")


def torchtitan_2412(row: dict) -> list[dict]:
    """benchmarks/llama3_h100_202412_torchtitan.md, Tables 1-6: TPS at iteration 90 and peak memory."""
    p = row["parallelism"]
    techniques = p["techniques"]
    scenario, open_, notes = _titan(row, fp8="float8" in p["precision"],
                                    compile_="model" if "torch.compile" in techniques else False,
                                    tp_overlap="AsyncTP" in techniques)
    notes += [NOTE_NET, f"Techniques: {techniques} (torch.compile on exactly when listed).", NOTE_LOSS_2024]
    pub = published("tokens_per_s_per_gpu", reported(row, "tokens_per_sec_per_gpu"))
    return [entry(row, "torchtitan-2412", "throughput", scenario, pub, open_, notes),
            _memory(row, "torchtitan-2412", scenario, open_, notes, "peak_memory")]


def torchtitan_asynctp(row: dict) -> list[dict]:
    """benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md: one configuration measured with vanilla TP
    (the row's id) and with AsyncTP (``#async-tp``)."""
    out = []
    fp8 = row["parallelism"]["precision"].startswith("float8")
    for suffix, name, overlap in (("", "vanilla_tp_tokens_per_sec", False), ("#async-tp", "async_tp_tokens_per_sec",
                                                                              True)):
        recipe = row["parallelism"]["precision"].split()[-1] if fp8 else None  # 'float8 rowwise' → rowwise
        scenario, open_, notes = _titan(row, fp8=fp8, compile_=True, tp_overlap=overlap, fp8_recipe=recipe)
        notes += [NOTE_NET, "Column 'tokens/sec' is torchtitan's per-GPU TPS (magnitudes match the Dec-2024 "
                  "benchmark)." + (" The fp8 recipe is stated: its casts, rowwise's backward rescales and "
                                   "torchtitan's fp8 TP all-gather (tensorwise only) follow from it." if fp8 else "")]
        pub = published("tokens_per_s_per_gpu", reported(row, name))
        out.append(entry(row, "torchtitan-asynctp", "throughput", scenario, pub, open_, notes, suffix=suffix))
    return out


def torchtitan_h200(row: dict) -> list[dict]:
    """benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (third-party, iteration 100)."""
    scenario, open_, notes = _titan(row, fp8=True, compile_=True, tp_overlap=False)
    notes += [NOTE_NET, "Float8 with FSDP float8 all-gather (not modelled separately). torch 2.8.0a0 (NGC 25.05)."]
    pub = published("tokens_per_s_per_gpu", reported(row, "tokens_per_sec_per_gpu"))
    return [entry(row, "torchtitan-h200", "throughput", scenario, pub, open_, notes),
            _memory(row, "torchtitan-h200", scenario, open_, notes, "memory")]


def torchtitan_perf_md(row: dict) -> list[dict]:
    """docs/performance.md tables of 2024 (A100 Llama 3 and Llama 2, April; H100 Llama 3.1 405B, August):
    WPS per GPU and MFU; torch.compile not stated (left at the default)."""
    p = row["parallelism"]
    optimizations = p.get("optimizations", "")
    scenario, open_, notes = _titan(row, fp8="float8" in p["precision"], compile_=None,
                                    tp_overlap="Async TP" in optimizations)
    if optimizations:
        notes.append(f"Optimizations: {optimizations}. MFU is against the H100 SXM bf16 peak (Float8 rows too), "
                     "understated per the authors.")
    notes.append("torch.compile not stated: left open (off, torchtitan's default; on where Async TP is stated, which "
                 "torchtitan runs only compiled — the scenario parser reads it so); network and GPUs per node not "
                 "stated (defaults).")
    mfu = reported(row, "mfu")
    pub = published("tokens_per_s_per_gpu", reported(row, "tokens_per_sec_per_gpu"), mfu=pct(mfu))
    return [entry(row, "torchtitan-perf-md", "throughput", scenario, pub, open_, notes)]
