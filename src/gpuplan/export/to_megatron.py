"""Megatron-LM arguments of megatron/training/arguments.py (Megatron-Core 0.1x era)."""

from __future__ import annotations

import shlex
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.export.common import Export, _batches, _header, _parts, _shard_split, _steps
from gpuplan.export.to_torchrun import torchrun_args
from gpuplan.spec.layout import expert_tp_in


def megatron_args(est: dict, model: Any = None) -> tuple[list[str], list[str]]:
    hw, tr, lay = _parts(est)
    gb, _ = _batches(hw, tr, lay)
    notes: list[str] = []
    a = _parallel_args(lay, model, notes)
    a += _moe_args(tr, lay, notes)
    a += _batch_args(tr, lay, gb, model)
    a += _precision_args(tr["precision"], notes, tr.get("fp8_recipe"))
    a += _zero_args(lay, notes)
    a += _recompute_args(lay["recompute"], notes, lay.get("recompute_every", 1), lay, model)
    a += _optimizer_args(tr, lay, notes)
    if model is not None:
        a += _megatron_model(model, lay["tp"], notes)
    else:
        notes.append("model architecture flags (--num-layers, --hidden-size, ...) left out: no model spec given")
    if tr.get("method", "full") != "full":
        notes.append(f"method={tr['method']}: Megatron-LM pretrains all weights; LoRA needs NeMo/Megatron-Bridge")
    return a, notes


