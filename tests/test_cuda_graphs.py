"""training.cuda_graphs: CUDA graphs' static buffers are not modelled; the documented allowance raises the upper
end of the peak's 80 % interval, where `fits` is decided (model/memory.py cuda_graph_allowance)."""

from __future__ import annotations

import pytest

from gpuplan.api import evaluate, plan_scenario
from gpuplan.catalog.intervals import point_estimates
from gpuplan.errors import GpuplanError
from gpuplan.export import export
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.graphs import cuda_graph_allowance
from gpuplan.trace.compare import traced_as
from tests.conftest import make

GiB = 2**30
# Megatron Bridge docs, 'CUDA Graphs' (constants.json cuda_graph_allowance_bytes): ~0-2 GB per layer or module,
# 10 GB+ with pipeline stages, a large MoE, or the whole iteration graphed (GiB taken for GB)
LAYER, LARGE = 2 * GiB, 10 * GiB
# Llama-3.1-8B on 8 H100, ZeRO-3, full recompute, seq 3000, micro-batch 5: its upper end (77.05 GiB) is 2.6 GiB
# under the 79.65 GiB usable — room for the per-layer allowance, not for the whole-iteration one
EDGE = {"training": {"seq_len": 3000}, "layout": {"zero": 3, "micro_batch": 5, "recompute": "full"}}


def _mem(graphs: str, model: str = "llama-3.1-8b", gpus: int = 8, **sections: dict) -> dict:
    training = {**sections.get("training", {}), "cuda_graphs": graphs}
    sc = make(model, "h100-sxm", gpus, training=training, layout=sections.get("layout", {}))
    return evaluate(sc).to_json()["memory"]


@pytest.mark.parametrize(("key", "value", "read"), [
    ("enable_cuda_graph", True, "layer"),             # NeMo / Megatron-Core switch
    ("external_cuda_graph", True, "layer"),           # Megatron-LM: Transformer Engine captures per layer
    ("cuda_graph_impl", "transformer_engine", "layer"),
    ("cuda_graph_impl", "local", "layer"),
    ("cuda_graph_impl", "full_iteration", "full"),
    ("cuda_graph_scope", "full_iteration", "full"),   # the older Megatron flag
    ("cuda_graph_impl", "none", "none"),
    ("cuda_graphs", False, "none"),
])
def test_the_stacks_switches_are_read(key, value, read):
    sc = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                         "training": {key: value}})
    assert sc.training.cuda_graphs == read


def test_an_unknown_value_is_one_clear_error():
    with pytest.raises(GpuplanError, match="training.cuda_graphs must be none, layer .* or full"):
        make(training={"cuda_graphs": "sometimes"})


def test_the_point_estimate_is_unchanged_and_the_upper_end_carries_the_allowance():
    off, on = _mem("none", **EDGE), _mem("layer", **EDGE)
    assert on["total"] == off["total"] and on["interval"]["total"]["p10"] == off["interval"]["total"]["p10"]
    assert on["interval"]["total"]["p90"] - off["interval"]["total"]["p90"] == pytest.approx(LAYER, abs=1)
    assert on["cuda_graphs_allowance"] == LAYER and "cuda_graphs_allowance" not in off


@pytest.mark.parametrize(("graphs", "model", "layout", "allowance"), [
    ("layer", "llama-3.1-8b", {"zero": 3}, LAYER),
    ("full", "llama-3.1-8b", {"zero": 3}, LARGE),             # the whole iteration graphed
    ("layer", "llama-3.1-8b", {"pp": 2, "zero": 1}, LARGE),   # pipeline stages
    ("layer", "mixtral-8x7b", {"zero": 3}, LARGE),            # an MoE model
])
def test_the_allowance_by_scope(graphs, model, layout, allowance):
    assert _mem(graphs, model, layout=layout)["cuda_graphs_allowance"] == allowance


def test_fits_is_decided_with_the_allowance():
    off, layer, full = _mem("none", **EDGE), _mem("layer", **EDGE), _mem("full", **EDGE)
    # full recompute on native segments (CUDA graphs leave expandable segments off): the upper end 77.05 GiB
    assert off["usable"] - off["interval"]["total"]["p90"] == pytest.approx(2.60 * GiB, abs=0.01 * GiB)
    assert off["fits"] and layer["fits"]
    # 77.05 + 10 GiB is over the 79.65 usable: not `fits`, yet TIGHT (the low end fits: runs like it ran)
    assert not full["fits"] and full["tight"]


def test_no_allowance_inside_point_estimates():
    sc = make(training={"cuda_graphs": "full"})
    with point_estimates():
        assert cuda_graph_allowance(sc.model, sc.training, 1) == 0.0
    assert cuda_graph_allowance(sc.model, sc.training, 1) == LARGE


def test_the_planner_keeps_only_layouts_whose_upper_end_with_the_allowance_fits():
    # 8 H100 at seq 4096: the plan's candidates, evaluated, all fit with the 10 GiB allowance at their upper end,
    # and none of them is the EDGE layout (which fits only without it)
    sc = make("llama-3.1-8b", "h100-sxm", 8, training={"seq_len": 4096, "cuda_graphs": "full"})
    p = plan_scenario(sc)
    assert p.candidates and not p.result.tight
    for c in p.to_json()["candidates"]:
        m = c["memory"]
        assert m["fits"] and m["interval"]["total"]["p90"] <= m["usable"]
        assert m["cuda_graphs_allowance"] == LARGE


def test_trace_profile_and_export_say_what_they_do_not_carry():
    sc = make(training={"cuda_graphs": "layer"})
    with pytest.raises(GpuplanError, match="without CUDA graphs: set training.cuda_graphs: none"):
        traced_as(sc)
    est = evaluate(sc).to_json()
    ex = export(est, "torchrun")
    assert any("training.cuda_graphs (layer) is not written" in n for n in ex.notes)
    assert any("graphs' static buffers are not modelled" in n for n in est["notes"])
