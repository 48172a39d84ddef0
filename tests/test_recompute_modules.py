"""Megatron-Core's selective recomputation by module (layout.recompute_modules; model/recompute_modules.py): what
each module stops keeping, in exact bytes of the activation terms, what it runs again, and the inputs around it."""

from __future__ import annotations

import pytest
from conftest import make
from test_export import megatron_parser

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.api import plan_scenario
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.export import megatron_args
from gpuplan.io.scenario import parse_scenario
from gpuplan.model.activations import ActShape, layer_bytes, layer_terms, module_working_set
from gpuplan.model.ep_comm import A2A_PER_MOE_LAYER, A2A_PER_RECOMPUTED_MOE_LAYER
from gpuplan.model.flops import flops_per_token
from gpuplan.spec import Layout

S, B = 4096, 1


def _x(**kw: object) -> ActShape:
    base = dict(s=S, b=B, t=1, sp=False, dropout=False, flash=True, elem=2, linear_in=2)
    return ActShape(**{**base, **kw})  # type: ignore[arg-type]


def test_the_default_list_is_plain_selective():
    # Megatron-Core's default recompute_modules is [core_attn]: the mode Korthikanti's selective recompute names
    assert Layout(recompute="selective", recompute_modules=("core_attn",)).recompute_mode == "selective"
    assert Layout(recompute="selective").recompute_mode == "selective"
    lay = Layout(recompute="selective", recompute_modules=("moe_act", "layernorm"))
    assert lay.recompute_mode == "selective:layernorm+moe_act"


def test_layernorm_drops_the_norm_outputs_the_linears_keep():
    m = load_model("llama-3.1-8b")
    h = m.hidden
    # the qkv and MLP-up linears' inputs, 2 B each per hidden element: 2·2·s·b·h
    assert layer_bytes(m, 0, _x(), "none") - layer_bytes(m, 0, _x(), "selective:layernorm") == 2 * 2 * S * B * h
    # rebuilt one norm at a time: one norm output alive again in backward
    assert module_working_set(m, 0, _x(), "selective:layernorm") == 2 * S * B * h


def test_mla_up_proj_drops_the_up_projected_heads():
    m = load_model("deepseek-v3")
    kind = next(i for i, lg in enumerate(m.kinds) if lg.moe)
    a, d, dv = m.n_heads, m.head_dim, m.v_head_dim
    # DeepSeek-V3: 128 heads, q and k of 192 (128 nope + 64 rope), v of 128 — 2 B each
    assert (a, d, dv) == (128, 192, 128)
    gone = layer_bytes(m, kind, _x(), "none") - layer_bytes(m, kind, _x(), "selective:mla_up_proj")
    assert gone == 2 * S * B * a * (d + d + dv)


def test_moe_act_keeps_the_experts_up_and_gate_outputs():
    m = load_model("deepseek-v3")
    kind = next(i for i, lg in enumerate(m.kinds) if lg.moe)
    terms = layer_terms(m, kind, _x())
    k, f = m.top_k, m.moe_ffn
    # eager SwiGLU keeps gate, up, the activation's output and the down projection's input: 8 B per intermediate
    # element; with the activation recomputed the gate and up outputs only, 4 B
    assert terms["expert_mlp"] == 8 * S * B * k * f
    gone = layer_bytes(m, kind, _x(), "none") - layer_bytes(m, kind, _x(), "selective:moe_act")
    assert gone == 4 * S * B * k * f


def test_the_moe_module_drops_the_whole_layer_and_rebuilds_it():
    m = load_model("mixtral-8x7b")
    terms = layer_terms(m, 0, _x())
    moe = sum(terms[n] for n in ("mlp_input", "router", "expert_dispatch", "expert_mlp"))
    assert layer_bytes(m, 0, _x(), "none") - layer_bytes(m, 0, _x(), "selective:moe") == moe
    assert module_working_set(m, 0, _x(), "selective:moe") == moe


