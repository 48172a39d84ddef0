"""The framework profiles (catalog/frameworks.json): one per training.framework, every stated fact
cited, and the cannot_run rules evaluated by ``refusals``."""

from __future__ import annotations

import pytest
from conftest import make

from gpuplan.catalog import load_json
from gpuplan.catalog.frameworks import (
    KERNELS,
    SECTIONS,
    Fact,
    frameworks,
    get_framework,
    refusals,
    refused_rules,
)
from gpuplan.errors import GpuplanError
from gpuplan.spec import FRAMEWORKS, ZERO3_GATHERS, Layout, Training

# a fully specified layout / training job, as the rest of gpuplan passes them around
LAYOUT = Layout().values()
TRAINING = {"precision": "bf16", "method": "full", "compile": False, "optimizer": "adamw"}


def _layout(**kw):
    return {**LAYOUT, **kw}


def _training(**kw):
    return {**TRAINING, **kw}


def test_every_framework_has_a_profile():
    assert [p.name for p in frameworks()] == list(FRAMEWORKS)
    for name in FRAMEWORKS:
        assert get_framework(name).name == name


def test_file_names_only_known_frameworks():
    assert set(load_json("frameworks.json")["frameworks"]) == set(FRAMEWORKS)


def test_unknown_framework_is_refused_with_the_choices():
    with pytest.raises(GpuplanError, match="torchtitan"):
        get_framework("nemo-classic")


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_stated_fact_is_cited(name):
    profile = get_framework(name)
    for path, fact in profile.facts():
        assert isinstance(fact, Fact), path
        if fact.value is not None:
            assert fact.source and fact.source.strip(), f"{name}.{path} has a value but no source"
        else:
            assert fact.note, f"{name}.{path} is null without a note saying why"
    for rule in profile.cannot_run:
        assert rule.source.strip() and rule.why.strip() and rule.rule.strip()
        assert "\n" not in rule.why, "a refusal is one line"


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_profile_has_the_standard_keys(name):
    profile = get_framework(name)
    assert set(KERNELS) <= set(profile.fused_kernels)
    for section, keys in SECTIONS.items():
        assert set(keys) <= set(getattr(profile, section)), section
    gather = profile.zero3_gather.value
    assert gather is None or gather in ZERO3_GATHERS


def test_profiles_are_read_only():
    profile = get_framework("deepspeed")
    with pytest.raises(TypeError):
        profile.defaults["zero"] = None  # type: ignore[index]
    with pytest.raises(AttributeError):
        profile.name = "other"  # type: ignore[misc]


def test_generic_refuses_nothing_but_qlora_tensor_parallelism():
    generic = get_framework("generic")
    assert [r.rule for r in generic.cannot_run] == ["qlora-no-tensor-parallel"]
    worst = _layout(pp=8, zero=3, tp=8, cp=4, tp_overlap=True, offload="params", pp_schedule="zero-bubble")
    for method in ("full", "lora"):
        assert refusals(generic, worst, _training(method=method, precision="fp16")) == []
    # QLoRA's 4-bit weights shard along data parallelism only (FSDP-QLoRA, ZeRO-3): tp or cp > 1 refused, pp kept
    # (Hugging Face's device_map splits the layers over GPUs)
    qlora = _training(method="qlora")
    assert refusals(generic, _layout(pp=4, dp=2, zero=3), qlora) == []
    for lay in (_layout(tp=2, dp=4, zero=3), _layout(cp=2, dp=4, zero=3)):
        assert [r.rule for r in refused_rules(generic, lay, qlora)] == ["qlora-no-tensor-parallel"]


def test_qlora_tensor_parallelism_refused_by_the_stacks_that_run_qlora():
    lay, qlora = _layout(tp=2, dp=4, zero=3), _training(method="qlora")
    for name in ("generic", "pytorch-fsdp", "deepspeed"):
        assert "qlora-no-tensor-parallel" in [r.rule for r in refused_rules(get_framework(name), lay, qlora)]
        assert refusals(get_framework(name), _layout(dp=8, zero=3), qlora) == []


