"""The words for the typed codes the model and the search return: an estimate's notes, a search's
rejections and its work limit. Nothing outside report/ builds these sentences, and nothing matches
on them: callers hold the codes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.catalog.constants import constant
from gpuplan.spec.defaults import NOT_MODELLED_MARGIN, unmodelled_savers
from gpuplan.spec.hardware import tp_domain
from gpuplan.spec.job import has_reference
from gpuplan.units import fmt_count

if TYPE_CHECKING:  # the codes only: report never runs the model or the search
    from gpuplan.model.estimate import Estimate, Note
    from gpuplan.search.codes import Rejection

# Memory savers that published runs use and gpuplan does not represent (spec/defaults.py
# NOT_MODELLED_MARGIN: a peak within that share over the capacity may still run with them).
NOT_MODELLED_SAVERS = {
    "fp8_activations": "activations cached in fp8 for the linear layers' backward (DeepSeek-V3, arXiv:2412.19437 "
                       "Sec. 3.3.2)",
    "mla_recompute": "recomputing only the norms and MLA up-projections (DeepSeek-V3 Sec. 3.3.3; gpuplan's selective "
                     "levels recompute other sets)",
    "pipeline_tuning": "per-stage memory tuning of the pipeline: freeing stage inputs/outputs early, fewer contiguous "
                       "micro-batches in flight (Llama 3, arXiv:2407.21783 Sec. 3.3.2)",
}

FP8_DOES_NOT_PAY = ("fp8 does not pay on this layout: the blocks' linear layers are estimated in bf16 (time and "
                    "memory), as Transformer Engine users leave such layers out of fp8_autocast; torchtitan and "
                    "Megatron-Core (training.framework) run every block linear in fp8 regardless")


MUON = ("optimizer muon: torch.optim.Muon on the blocks' weight matrices (one momentum each, 5 Newton-Schulz steps "
        "in bf16 per optimizer step, split over the data-parallel ranks when the optimizer is sharded, on every rank "
        "under plain DDP), AdamW on the embedding, LM head, norms and biases; the gradient all-gather a sharded "
        "(distributed) Muon needs to see whole matrices is not timed, and with offload the orthogonalisation is "
        "timed at the GPU's rate")


# notes whose words read nothing of the estimate
FIXED_NOTES = {
    "muon": MUON,
    "int8_base": "method lora-int8 (bitsandbytes' LLM.int8 base, MatMul8bitLt): 1 B per frozen weight; each 8-bit "
                 "linear keeps its input for backward — on its ctx, which non-reentrant checkpointing cannot free, so "
                 "every block's under recompute too — and dequantizes its weight for the input gradient, in fp32 "
                 "where PEFT upcast the norms (an fp32 GEMM, TF32 off); its activations' fp16 cast, row-wise "
                 "quantization and int32 output are timed as memory-bound passes, the int8 GEMM at the 16-bit rate "
                 "(no int8 tensor-core speed credited: an estimate)",
    "dora": "DoRA as PEFT runs it (use_dora): every adapted linear's forward — and its recomputation — rebuilds the "
            "adapted weight through an identity matrix to take its row norms (the largest one's rebuild held at once), "
            "rescales the output by the magnitude keeping base_result and lora_result, and with lora_dropout runs the "
            "base GEMM again; the magnitude vectors' states are not counted (~3 % of the adapters')",
}


def preference_note(preference: str | None, reference: bool) -> str:
    """How a preference run is costed."""
    ref = ("; its reference model runs a forward over them every step (TRL's _compute_loss, under no_grad) — a full "
           "fine-tune's a frozen 16-bit copy of the weights, sharded under ZeRO-3/FSDP as TRL prepares it, LoRA's the "
           "base with the adapters off, gathered once more under ZeRO-3/FSDP; precompute_ref_log_probs (once per "
           "dataset) is not modelled") if reference else " (no reference model)"
    return (f"preference {preference}: each pair's chosen and rejected sequences run as one batch (TRL's preference "
            "collator; concatenated_forward before 1.0), so the step's tokens and tokens/s count sequences, two per "
            "pair (micro_batch and global_batch count pairs)" + ref)


def note_text(note: Note, est: Estimate) -> str:
    """One note of an estimate, in words."""
    sc = est.scenario
    code = note.value
    if code == "beyond_positions":
        return (f"seq_len {sc.training.seq_len:,} is beyond the {sc.model.max_positions:,} positions {sc.model.name} "
                "was trained on: long-context training needs RoPE scaling or a longer-context model (memory and "
                "time are predicted all the same)")
    if code == "host_unchecked":
        return (f"{est.memory.cpu_offload_per_node / 1e9:,.0f} GB of state offloaded to each node's host memory, "
                f"which is not checked: no reference node in the catalogue gives {sc.hardware.gpu.id}'s — give "
                "hardware.host_memory (the node's CPU memory) to check it")
    if code in FIXED_NOTES:
        return FIXED_NOTES[code]
    if code == "preference":
        return preference_note(sc.training.preference, has_reference(sc.training))
    if code == "paged":
        return ("optimizer_impl paged (bitsandbytes' paged optimizer): its states live in CUDA unified memory, outside "
                "PyTorch's allocator — on the GPU while it has room, paged to the host when it has not, so they are "
                "not in the GPU's peak (listed as offloaded); the step is timed as if they stay resident")
    if code == "near_capacity":
        savers = unmodelled_savers(sc.training.precision, sc.model.qk_rope_dim > 0, est.layout.pp)
        return (f"within {NOT_MODELLED_MARGIN:.0%} over the capacity: runs at this edge use memory savers gpuplan "
                "does not model — " + "; ".join(NOT_MODELLED_SAVERS[k] for k in savers))
    if code == "cuda_graphs":
        extra = est.memory.graphs
        return (f"training.cuda_graphs {sc.training.cuda_graphs}: the graphs' static buffers are not modelled — the "
                f"peak's upper end carries {extra / 2**30:.0f} GiB for them, as documented (Megatron Bridge: ~0-2 GB "
                "per layer, 10 GB+ with pipeline stages, a large MoE or the whole iteration graphed)"
                + ("" if extra else " (none here: no interval inside point estimates)")
                + "; step time is unchanged: the model charges no host launch overhead for graphs to remove")
    if code == "expert_folding":
        lay = est.layout
        why = "etp 1 as given" if lay.etp == 1 else f"ep {lay.ep} does not divide dp × cp = {lay.dp * lay.cp}"
        return (f"{why}: read as Megatron-Core's MoE parallel "
                f"folding (arXiv:2504.14960) — experts over the tp × cp × dp ranks with expert tensor parallel 1 "
                f"(--expert-tensor-parallel-size 1), {lay.expert_dp} replica(s) of each expert; the attention keeps "
                f"tp {lay.tp}")
    if code == "native_segments":
        return native_segments_text(est)
    if code == "amp_weights":
        tr = sc.training
        return (f"{tr.framework}'s {tr.precision} full fine-tune without sharding: PyTorch autocast over fp32 weights, "
                "the model loaded in fp32 (transformers 4's from_pretrained default) — 4 B weights, 4 B gradients, "
                "8 B AdamW states per parameter and each linear's 16-bit weight cast; a model loaded in 16 bits "
                "(transformers 5's dtype='auto' for a bf16 checkpoint, or torch_dtype=torch.bfloat16) trains in pure "
                "bf16 with about half the model states: give precision bf16-pure")
    if code == "extra_modules":
        extra = sc.model.extra_params - sc.model.frozen_params  # a vision tower is counted apart, frozen (its own note)
        return (f"{extra / 1e9:.1f}B parameters of {sc.model.name} outside its main step (its "
                "multi-token-prediction module, num_nextn_predict_layers) are not trained here: a pre-training that "
                "trains it (DeepSeek-V3, depth 1: arXiv:2412.19437 Sec. 2.2) adds one more block's FLOPs, weights, "
                "gradients, optimizer state and activations on the last stage, and a second LM-head pass")
    if code in ("per_die", "tp_over_network"):
        return _hardware_note(code, est)
    return FP8_DOES_NOT_PAY


def _hardware_note(code: str, est: Estimate) -> str:
    """The notes on how the hardware is counted and connected."""
    sc = est.scenario
    if code == "per_die":
        n = sc.hardware.gpus
        return (f"{sc.hardware.gpu.id} is counted per GCD, as ROCm and the framework see it (two per board, 64 GiB "
                f"each): {n:,} GCDs are {n / 2:,.0f} boards — a source that counts boards (OLMo on LUMI: 4 per node) "
                f"means twice the GCDs, hardware.gpus {2 * n:,}")
    if code == "tp_over_network":
        hw, tp = sc.hardware, est.layout.tp
        net = hw.scale_out.id if hw.scale_out else "the network"
        return (f"tp {tp} spans {-(-tp // tp_domain(hw))} scale-up domains of {tp_domain(hw)} GPUs: every block's "
                f"tensor-parallel collectives cross {net} (timed so) — published runs keep tp within the scale-up "
                "domain and put the rest into pp, cp or dp")
    raise ValueError(code)


def native_segments_text(est: Estimate) -> str:
    lay, frag = est.layout, est.memory.peak.fragmentation
    what = "recompute" if lay.recompute != "none" else "offload" if lay.offload != "none" else \
        "activation offloading" if est.scenario.training.activation_offloading else est.scenario.training.method
    return (f"allocator: {what} on PyTorch's native segments (expandable_segments off: "
            f"{est.scenario.training.framework}'s default) reserves {frag / 2**30:.1f} GiB beyond the allocated peak "
            f"({constant('allocator_fragmentation_native'):.0%} of what the step allocates and frees, the median "
            f"measured; up to {constant('allocator_fragmentation_native_high'):.0%}: the interval's upper end) — "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (training.expandable_segments: true) keeps it near "
            f"{constant('allocator_fragmentation'):.0%} of the peak")


def no_peak_text(gpu: str) -> str:
    return f"{gpu} has no published compute peak in the catalogue: runtime and cost are not predicted"


def rejection_text(r: Rejection) -> str:
    """A search's reason for leaving layouts (or a GPU type) out, in words: the key of ``rejected``."""
    code = r.reason.value
    if code == "out_of_memory":
        return "out of memory"
    if code == "out_of_host_memory":
        return "out of host memory: offloaded state"
    if code == "framework":
        return f"{r.framework} cannot run this: {r.detail}"
    if code == "zero_group":
        return "layout.zero_group does not divide dp×cp"
    if code == "no_compute_peak":
        return f"{r.gpu}: no published compute peak (runtime and cost cannot be predicted)"
    if code in ("precision", "dispatcher"):
        return str(r.detail)
    if code == "no_price":
        return f"{r.gpu}: no price in the catalogue (give --price to rank it by cost)"
    return WORK_LIMIT_TEXT


WORK_LIMIT_TEXT = ("not searched: the work limit was reached (counted in parallel splits: tp × pp × cp × dp × ep); "
                   "narrow the search (fewer --gpu types, a lower --max-gpus, or fix layout.tp / layout.pp)")


def work_limit_note(splits: int) -> str:
    """The stderr note when a search stopped at its work limit."""
    return f"{WORK_LIMIT_TEXT} — {fmt_count(splits)} splits were not searched"


PART_WORDS = {"states": "model states", "activations": "activations", "logits_and_buffers": "logits and buffers"}


def parts_in_words(parts: dict) -> dict[str, float]:
    """A peak's parts (model/breakdown.py ``Part``) by their names in words."""
    return {PART_WORDS[p.value]: v for p, v in parts.items()}