def test_modules_overlapping_on_a_term_drop_it_once():
    m = load_model("llama-3.1-8b")
    h, f = m.hidden, m.ffn
    both = layer_bytes(m, 0, _x(), "none") - layer_bytes(m, 0, _x(), "selective:layernorm+mlp")
    # layernorm: qkv and MLP inputs; mlp: the MLP input (once) and its 8 B per intermediate element
    assert both == 2 * 2 * S * B * h + 8 * S * B * f


def test_recomputed_matmuls_count_in_the_hardware_flops():
    m = load_model("llama-3.1-8b")
    base = flops_per_token(m, S, "none")
    mlp = flops_per_token(m, S, "selective:mlp")
    # the dense MLP's forward again: 3 matrices of h×f, 2 FLOPs per multiply-add, every layer
    assert mlp.hardware - base.hardware == pytest.approx(m.n_layers * 2 * 3 * m.hidden * m.ffn, rel=1e-12)
    assert mlp.model == base.model


def test_module_recompute_costs_time_and_saves_memory_end_to_end():
    def run(modules: list[str] | None) -> dict:
        lay = {"tp": 2, "recompute": "selective", **({"recompute_modules": modules} if modules else {})}
        return evaluate(make(gpus=8, training={"seq_len": 8192, "global_batch": 64, "framework": "megatron-core"},
                             layout=lay)).to_json()
    plain, mlp = run(None), run(["mlp"])
    assert mlp["memory"]["activations"] < plain["memory"]["activations"]
    assert mlp["time"]["step_s"] > plain["time"]["step_s"]
    assert mlp["time"]["hfu"] > mlp["time"]["mfu"]
    assert list(mlp["scenario"]["layout"]["recompute_modules"]) == ["mlp"]


def test_the_moe_module_runs_the_expert_exchange_again():
    def run(modules: list[str]) -> dict:
        return evaluate(make("mixtral-8x7b", gpus=16, training={"global_batch": 64, "framework": "megatron-core"},
                             layout={"ep": 8, "pp": 2, "zero": 1, "recompute": "selective",
                                     "recompute_modules": modules})).to_json()
    plain, moe = run(["core_attn"]), run(["core_attn", "moe"])
    ratio = (A2A_PER_MOE_LAYER + A2A_PER_RECOMPUTED_MOE_LAYER) / A2A_PER_MOE_LAYER
    assert moe["time"]["comm_detail"]["ep"] == pytest.approx(plain["time"]["comm_detail"]["ep"] * ratio, rel=1e-9)


@pytest.mark.parametrize(("layout", "training", "model", "needle"), [
    ({"recompute": "full", "recompute_modules": ["mlp"]}, {"framework": "megatron-core"}, "llama-3.1-8b",
     "means layout.recompute selective"),
    ({"recompute_modules": ["mla_up_proj"]}, {"framework": "megatron-core"}, "llama-3.1-8b",
     "no multi-latent attention"),
    ({"recompute_modules": ["moe_act"]}, {"framework": "megatron-core"}, "llama-3.1-8b", "has no experts"),
    ({"recompute_modules": ["attn"]}, {"framework": "megatron-core"}, "llama-3.1-8b", "is not one of core_attn"),
    ({"recompute_modules": ["mlp"]}, {"framework": "torchtitan"}, "llama-3.1-8b", "name framework: megatron-core"),
    ({"recompute_modules": 3}, {}, "llama-3.1-8b", "must be a list of module names"),
])
def test_bad_modules_are_one_clear_error(layout, training, model, needle):
    with pytest.raises(GpuplanError, match=needle):
        evaluate(make(model, gpus=8, training=training, layout=layout))


def test_megatron_words_read_and_export():
    # Megatron's command line words (nargs='*'), read into selective recomputation, written back
    sc = parse_scenario({"model": "deepseek-v3", "hardware": {"gpu": "h800", "gpus": 1024},
                         "training": {"framework": "megatron-core", "seq_len": 4096, "global_batch": 4096},
                         "layout": {"pp": 16, "ep": 64, "zero": 1,
                                    "recompute_modules": "moe_act layernorm mla_up_proj"}})
    assert sc.layout["recompute"] == "selective"
    assert sc.layout["recompute_modules"] == ("moe_act", "layernorm", "mla_up_proj")
    est = evaluate(sc).to_json()
    args, _ = megatron_args(est, sc.model)
    ns = megatron_parser().parse_args(args)
    assert ns.recompute_granularity == "selective"
    assert ns.recompute_modules == ["moe_act", "layernorm", "mla_up_proj"]