def test_deepspeed_pipeline_refuses_zero2_and_zero3_but_not_zero1():
    ds = get_framework("deepspeed")
    for zero in (2, 3):
        reasons = refusals(ds, _layout(pp=2, zero=zero), TRAINING)
        assert any("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in r for r in reasons)
    assert refusals(ds, _layout(pp=2, zero=1), TRAINING) == []
    assert refusals(ds, _layout(pp=1, zero=3), TRAINING) == []


def test_deepspeed_offload_needs_the_right_zero_stage():
    ds = get_framework("deepspeed")
    assert [r.rule for r in refused_rules(ds, _layout(zero=2, offload="params"), TRAINING)] == [
        "param-offload-needs-zero3"]
    assert refusals(ds, _layout(zero=3, offload="params"), TRAINING) == []
    assert refusals(ds, _layout(zero=1, offload="optimizer"), TRAINING) == []
    assert refusals(ds, _layout(zero=0, offload="optimizer"), TRAINING)


def test_qlora_with_tensor_parallelism_refused_where_sourced():
    tune = get_framework("torchtune")
    lay = _layout(tp=2, zero=3, dp=4)
    pure = _training(precision="bf16-pure")
    for method in ("lora", "qlora"):
        assert any("Tensor parallelism is not supported" in r for r in refusals(tune, lay, {**pure, "method": method}))
    assert refusals(tune, lay, pure) == []  # full fine-tuning has a TP plan
    assert refusals(tune, _layout(tp=1, zero=3, dp=8), {**pure, "method": "qlora"}) == []


def test_torchtune_is_pure_bf16_fsdp_without_pipelines():
    tune = get_framework("torchtune")
    ok = _layout(zero=3, dp=8)
    assert refusals(tune, ok, _training(precision="bf16-pure")) == []
    assert refusals(tune, ok, _training(precision="fp16"))
    assert refusals(tune, ok, _training(precision="bf16"))
    assert refusals(tune, _layout(zero=3, dp=4, pp=2), _training(precision="bf16-pure"))
    assert refusals(tune, _layout(zero=0, dp=8), _training(precision="bf16-pure"))


def test_accelerate_fsdp_has_no_pipeline_stages():
    fsdp = get_framework("pytorch-fsdp")
    assert any("pipeline" in r for r in refusals(fsdp, _layout(pp=2, zero=3), TRAINING))
    assert refusals(fsdp, _layout(pp=1, zero=3, tp=2, dp=4), TRAINING) == []
    assert refusals(fsdp, _layout(zero=0, dp=4, tp=2), TRAINING)  # TP on pure DDP
    assert refusals(fsdp, _layout(zero=1), TRAINING)


def test_torchtitan_rules():
    titan = get_framework("torchtitan")
    assert refusals(titan, _layout(zero=3, dp=2, tp=4, pp=2, cp=2), TRAINING) == []
    assert refusals(titan, _layout(zero=3, tp=4, tp_overlap=True), _training(compile=True)) == []
    assert refusals(titan, _layout(zero=3, tp=4, tp_overlap=True), _training(compile=False))
    assert refusals(titan, _layout(zero=0, dp=8, tp=2), TRAINING)  # DDP is 1-D only
    assert refusals(titan, _layout(zero=0, dp=8), TRAINING) == []
    assert refusals(titan, _layout(zero=1), TRAINING)


def test_megatron_rules():
    old, core = get_framework("megatron-lm"), get_framework("megatron-core")
    assert refusals(old, _layout(tp=8, pp=4, zero=0), _training(precision="fp16")) == []
    assert refusals(old, _layout(cp=2), TRAINING)
    assert refusals(old, _layout(pp=4, zero=2), TRAINING)
    assert refusals(old, _layout(pp=4, pp_schedule="zero-bubble"), TRAINING)
    assert refusals(core, _layout(tp=8, sequence_parallel=True, tp_overlap=True), TRAINING) == []
    assert refusals(core, _layout(tp=8, sequence_parallel=False, tp_overlap=True), TRAINING)


def test_absent_fields_never_meet_a_condition():
    ds = get_framework("deepspeed")
    assert refusals(ds, {"pp": 4}, {}) == []  # zero absent
    assert refusals(ds, {"pp": 4, "zero": 3}, {}) != []
    tune = get_framework("torchtune")
    assert refusals(tune, {"tp": 2}, {}) == []  # method absent
    assert refusals(tune, {"tp": 2}, {"method": "qlora"}) != []
    assert refusals(get_framework("megatron-core"), {"tp_overlap": True, "sequence_parallel": None}, {}) == []


def test_booleans_are_not_numbers():
    titan = get_framework("torchtitan")
    # zero=True is not zero 1; compile=0 is not compile False
    assert refusals(titan, {"zero": True}, {}) == []
    assert refusals(titan, {"tp_overlap": True}, {"compile": 0}) == []


def test_training_dataclass_fields_feed_refusals():
    tr = Training(framework="torchtune", method="qlora", precision="bf16-pure")
    fields = {f: getattr(tr, f) for f in ("method", "precision", "compile", "framework")}
    lay = Layout(dp=2, tp=2, zero=3, sequence_parallel=True).values()
    assert refusals(get_framework(tr.framework), lay, fields)


def test_documented_defaults_used_by_the_brief():
    assert get_framework("megatron-core").defaults["recompute"].value == "none"
    assert get_framework("torchtitan").defaults["recompute"].value == "selective-op"
    assert get_framework("deepspeed").defaults["zero"].value == 0
    assert get_framework("deepspeed").dp_overlap["reduce_bucket_elements"].value == 500_000_000
    assert get_framework("torchtitan").fsdp_under_pp.value is False
    assert get_framework("torchtitan").zero3_gather.value == "layer"
    assert get_framework("deepspeed").zero3_gather.value == "module"
    assert get_framework("megatron-core").fp8_recipe["default"].value == "delayed"
    assert get_framework("torchtitan").fp8_recipe["default"].value == "tensorwise"


def _pipelined(framework: str, schedule: str) -> object:
    from gpuplan.api import evaluate

    return evaluate({"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "gpus": 64},
                     "training": {"seq_len": 4096, "global_batch": 64, "framework": framework},
                     "layout": {"tp": 8, "pp": 4, "dp": 2, "zero": 1, "micro_batch": 1, "pp_schedule": schedule,
                                "recompute": "full"}}).time.step


@pytest.mark.parametrize("schedule", ["interleaved", "1f1b"])
def test_megatron_core_overlaps_the_interleaved_pipelines_send_recv(schedule):
    # Megatron-LM's training CLI: overlap_p2p_comm on unless --no-overlap-p2p-communication, off outside the
    # interleaved schedule (frameworks.json pp_comm_overlap); the 2021-22 megatron-lm profile: off by default
    assert get_framework("megatron-core").pp_comm_overlap.value is True
    assert get_framework("megatron-lm").pp_comm_overlap.value is False
    core, lm = _pipelined("megatron-core", schedule), _pipelined("megatron-lm", schedule)
    assert core.comm_detail["pp"] > 0 and lm.comm_detail["pp"] > 0
    others = core.comm_exposed_s - core.comm_detail["tp_exposed"] - core.comm_detail["dp_exposed"]
    if schedule == "interleaved":  # each chunk's send/recv hides under the next chunk's compute here
        assert others == pytest.approx(0.0, abs=1e-12)
    else:
        assert others == pytest.approx(core.comm_detail["pp"], rel=1e-9)


def _tp_run(framework: str, micro_batch: int, tp_overlap: bool = False) -> object:
    from gpuplan.api import evaluate

    return evaluate({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8},
                     "training": {"seq_len": 4096, "global_batch": 2 * micro_batch, "framework": framework,
                                  "compile": framework == "torchtitan" and tp_overlap},
                     "layout": {"tp": 4, "dp": 2, "zero": 2, "micro_batch": micro_batch, "recompute": "full",
                                "sequence_parallel": True, "tp_overlap": tp_overlap}}).time.step


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_torchtitan_sequence_parallel_collectives_copy_their_layout(micro_batch):
    # torchtitan shards [batch, sequence, hidden] on the sequence (apply_tp: Shard(1)); PyTorch's functional
    # collectives then chunk + cat: the reduce-scatter's whole input before it, the all-gather's whole output after
    # it (a view where the local batch is 1). Megatron's [sequence, batch, hidden] gathers and scatters in place
    from gpuplan.catalog.framework_comm import sp_layout_copies
    from gpuplan.catalog.hardware import make_hardware
    from gpuplan.model.compute import device, streamed_s

    assert sp_layout_copies("torchtitan") and not sp_layout_copies("megatron-core")
    titan, core = _tp_run("torchtitan", micro_batch), _tp_run("megatron-core", micro_batch)
    act = micro_batch * 4096 * 4096 * 2  # one micro-batch's [b, s, h] in bf16
    copied = act * (1 + (micro_batch > 1))
    dev = device(make_hardware("h100-sxm", gpus=8), Training(framework="torchtitan"))
    per_collective_pair = streamed_s(2 * copied, 1 + (micro_batch > 1), dev)
    sublayers, passes = 2 * 32, 3  # attention and MLP of 32 blocks; forward, backward, recomputed forward
    assert titan.comm_detail["tp"] - core.comm_detail["tp"] == pytest.approx(sublayers * passes * per_collective_pair,
                                                                            rel=1e-9)
    # async TP's fused matmuls consume the shards where they land: no copy
    overlapped = _tp_run("torchtitan", micro_batch, tp_overlap=True)
    assert overlapped.comm_detail["tp"] == pytest.approx(core.comm_detail["tp"], rel=1e-9)


