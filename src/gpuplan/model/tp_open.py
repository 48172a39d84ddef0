"""An open ``layout.tp`` where the layout gives sequence parallelism (or async tensor parallelism) on.

Sequence parallelism splits over the tensor-parallel ranks the activations tensor parallelism leaves whole
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2): it needs tp > 1. A run described with it but without its
tensor-parallel degree ("model and sequence parallelism", LLaMA, Touvron et al. 2023, Sec. 2.4) ran some tp > 1 its
source does not state, and a run sizes that degree for throughput within memory, tensor parallelism inside a node
(Narayanan et al. 2021, arXiv:2104.04473, Takeaway #1). So it is read as the fastest power of two from 2 up to the
GPUs of a node that divides the GPUs (over pp × cp), the attention and key-value heads and the sequence, each degree
read as ``evaluate`` reads a layout (its open ZeRO stage, recomputation and micro-batch); where none fits, the smallest.
A tie goes to the smaller degree. The answer lists it under ``assumed``; a given tp is never changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplan.errors import GpuplanError
from gpuplan.model.completion import node_tp_degrees
from gpuplan.model.memory import MemoryBreakdown
from gpuplan.spec import Layout
from gpuplan.spec.scenario import Scenario

# (scenario, layout, layout rules, memory) of the scenario read with these overrides: estimate._settled
Read = tuple[Scenario, Layout, tuple[tuple[str, str], ...], MemoryBreakdown]
Settle = Callable[[Scenario, dict[str, Any]], Read]


def _sp_open_tp(sc: Scenario, overrides: dict[str, Any]) -> bool:
    given = {**sc.layout, **overrides}
    return "tp" not in given and given.get("sequence_parallel") is True


def tp_degrees(sc: Scenario, overrides: dict[str, Any]) -> list[int]:
    """The tensor-parallel degrees to read an open tp at: none unless the layout gives sequence parallelism (or
    tp_overlap) on and leaves tp open."""
    given = {**sc.layout, **overrides}
    if "tp" in given or not (given.get("sequence_parallel") is True or given.get("tp_overlap") is True):
        return []
    pp, cp, dp = given.get("pp", 1), given.get("cp", 1), given.get("dp")
    if not isinstance(pp, int) or not isinstance(cp, int) or pp < 1 or cp < 1 or sc.hardware.gpus % (pp * cp):
        return []
    rest = sc.hardware.gpus // (pp * cp)
    return [tp for tp in node_tp_degrees(sc, rest)
            if sc.training.seq_len % tp == 0 and (not isinstance(dp, int) or dp * tp == rest)]


def open_tp(sc: Scenario, overrides: dict[str, Any], settle: Settle, step_s: Callable[[Scenario, Layout], float]
            ) -> tuple[tuple[Scenario, Layout, tuple[tuple[str, str], ...], MemoryBreakdown], str] | None:
    """``settle``'s reading of the scenario at the tensor-parallel degree the run is read at, and the rule — None
    where tp is not open under sequence parallelism or no degree is possible (the layout's own check then says why)."""
    degrees = tp_degrees(sc, overrides)
    if not degrees and sc.hardware.gpus == 1 and _sp_open_tp(sc, overrides):
        raise GpuplanError("layout.sequence_parallel needs tp > 1, and the run is on one GPU"
                           + ("" if "hardware.gpus" in sc.given else " (hardware.gpus not given)")
                           + ": give hardware.gpus and tp, or drop sequence_parallel")
    if not degrees:
        return None
    best: tuple[float, int, Any] | None = None
    reads: dict[int, Any] = {}
    for tp in degrees:
        try:
            read = reads[tp] = settle(sc, {**overrides, "tp": tp})
        except GpuplanError:  # a degree the framework or the layout refuses is not one the run ran
            continue
        if not read[3].fits:
            continue
        s = step_s(read[0], read[1])
        if best is None or s < best[0]:
            best = (s, tp, read)
    # none fits: the smallest degree (refused: read again, its refusal is the answer)
    tp = best[1] if best is not None else degrees[0]
    read = best[2] if best is not None else reads.get(tp) or settle(sc, {**overrides, "tp": tp})
    how = (f"the fastest of {', '.join(map(str, degrees))} at which the layout fits" if best is not None else
           f"the smallest of {', '.join(map(str, degrees))}: none of them fits")
    rule = (f"not given, with sequence parallelism on (it needs tp > 1): {tp}, {how} — a run sizes it for throughput "
            "within memory, inside a node (Narayanan et al. 2021, Takeaway #1; model/tp_open.py); give layout.tp to "
            "change it")
    return read, rule