def _parallel_args(lay: dict, model: Any, notes: list[str]) -> list[str]:
    """Model-parallel degrees, the pipeline schedule and sequence parallelism."""
    a = ["--tensor-model-parallel-size", str(lay["tp"]), "--pipeline-model-parallel-size", str(lay["pp"]),
         "--context-parallel-size", str(lay["cp"])]
    if lay["ep"] > 1:
        a += ["--expert-model-parallel-size", str(lay["ep"])]
        if expert_tp_in(lay) != lay["tp"]:  # MoE parallel folding
            a += ["--expert-tensor-parallel-size", "1"]
    if lay["pp_schedule"] == "interleaved" and lay["virtual_stages"] > 1:
        n_layers = getattr(model, "n_layers", None)
        if n_layers and n_layers % (lay["pp"] * lay["virtual_stages"]) == 0:
            a += ["--num-layers-per-virtual-pipeline-stage", str(n_layers // (lay["pp"] * lay["virtual_stages"]))]
        else:
            notes.append(f"interleaved ×{lay['virtual_stages']}: set --num-layers-per-virtual-pipeline-stage "
                         "to layers / (pp × virtual stages)")
    elif lay["pp_schedule"] in ("zero-bubble", "gpipe") and lay["pp"] > 1:
        notes.append(f"pp_schedule={lay['pp_schedule']}: Megatron-LM runs 1F1B (or interleaved); "
                     "the plan's bubble assumed the other schedule")
    if lay.get("sequence_parallel") and lay["tp"] > 1:
        a.append("--sequence-parallel")
        if lay.get("tp_overlap"):
            a.append("--tp-comm-overlap")  # Transformer Engine's userbuffers overlap of the TP collectives
    if lay.get("ep_overlap") and lay.get("ep", 1) > 1:
        a.append("--overlap-moe-expert-parallel-comm")  # Megatron-Core: expert all-to-all under the other batch
    return a


def _moe_args(tr: dict, lay: dict, notes: list[str]) -> list[str]:
    """The expert exchange and GEMMs gpuplan timed (model/ep_comm.py; frameworks.json moe.grouped_gemm): Megatron-LM's
    default dispatcher is allgather, which it does not time, and its experts default to SequentialMLP's loop."""
    if lay.get("ep", 1) <= 1:
        return []
    a = ["--moe-grouped-gemm"]
    if tr.get("moe_dispatcher") == "deepep":
        notes.append("DeepEP through the flex dispatcher: --moe-enable-deepep (Megatron-Core 0.12-0.14; later releases "
                     "spell it --moe-flex-dispatcher-backend deepep)")
        return [*a, "--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"]
    return [*a, "--moe-token-dispatcher-type", "alltoall"]


def _batch_args(tr: dict, lay: dict, gb: int, model: Any) -> list[str]:
    """Micro and global batch, sequence length, position embeddings, iterations."""
    a = ["--micro-batch-size", str(lay["micro_batch"]), "--global-batch-size", str(gb),
         "--seq-length", str(tr["seq_len"])]
    max_pos = max(tr["seq_len"], getattr(model, "max_positions", 0) or 0)
    a += ["--max-position-embeddings", str(max_pos)]
    steps = _steps(tr, gb)
    if steps:
        a += ["--train-iters", str(steps)]
    return a


def _precision_args(prec: str, notes: list[str], recipe: str | None = None) -> list[str]:
    """--fp16 / --bf16 (+ FP8 hybrid format); fp32 sets none."""
    a: list[str] = []
    if prec == "fp16":
        a.append("--fp16")
    elif prec in ("bf16", "bf16-pure", "fp8"):
        a.append("--bf16")
        if prec == "fp8" and recipe == "nvfp4":  # Megatron-Core's FP4 path (Transformer Engine NVFP4BlockScaling)
            a += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
        elif prec == "fp8" and recipe == "mxfp4":
            notes.append("mxfp4: Megatron's --fp4-recipe offers nvfp4 only, not MXFP4 — the script trains "
                         "bf16; plan with precision nvfp4 for Megatron")
        elif prec == "fp8":  # --fp8-recipe: tensorwise, delayed (the default), mxfp8, blockwise
            a += ["--fp8-format", "hybrid", "--fp8-recipe", recipe or "delayed"]
        if prec == "bf16-pure":
            notes.append("bf16-pure: Megatron keeps fp32 main weights; --use-precision-aware-optimizer with "
                         "bf16 optimizer dtypes comes closest")
    return a


def _zero_args(lay: dict, notes: list[str]) -> list[str]:
    """ZeRO as Megatron's distributed optimizer (1), Megatron-FSDP's optim_grads (2) or torch FSDP2 (3), its instances,
    overlap."""
    a: list[str] = []
    zero = lay["zero"]
    if zero == 1:
        a.append("--use-distributed-optimizer")
    elif zero >= 2 and lay["pp"] > 1:  # frameworks.json megatron-core sharded-params-without-pipeline
        a.append("--use-distributed-optimizer")
        notes.append(f"zero={zero} with a pipeline: Megatron shards gradients and parameters only through "
                     "Megatron-FSDP or torch FSDP2, neither with pipeline parallelism — the script runs the "
                     "distributed optimizer (ZeRO-1: the gradient buffer and the weights whole, more memory than this "
                     "estimate); plan with framework megatron-core for a layout it runs")
    elif zero == 2:
        # Megatron-Core docs, Megatron FSDP "How to Use": --use-megatron-fsdp, --data-parallel-sharding-strategy,
        # --no-gradient-accumulation-fusion, --use-distributed-optimizer (0.14+; "custom FSDP" before)
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads",
              "--no-gradient-accumulation-fusion", "--use-distributed-optimizer"]
        notes.append("zero=2: Megatron-FSDP's optim_grads shards the optimizer state and the gradients (the "
                     "distributed optimizer alone keeps the gradient buffer whole: ZeRO-1); Megatron-Core 0.14+")
    elif zero == 3:
        a.append("--use-torch-fsdp2")
    split = _shard_split(lay)
    if split is not None and zero == 1:
        a += ["--num-distributed-optimizer-instances", str(split[0])]
    elif split is not None:
        notes.append(f"hybrid shard groups of {split[1]}: not expressible with "
                     f"{'--use-megatron-fsdp' if zero == 2 else '--use-torch-fsdp2'}")
    if zero > 0 and lay.get("dp_overlap", True):
        a += ["--overlap-grad-reduce", "--overlap-param-gather"]
    return a


def _recompute_args(rec: str, notes: list[str], every: int = 1, lay: dict | None = None,
                    model: Any = None) -> list[str]:
    """Activation recomputation: full (every layer, uniform; every k-th: the block method over the
    same share of each stage's layers) or selective."""
    a: list[str] = []
    if rec == "full" and every > 1:
        # Megatron's block method recomputes the first N layers of each pipeline stage (model chunk)
        layers = getattr(model, "n_layers", None)
        chunks = (lay or {}).get("pp", 1) * (lay or {}).get("virtual_stages", 1)
        per_chunk = layers // chunks if layers else None
        n = max(1, round(per_chunk / every)) if per_chunk else 1
        a += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)]
        notes.append(f"recompute_every={every}: Megatron's block method recomputes the first {n} layers of each "
                     "stage instead of every k-th one (the same share)")
    elif rec == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif rec.startswith("selective"):
        a += ["--recompute-granularity", "selective"]
        if (lay or {}).get("recompute_modules"):  # Megatron-Core's modules (default: core_attn)
            a += ["--recompute-modules", *lay["recompute_modules"]]  # type: ignore[index]
        if rec == "selective-op":
            notes.append("recompute=selective-op (torchtitan per-op SAC) → Megatron selective (core attention "
                         "recomputed): similar memory, a little less recompute")
    return a