def test_deepspeed_zero3_gathers_module_by_module_unless_told():
    # DeepSpeed's ZeRO-3 fetches parameters through per-module hooks (frameworks.json zero3_gather: module); FSDP
    # wraps and gathers whole blocks. Named, the framework's own gathers complete the layout, listed under assumed
    from gpuplan.api import evaluate, plan

    base = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 64},
            "training": {"seq_len": 4096, "global_batch": 64, "framework": "deepspeed"},
            "layout": {"zero": 3, "micro_batch": 1}}
    est = evaluate(base)
    assert est.layout.zero3_gather == "module"
    assumed = {a["field"]: a for a in est.to_json()["assumed"]}
    assert assumed["layout.zero3_gather"]["value"] == "module" and assumed["layout.zero3_gather"]["by_rule"]
    told = evaluate({**base, "layout": {**base["layout"], "zero3_gather": "layer"}})
    assert told.layout.zero3_gather == "layer"
    # more calls, each paying the ring's latency over 64 ranks: more data-parallel time than per block
    assert est.time.step.comm_detail["dp_total"] > told.time.step.comm_detail["dp_total"]
    titan = evaluate({**base, "training": {**base["training"], "framework": "torchtitan"}})
    assert titan.layout.zero3_gather == "layer"
    # the planner keeps the same gathers: its best layout is what evaluate completes
    best = plan({k: v for k, v in base.items() if k != "layout"}, max_gpus=64).best
    assert best is not None and best.layout.zero3_gather == "module"