def test_plan_keeps_the_modules_on_every_layout():
    sc = make(gpus=8, training={"seq_len": 8192, "global_batch": 64, "framework": "megatron-core"},
              layout={"recompute_modules": ["layernorm", "mlp"]})
    res = plan_scenario(sc).result
    best = res.best
    assert best is not None and best.layout.recompute == "selective"
    assert best.layout.recompute_modules == ("layernorm", "mlp")


V3_H100 = {"model": "deepseek-v3", "hardware": {"gpu": "h100-sxm", "gpus": 1024},
           "training": {"seq_len": 4096, "global_batch": 8192, "framework": "megatron-core"},
           # Megatron Bridge's DeepSeek-V3 H100 performance layout (scripts/performance/configs/deepseek)
           "layout": {"tp": 2, "pp": 8, "virtual_stages": 4, "ep": 64, "etp": 1, "zero": 1}}


def test_an_open_recompute_under_megatron_core_takes_the_narrowest_module_set_that_fits():
    est = evaluate(parse_scenario(V3_H100)).to_json()
    lay = est["scenario"]["layout"]
    assert lay["recompute"] == "selective" and lay["recompute_modules"]
    assumed = {a["field"]: a for a in est["assumed"]}
    assert assumed["layout.recompute_modules"].get("by_rule")
    assert est["memory"]["fits"]
    # every narrower boundary Megatron Bridge's guidance tries first leaves the peak's upper end over the GPU
    narrower = [["moe_act"], ["layernorm", "moe_act"], ["layernorm", "moe_act", "mla_up_proj"],
                ["layernorm", "moe_act", "mla_up_proj", "mlp"]]
    chosen = list(lay["recompute_modules"])
    assert chosen not in narrower
    for mods in narrower:
        raw = {**V3_H100, "layout": {**V3_H100["layout"], "recompute_modules": mods}}
        assert not evaluate(parse_scenario(raw)).to_json()["memory"]["fits"]


def test_a_dense_model_keeps_the_modes_it_had():
    est = evaluate(make("llama-3.1-70b", gpus=8, training={"seq_len": 8192, "global_batch": 32,
                                                           "framework": "megatron-core"},
                        layout={"tp": 8, "zero": 1})).to_json()
    assert est["scenario"]["layout"]["recompute"] in ("selective", "full")
    assert not est["scenario"]["layout"]["recompute_modules"]


def test_whole_moe_recompute_refuses_expert_overlap():
    with pytest.raises(GpuplanError, match="expert-parallel overlap"):
        evaluate(make("mixtral-8x7b", gpus=16, training={"framework": "megatron-core"},
                      layout={"ep": 8, "recompute_modules": ["moe"], "ep_overlap": True}))


def test_the_planner_searches_megatron_cores_module_lists_for_a_moe_model():
    from gpuplan.search.space import recomputes

    moe = make("mixtral-8x7b", gpus=64, training={"seq_len": 4096, "global_batch": 256, "framework": "megatron-core"})
    assert recomputes(moe) == ("none", "selective:moe_act", "selective:layernorm+moe_act", "selective-op", "full")
    v3 = make("deepseek-v3", gpus=1024, training={"framework": "megatron-core"})
    assert "selective:layernorm+mla_up_proj+mlp+moe_act" in recomputes(v3)
    # another stack, or a dense model: the modes as before
    assert recomputes(make("mixtral-8x7b", gpus=64, training={"framework": "torchtitan"})) == \
        ("none", "selective-op", "full")
    assert recomputes(make(gpus=8, training={"framework": "megatron-core"})) == ("none", "selective-op", "full")
    res = plan_scenario(moe, top_k=10).result
    chosen = [c.layout for c in res.candidates if c.layout.recompute_modules]
    assert chosen and all(lay.recompute == "selective" for lay in chosen)
    # the layout a plan proposes is evaluated as itself
    for lay in chosen[:2]:
        assert evaluate(moe, lay).time.step.step_s > 0