def _optimizer_args(tr: dict, lay: dict, notes: list[str]) -> list[str]:
    """Optimizer CPU offload, then the optimizer (Megatron-LM offers adam and sgd)."""
    a: list[str] = []
    if lay["offload"] == "optimizer":
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    elif lay["offload"] == "params":
        notes.append("offload=params: Megatron-LM does not offload parameters; only the optimizer "
                     "(--optimizer-cpu-offload) — the plan needs more GPU memory under Megatron")
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    if tr["optimizer"] in ("sgd", "sgd-momentum"):
        a += ["--optimizer", "sgd"]
    elif tr["optimizer"] in ("adamw", "adam"):
        a += ["--optimizer", "adam"]
    else:
        notes.append(f"optimizer={tr['optimizer']}: Megatron-LM offers adam and sgd")
    return a


def _megatron_model(m: Any, tp: int, notes: list[str]) -> list[str]:
    """The architecture flags of pretrain_gpt.py (megatron/training/arguments.py, _add_network_size_args);
    a network those flags cannot state is refused (``_unexpressible``), never written as another model."""
    why = _unexpressible(m)
    if why:
        raise GpuplanError(f"cannot export to megatron: {m.name} {why}; Megatron-LM's pretrain_gpt.py arguments "
                           "cannot state it (export to torchtitan, deepspeed or accelerate instead)")
    a = ["--num-layers", str(m.n_layers), "--hidden-size", str(m.hidden), "--num-attention-heads", str(m.n_heads)]
    if m.ffn:
        a += ["--ffn-hidden-size", str(m.ffn)]
    if m.n_kv_heads != m.n_heads:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv_heads)]
    if m.head_dim and m.head_dim * m.n_heads != m.hidden:
        a += ["--kv-channels", str(m.head_dim)]
    a += _block_args(m)
    a += _bias_args(m)
    if any(w.name.endswith(("q_norm", "k_norm")) for lg in m.layers for w in lg.weights):
        a.append("--qk-layernorm")
    a += _position_args(m, notes)
    a += ["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"]
    if m.norm_zero_centered:  # TransformerConfig.layernorm_zero_centered_gamma (argparse --apply-layernorm-1p)
        a.append("--apply-layernorm-1p")
    if m.norm_eps is not None:
        a += ["--norm-epsilon", repr(m.norm_eps)]
    else:
        notes.append("the model's config gives no norm epsilon: Megatron's default 1e-5 is used")
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if m.moe:
        a += ["--num-experts", str(m.n_experts), "--moe-router-topk", str(m.top_k)]
        if m.moe_ffn:
            a += ["--moe-ffn-hidden-size", str(m.moe_ffn)]
    if m.kv_lora_rank:
        notes.append("multi-head latent attention: add --multi-latent-attention and its ranks")
    a += _vocab_args(m.vocab, tp, notes)
    return a