def test_a_multi_query_model_at_tp_runs_on_megatron_lm_forks_not_on_megatron_core():
    # StarCoder (1 key/value head) trained on BigCode's Megatron-LM at tp 4, its key/value projection a plain linear on
    # every tensor-parallel rank (bigcode-project/Megatron-LM megatron/model/transformer.py ParallelAttention,
    # 'multiquery': key_value = get_linear_layer): evaluated, not refused; Megatron-Core raises 'num_query_groups must
    # be a multiple of tensor_model_parallel_size'
    from gpuplan.api import evaluate_scenario
    from gpuplan.io.scenario import parse_scenario

    def sc(fw):
        return parse_scenario({"model": "starcoder", "hardware": {"gpu": "a100-80gb-sxm", "gpus": 512},
                               "training": {"seq_len": 8192, "global_batch": 512, "framework": fw},
                               "layout": {"tp": 4, "pp": 4, "micro_batch": 1}})

    assert evaluate_scenario(sc("megatron-lm")).layout.tp == 4
    with pytest.raises(GpuplanError, match="splits the 1 key/value heads"):
        evaluate_scenario(sc("megatron-core"))
    # grouped-query heads past the tp are split by whole heads there too (Megatron-DeepSpeed divides them)
    gqa = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 16},
                          "training": {"seq_len": 4096, "global_batch": 16, "framework": "megatron-lm"},
                          "layout": {"tp": 16, "micro_batch": 1}})
    with pytest.raises(GpuplanError, match="splits the 8 key/value heads"):
        evaluate_scenario(gqa)


