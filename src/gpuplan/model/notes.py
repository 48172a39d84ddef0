"""What an estimate does not check but the user should know: typed codes (report/words.py says them)."""

from __future__ import annotations

from enum import Enum

from gpuplan.model.allocator import fragile
from gpuplan.model.kept import amp_of
from gpuplan.model.memory import MemoryBreakdown
from gpuplan.spec import Layout
from gpuplan.spec.defaults import NOT_MODELLED_MARGIN, unmodelled_savers
from gpuplan.spec.hardware import tp_domain
from gpuplan.spec.scenario import Scenario


class Note(Enum):
    """What an estimate does not check but the user should know (report/words.py says it)."""

    BEYOND_POSITIONS = "beyond_positions"  # seq_len beyond the positions the model was trained on
    NEAR_CAPACITY = "near_capacity"        # within NOT_MODELLED_MARGIN over the capacity
    FP8_DOES_NOT_PAY = "fp8_does_not_pay"  # a generic fp8 run's linears estimated in bf16
    MUON = "muon"                          # how the Muon optimizer is costed (model/muon.py)
    CUDA_GRAPHS = "cuda_graphs"            # training.cuda_graphs: an allowance, not a modelled part
    EXPERT_FOLDING = "expert_folding"      # ep over tp × cp × dp, expert tensor parallel 1 (Layout.expert_tp)
    NATIVE_SEGMENTS = "native_segments"    # recompute/offload/LoRA on the allocator's native segments (allocator.py)
    HOST_UNCHECKED = "host_unchecked"      # state offloaded to a host memory no catalogue node gives: not checked
    PAGED = "paged"                        # a paged optimizer's states: unified memory, outside the GPU's peak
    TP_OVER_NETWORK = "tp_over_network"    # a tensor-parallel group wider than the scale-up domain
    AMP_WEIGHTS = "amp_weights"            # a mixed-precision full fine-tune as autocast over fp32 weights
    EXTRA_MODULES = "extra_modules"        # parameters outside the main step (a multi-token-prediction module)
    PER_DIE = "per_die"                    # a two-die board counted per die as the framework sees it (MI250X GCDs)
    INT8_BASE = "int8_base"                # lora-int8: how bitsandbytes' LLM.int8 linears are costed (compute.py)
    DORA = "dora"                          # DoRA: PEFT's weight rebuild and rescaled output (model/dora.py)
    PREFERENCE = "preference"              # a preference run: sequences in pairs, a reference model's forward


def estimate_notes(sc: Scenario, mem: MemoryBreakdown, lay: Layout) -> tuple[Note, ...]:
    """The notes of an estimate of ``lay`` whose memory is ``mem``."""
    m, seq = sc.model, sc.training.seq_len
    out = []
    if m.max_positions and seq > m.max_positions:
        out.append(Note.BEYOND_POSITIONS)
    if not mem.fits and mem.capacity < mem.total <= mem.capacity * (1 + NOT_MODELLED_MARGIN) \
            and unmodelled_savers(sc.training.precision, m.qk_rope_dim > 0, lay.pp):  # a saver it could use
        out.append(Note.NEAR_CAPACITY)
    flags = ((sc.training.optimizer == "muon", Note.MUON), (sc.training.cuda_graphs != "none", Note.CUDA_GRAPHS),
             (lay.folded_etp is not None, Note.EXPERT_FOLDING),
             (mem.cpu_offload_per_node > 0 and mem.host_memory is None, Note.HOST_UNCHECKED),
             (fragile(sc.training, lay.recompute, lay.offload), Note.NATIVE_SEGMENTS),
             (sc.training.optimizer_impl == "paged" and lay.offload == "none", Note.PAGED),
             (lay.tp > tp_domain(sc.hardware), Note.TP_OVER_NETWORK), (amp_of(sc.training, lay), Note.AMP_WEIGHTS),
             (m.extra_params > m.frozen_params and sc.training.method == "full", Note.EXTRA_MODULES),
             ("(one GCD)" in sc.hardware.gpu.name, Note.PER_DIE), (sc.training.method == "lora-int8", Note.INT8_BASE),
             (sc.training.dora, Note.DORA), (sc.training.preference is not None, Note.PREFERENCE))
    return tuple(out) + tuple(note for on, note in flags if on)