def _unexpressible(m: Any) -> str | None:
    """What in the model pretrain_gpt.py's flags cannot build (GPTModel: pre-norm blocks, attention then MLP,
    SwiGLU, GeLU or squared ReLU, RoPE or learned positions). Parallel blocks (GPT-J/NeoX, Falcon, Cohere):
    megatron/core/transformer/transformer_layer.py runs the MLP on the attention's residual output, and neither
    TransformerConfig nor megatron/training/arguments.py has an option for one shared input (Megatron-LM
    d98e8a6, 2026-08)."""
    if m.hybrid:
        return "has Mamba / linear-attention blocks (pretrain_mamba.py's hybrid layer pattern, not GPTModel)"
    if m.position == "alibi":
        return "uses ALiBi positions"
    if m.parallel_block:
        return "computes attention and MLP in parallel (one shared input)"
    if m.post_norms:
        return "has extra norms after attention and MLP"
    if m.gated_mlp and m.activation not in ("silu", "swish"):
        return f"uses a gated {m.activation} MLP (GeGLU), not SwiGLU"
    if not m.gated_mlp and not m.activation.startswith("gelu") and m.activation != "relu2":
        return f"uses a {m.activation} MLP"
    scaling = dict(m.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type"))
    if m.position == "rope" and scaling and not m.kv_lora_rank and kind not in ("llama3", "linear", "default"):
        return f"scales RoPE by {kind}"
    if kind == "llama3" and (scaling.get("low_freq_factor"), scaling.get("high_freq_factor"),
                             scaling.get("original_max_position_embeddings")) != LLAMA3_ROPE_FIXED:
        return (f"scales RoPE (llama3) with low/high frequency factors and original length other than Megatron's "
                f"fixed {LLAMA3_ROPE_FIXED}")
    return None


def _block_args(m: Any) -> list[str]:
    """The MLP's activation and the attention window (megatron/training/arguments.py, _add_network_size_args):
    --swiglu (gated SiLU); --squared-relu ('Use squared relu activation instead of default gelu': Nemotron's
    relu², two matrices); GeLU is the default. A sliding window of W keys (the query's own included:
    transformers' sliding-window mask keeps kv_idx > q_idx − W) is FlashAttention's window_size (W − 1, 0),
    written --window-size; --window-attn-skip-freq N puts one full-attention layer after N − 1 windowed ones,
    or takes the per-layer list (1 = window)."""
    a = ["--swiglu"] if m.gated_mlp else ["--squared-relu"] if m.activation == "relu2" else []
    if m.window_layers:
        a += ["--window-size", f"{m.sliding_window - 1},0"]
        pattern = [int(w) for w in m.window_layers]
        period = next((n for n in range(2, len(pattern) + 1)
                       if pattern == [int((i + 1) % n != 0) for i in range(len(pattern))]), None)
        if period is not None:
            a += ["--window-attn-skip-freq", str(period)]
        elif not all(pattern):
            a += ["--window-attn-skip-freq", "[" + ",".join(map(str, pattern)) + "]"]
    return a


# megatron/core/models/common/embeddings/rotary_pos_embedding.py, RotaryEmbedding._apply_scaling: Llama 3
# scaling with low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192 fixed
LLAMA3_ROPE_FIXED = (1, 4, 8192)


def _bias_args(m: Any) -> list[str]:
    """Biases: none (--disable-bias-linear), only on q/k/v (--add-qkv-bias, Qwen2), or everywhere (default)."""
    biased = {w.name.rsplit(".", 1)[-1] for lg in m.layers for w in lg.weights
              if w.bias and w.group in ("attention", "mlp", "expert", "shared_expert")}
    if not biased:
        return ["--disable-bias-linear"]
    if biased <= {"q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "c_attn", "Wqkv"}:
        return ["--disable-bias-linear", "--add-qkv-bias"]
    return []


def _position_args(m: Any, notes: list[str]) -> list[str]:
    """Position embedding: learned, none, or RoPE with its base, rotated share and scaling."""
    if m.position != "rope":
        return ["--position-embedding-type", "learned_absolute" if m.position == "learned" else "none"]
    a = ["--position-embedding-type", "rope"]
    if m.rope_theta != int(m.rope_theta):
        notes.append(f"RoPE base {m.rope_theta:g} rounded to {int(m.rope_theta)}: --rotary-base takes an integer")
    a += ["--rotary-base", str(int(m.rope_theta))]
    if m.rotary_percent != 1.0:
        a += ["--rotary-percent", repr(m.rotary_percent)]
    scaling = dict(m.rope_scaling)
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":
        a += ["--use-rope-scaling", "--rope-scaling-factor", repr(float(scaling["factor"]))]
    elif kind == "linear":
        factor = float(scaling["factor"])
        a += ["--rotary-seq-len-interpolation-factor", str(round(factor))]
        if factor != round(factor):
            notes.append(f"linear RoPE scaling {factor:g} rounded to {round(factor)} (Megatron takes an integer)")
    elif kind and kind != "default":
        notes.append(f"RoPE scaling {kind}: set Megatron's multi-latent-attention rope options by hand")
    return a


def vocab_divisor(vocab: int, tp: int) -> int:
    """--make-vocab-size-divisible-by so Megatron's padded vocabulary (rounded up to a multiple of
    divisor × tp, megatron/training/tokenizer: _vocab_size_with_padding) equals the model's: the largest
    power of two ≤ 128 (Megatron's default) that keeps it whole; 1 when the vocabulary is not a multiple
    of tp (then Megatron pads)."""
    d = 128
    while d > 1 and vocab % (d * tp):
        d //= 2
    return d


def _vocab_args(vocab: int, tp: int, notes: list[str]) -> list[str]:
    d = vocab_divisor(vocab, tp)
    padded = -(-vocab // (d * tp)) * d * tp
    if padded != vocab:
        notes.append(f"the vocabulary ({vocab:,}) is not a multiple of tp={tp}: Megatron pads it to {padded:,} rows "
                     "(a checkpoint converted from Hugging Face needs the same padding)")
    notes.append(f"the vocabulary comes from the tokenizer (--tokenizer-type HuggingFaceTokenizer --tokenizer-model "
                 f"<the model's repo>); {vocab:,} tokens stay unpadded with --make-vocab-size-divisible-by {d}")
    return ["--make-vocab-size-divisible-by", str(d)]


def megatron(est: dict, model: Any = None) -> Export:
    args, notes = megatron_args(est, model)
    hw = est["scenario"]["hardware"]
    launcher = " ".join(torchrun_args(est)[0])
    lines = [f"# {line}" for line in _header(est, "bash megatron_args.sh")]
    lines += args_array(args)
    lines.append(f"{launcher} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\"  # + data, tokenizer, lr ({hw['gpus']} GPUs)")
    return Export(target="megatron", config=args, text="\n".join(lines) + "\n", filename="megatron_args.sh",
                  notes=tuple(notes))



def args_array(args: list[str]) -> list[str]:
    """The arguments as the bash array MEGATRON_ARGS, one flag and its values per line."""
    lines = ["MEGATRON_ARGS=("]
    i = 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):  # a flag's values (nargs='*': --recompute-modules)
            j += 1
        lines.append("  " + " ".join([args[i], *map(shlex.quote, args[i + 1:j])]))
        i = j
    return [*lines, ")"]