@pytest.mark.parametrize(("framework", "gpu", "given", "expected"), [
    # Megatron-LM of 2020-22 materializes the scores (frameworks.json attention_kernel eager); on V100 and T4 no
    # FlashAttention runs (sm80), on A100 a run of 2023 on used it: the input says which, else the fused kernel
    ("megatron-lm", "v100-32gb", None, "eager"),
    ("gpt-neox", "t4", None, "eager"),  # a stack read as the megatron-lm profile
    ("megatron-lm", "a100-80gb-sxm", None, "flash"),
    ("megatron-lm", "a100-80gb-sxm", "eager", "eager"),
    # Hopper systems came with the later code (Megatron-Core, --use-flash-attn): a fused kernel
    ("megatron-lm", "h100-sxm", None, "flash"),
    ("megatron-lm", "a100-80gb-sxm", "flash", "flash"),  # a given attention stands
    ("megatron-core", "a100-80gb-sxm", None, "flash"),
    ("deepspeed", "a100-80gb-sxm", None, "flash"),
])
def test_an_open_attention_is_what_the_framework_runs(framework, gpu, given, expected):
    training = {"framework": framework, "seq_len": 2048, **({"attention": given} if given else {})}
    sc = make("llama-3.1-8b", gpu, 8, training=training)
    assert sc.training.attention == expected
    read = [r for r in sc.read_as if r[0] == "training.attention"]
    assert bool(read) == (given is None and expected == "eager")


@pytest.mark.parametrize(("gpu", "expected"), [("a100-80gb-sxm", "megatron-lm"), ("v100-32gb", "megatron-lm"),
                                               ("h100-sxm", "megatron-core"), ("b200", "megatron-core"),
                                               ("mi300x", "megatron-core"), ("l40s", "megatron-core")])
def test_megatron_lm_on_a_gpu_after_its_era_is_the_later_code(gpu, expected):
    # the megatron-lm profile is Megatron-LM's code of 2020-22; a run on Hopper, Ada, Blackwell or ROCm GPUs is the
    # same repository's later code, Megatron-Core (frameworks.json successor)
    sc = make("llama-3.1-8b", gpu, 8, training={"framework": "megatron-lm"})
    assert sc.training.framework == expected
    moved = [r for r in sc.read_as if r[0] == "training.framework"]
    assert bool(moved) == (expected == "megatron-core")
    # a stack read as the profile (GPT-NeoX) is its own code: it keeps the profile
    assert make("llama-3.1-8b", gpu, 8, training={"framework": "gpt-neox"}).training.framework == "megatron-lm"
