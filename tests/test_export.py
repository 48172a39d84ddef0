"""Exports round-trip through each target's own parser where it installs here (DeepSpeed,
accelerate, torchrun), else through a faithful copy of its names (Megatron-LM, torchtitan).
Optional packages come from the ``export`` extra; their tests skip cleanly without them."""

from __future__ import annotations

import argparse
import ast
import shlex
import tomllib

import pytest
import yaml
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.models import load_model
from gpuplan.cli import main
from gpuplan.export import TARGETS, export, megatron_args, torchrun_args
from gpuplan.io.scenario import parse_scenario

# Layouts that exercise each mapping: TP×PP with ZeRO-2 (the built-in example's split), hybrid-sharded
# ZeRO-3 with parameter offload and full recompute, plain DDP on one node, interleaved pipeline
# with context parallelism, an MoE with expert parallelism, and pure bf16.
CASES = {
    "tp4-pp4-zero2": dict(model="llama-3.1-70b", gpus=64, training={"seq_len": 8192, "global_batch": 512,
                                                                    "tokens": 1.4e12},
                          layout={"tp": 4, "pp": 4, "zero": 2, "recompute": "selective-op"}),
    "hsdp-offload": dict(model="llama-3.1-8b", gpus=64, training={"global_batch": 512},
                         layout={"tp": 1, "pp": 1, "zero": 3, "zero_group": 8, "offload": "params",
                                 "recompute": "full"}),
    "ddp": dict(model="llama-3.1-8b", gpus=8, gpu="h200", training={"global_batch": 64, "seq_len": 2048},
                layout={"tp": 1, "pp": 1, "zero": 0, "micro_batch": 2, "recompute": "full"}),
    "interleaved-cp": dict(model="llama-3.1-70b", gpus=128, training={"seq_len": 32768, "global_batch": 64},
                           layout={"tp": 8, "pp": 4, "cp": 2, "zero": 1, "pp_schedule": "interleaved",
                                   "virtual_stages": 5, "recompute": "selective"}),
    "moe-ep": dict(model="mixtral-8x7b", gpus=32, training={"global_batch": 256},
                   layout={"tp": 2, "pp": 2, "ep": 8, "zero": 1, "recompute": "full", "offload": "optimizer"}),
    "bf16-pure": dict(model="llama-3.1-8b", gpus=16, training={"global_batch": 128, "precision": "bf16-pure"},
                      layout={"tp": 2, "pp": 1, "zero": 1}),
    "async-tp": dict(model="llama-3.1-70b", gpus=256, training={"seq_len": 8192, "global_batch": 512},
                     layout={"tp": 8, "zero": 3, "micro_batch": 16, "recompute": "full", "tp_overlap": True}),
}


def _case(name: str) -> tuple[dict, object]:
    c = dict(CASES[name])
    sc = make(c.pop("model"), c.pop("gpu", "h100-sxm"), c.pop("gpus"), **c)
    return evaluate(sc).to_json(), sc.model


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[dict, object]:
    return _case(request.param)


# ---- DeepSpeed: its own config parser (deepspeed.runtime.config.DeepSpeedConfig) ---------------

def test_deepspeed_config_accepted_by_deepspeed(case: tuple[dict, object], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    dsc = pytest.importorskip("deepspeed.runtime.config")
    est, _ = case
    lay = est["scenario"]["layout"]
    cfg = export(est, "deepspeed").config
    # DeepSpeedConfig reads the data-parallel world from torch.distributed (÷ sequence_parallel_size):
    # stand in for an initialised process group of the planned size
    world = lay["dp"] * (lay["cp"] if "sequence_parallel_size" in cfg else 1)
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dsc.dist, "get_world_size", lambda *a, **k: world)
    ds = dsc.DeepSpeedConfig(cfg)
    gb = est["scenario"]["training"]["global_batch"]
    assert ds.train_batch_size == gb
    assert ds.train_micro_batch_size_per_gpu == lay["micro_batch"]
    assert ds.gradient_accumulation_steps == gb // (lay["dp"] * lay["micro_batch"])
    assert int(ds.zero_optimization_stage) == max(lay["zero"], 1 if lay["offload"] != "none" else 0)
    assert ds.bfloat16_config.enabled
    if lay["zero"] == 3 and lay["zero_group"]:
        assert ds.zero_config.zero_hpz_partition_size == lay["zero_group"]
    if lay["offload"] != "none":
        assert ds.zero_config.offload_optimizer is not None
    assert (ds.zero_config.offload_param is not None) == (lay["offload"] == "params")
    if lay["tp"] > 1:
        assert ds.tensor_parallel_config.autotp_size == lay["tp"]


def test_deepspeed_parser_rejects_unknown_zero_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above has teeth: DeepSpeed's ZeRO model forbids unknown keys."""
    pytest.importorskip("torch")
    dsc = pytest.importorskip("deepspeed.runtime.config")
    monkeypatch.setattr(dsc.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dsc.dist, "get_world_size", lambda *a, **k: 64)
    cfg = export(_case("hsdp-offload")[0], "deepspeed").config
    cfg["zero_optimization"]["zero_hybrid_group"] = 8
    with pytest.raises(Exception, match="zero_hybrid_group"):
        dsc.DeepSpeedConfig(cfg)


# ---- accelerate: its own config class and `accelerate launch` argument names -----------------

def test_accelerate_yaml_loads_with_accelerate(case: tuple[dict, object], tmp_path) -> None:
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    launch = pytest.importorskip("accelerate.commands.launch")
    est, _ = case
    ex = export(est, "accelerate")
    path = tmp_path / ex.filename
    path.write_text(ex.text)
    cfg = config_args.ClusterConfig.from_yaml_file(str(path))  # raises on unknown top-level keys
    hw, lay = est["scenario"]["hardware"], est["scenario"]["layout"]
    assert cfg.num_processes == hw["gpus"] and cfg.num_machines == hw["nodes"]
    # `accelerate launch` copies fsdp_config.X / parallelism_config.X onto its argument X: every key
    # must be one of the launcher's own argument names
    dests = {a.dest for a in launch.launch_command_parser()._actions}
    for key in list(cfg.fsdp_config) + list(cfg.parallelism_config):
        assert key in dests, key
    if cfg.parallelism_config:
        pc = cfg.parallelism_config
        sizes = [pc[f"parallelism_config_{k}_size"] for k in ("dp_replicate", "dp_shard", "tp", "cp")]
        assert sizes[0] * sizes[1] * sizes[2] * sizes[3] == hw["gpus"]
        if lay["zero"] == 3 and lay["zero_group"]:
            assert pc["parallelism_config_dp_shard_size"] == lay["zero_group"]
    if lay["pp"] > 1:
        assert any("pipeline" in n for n in ex.notes)


# ---- Megatron-LM: a faithful copy of its argument names --------------------------------------
# Megatron-LM's own parser (megatron/training/arguments.py) is not on PyPI: the megatron-core wheel
# (0.16.1) ships megatron/core only, and megatron-bridge (0.3.1) an args→config converter, not the parser.
# Names, types and choices copied from NVIDIA/Megatron-LM megatron/training/arguments.py (stored copy at
# commit 000c4ac2; the window, squared-ReLU and LayerNorm1P flags from commit d98e8a6)
# (_add_distributed_args, _add_training_args, _add_mixed_precision_args, _add_network_size_args,
# _add_moe_args; Megatron-Core 0.1x) and the MCore optimizer-offload docs (--optimizer-cpu-offload,
# --optimizer-offload-fraction). Only flags gpuplan writes are listed; the parser rejects others.

def megatron_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    for name in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                 "--expert-model-parallel-size", "--num-layers-per-virtual-pipeline-stage", "--micro-batch-size",
                 "--global-batch-size", "--seq-length", "--max-position-embeddings", "--train-iters",
                 "--num-distributed-optimizer-instances", "--recompute-num-layers", "--num-layers", "--hidden-size",
                 "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups", "--kv-channels",
                 "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
                 # _add_network_size_args: RoPE base (type=int), linear RoPE scaling, vocabulary padding
                 "--rotary-base", "--rotary-seq-len-interpolation-factor", "--make-vocab-size-divisible-by"):
        p.add_argument(name, type=int)
    for name in ("--rope-scaling-factor", "--rotary-percent", "--norm-epsilon"):  # type=float there
        p.add_argument(name, type=float)
    for name in ("--sequence-parallel", "--use-distributed-optimizer", "--use-torch-fsdp2", "--overlap-grad-reduce",
                 "--overlap-param-gather", "--bf16", "--fp16", "--optimizer-cpu-offload", "--group-query-attention",
                 "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                 "--tp-comm-overlap", "--use-rope-scaling", "--add-qkv-bias", "--qk-layernorm",
                 "--overlap-moe-expert-parallel-comm", "--squared-relu", "--apply-layernorm-1p", "--moe-grouped-gemm",
                 "--moe-enable-deepep", "--use-megatron-fsdp", "--no-gradient-accumulation-fusion"):
        # megatron/training/arguments.py, _add_training_args / _add_network_size_args / _add_moe_args
        p.add_argument(name, action="store_true")
    p.add_argument("--moe-token-dispatcher-type", choices=["allgather", "alltoall", "flex"])  # _add_moe_args
    # _add_distributed_args: Megatron-FSDP's sharding strategy (docs: Megatron FSDP, "How to Use")
    p.add_argument("--data-parallel-sharding-strategy", choices=["no_shard", "optim", "optim_grads",
                                                                  "optim_grads_params"])
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--recompute-modules", nargs="*", type=str, default=None)  # _add_training_args
    p.add_argument("--optimizer-offload-fraction", type=float)
    p.add_argument("--fp8-format", choices=["e4m3", "hybrid"])
    p.add_argument("--fp8-recipe", choices=["tensorwise", "delayed", "mxfp8", "blockwise"])
    p.add_argument("--fp4-format", choices=["e2m1"])
    p.add_argument("--fp4-recipe", choices=["nvfp4"])  # megatron/training/arguments.py: --fp4-format e2m1
    p.add_argument("--optimizer", choices=["adam", "sgd"])
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"])
    p.add_argument("--position-embedding-type", choices=["learned_absolute", "rope", "relative", "none"])
    # Megatron-LM d98e8a6 (2026-08): --window-size type=tuple_type ("(1,2)" or "1,2"), --window-attn-skip-freq
    # type=moe_freq_type (an integer N, or a Python list expression); --apply-layernorm-1p from
    # TransformerConfig.layernorm_zero_centered_gamma's argparse_meta
    p.add_argument("--window-size", type=lambda x: tuple(int(i) for i in x.strip("()").split(",")))
    p.add_argument("--window-attn-skip-freq", type=lambda x: int(x) if x.isdigit() else ast.literal_eval(x))
    return p


def test_megatron_args_parse(case: tuple[dict, object]) -> None:
    est, model = case
    args, _ = megatron_args(est, model)
    ns = megatron_parser().parse_args(args)
    lay, tr = est["scenario"]["layout"], est["scenario"]["training"]
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == \
        (lay["tp"], lay["pp"], lay["cp"])
    assert (ns.expert_model_parallel_size or 1) == lay["ep"]
    assert ns.micro_batch_size == lay["micro_batch"] and ns.global_batch_size == tr["global_batch"]
    assert ns.seq_length == tr["seq_len"] and ns.num_layers == model.n_layers
    if lay["virtual_stages"] > 1:
        assert ns.num_layers_per_virtual_pipeline_stage * lay["pp"] * lay["virtual_stages"] == model.n_layers
    assert ns.sequence_parallel == (lay["tp"] > 1 and lay["sequence_parallel"])
    expected_rec = {"none": None, "full": "full", "selective": "selective", "selective-op": "selective"}
    assert ns.recompute_granularity == expected_rec[lay["recompute"]]
    assert ns.recompute_modules == (list(lay["recompute_modules"]) or None)
    assert ns.use_distributed_optimizer == (lay["zero"] in (1, 2) or (lay["zero"] == 3 and lay["pp"] > 1))
    assert ns.use_torch_fsdp2 == (lay["zero"] == 3 and lay["pp"] == 1)
    # ZeRO-2 is Megatron-FSDP's optim_grads: the distributed optimizer alone keeps the gradient buffer whole
    assert (ns.use_megatron_fsdp, ns.data_parallel_sharding_strategy) == \
        ((True, "optim_grads") if lay["zero"] == 2 and lay["pp"] == 1 else (False, None))
    assert ns.optimizer_cpu_offload == (lay["offload"] != "none")
    # the expert exchange and GEMMs timed: not Megatron's allgather dispatcher and SequentialMLP loop
    assert ns.moe_token_dispatcher_type == ("alltoall" if lay["ep"] > 1 else None)
    assert ns.moe_grouped_gemm == (lay["ep"] > 1) and not ns.moe_enable_deepep


def test_megatron_exports_the_deepep_dispatcher_timed():
    est = evaluate(parse_scenario({"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "gpus": 16},
                                   "training": {"moe_dispatcher": "deepep", "framework": "megatron-core"},
                                   "layout": {"ep": 8}})).to_json()
    args, notes = megatron_args(est, load_model("qwen3-30b-a3b"))
    ns = megatron_parser().parse_args(args)
    assert ns.moe_token_dispatcher_type == "flex" and ns.moe_enable_deepep and ns.moe_grouped_gemm
    assert any("--moe-flex-dispatcher-backend deepep" in n for n in notes)


def test_megatron_shell_text_round_trips(case: tuple[dict, object]) -> None:
    est, model = case
    ex = export(est, "megatron", model)
    body = ex.text.split("MEGATRON_ARGS=(")[1].split(")")[0]
    assert shlex.split(body, comments=True) == ex.config


# ---- torchtitan: keys exist in its JobConfig ---------------------------------------------------
# Section → field names copied from pytorch/torchtitan torchitan/config/job_config.py (JobConfig
# dataclasses; stored copy at commit 000204a4). Only the sections gpuplan writes.
TORCHTITAN_JOB_CONFIG = {
    "job": {"config_file", "dump_folder", "description", "use_for_integration_test", "print_args"},
    "model": {"name", "flavor", "tokenizer_path", "converters", "print_after_conversion"},
    "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"},
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "mixed_precision_param", "mixed_precision_reduce", "compile", "gc_freq",
                 "gc_debug", "seed", "deterministic"},
    "parallelism": {"data_parallel_replicate_degree", "enable_compiled_autograd", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "tensor_parallel_degree", "disable_loss_parallel",
                    "enable_async_tensor_parallel", "pipeline_parallel_degree", "pipeline_parallel_split_points",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size", "context_parallel_degree",
                    "context_parallel_rotate_method", "expert_parallel_degree",
                    # torchtitan 0.2.2 config/job_config.py Parallelism: "either [partial dp -> ep] etp = tp or
                    # [partial dp + all tp -> ep] etp = 1", default 1
                    "expert_tensor_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns"},
    "quantize": {"linear", "grouped_mm"},  # torchtitan 0.2: [quantize.linear.float8]
    "compile": {"enable", "components", "backend"},  # torchtitan 0.2.2 config/job_config.py Compile
}
TORCHTITAN_LITERALS = {("activation_checkpoint", "mode"): {"selective", "full", "none"},
                       ("parallelism", "fsdp_reshard_after_forward"): {"default", "always", "never"},
                       ("training", "mixed_precision_param"): {"bfloat16", "float32"},
                       ("optimizer", "implementation"): {"for-loop", "foreach", "fused"}}


def test_torchtitan_keys_exist_in_job_config(case: tuple[dict, object]) -> None:
    est, model = case
    ex = export(est, "torchtitan", model)
    parsed = tomllib.loads(ex.text)
    assert parsed == ex.config
    for section, keys in parsed.items():
        assert section in TORCHTITAN_JOB_CONFIG, section
        for key, value in keys.items():
            assert key in TORCHTITAN_JOB_CONFIG[section], f"{section}.{key}"
            allowed = TORCHTITAN_LITERALS.get((section, key))
            assert allowed is None or value in allowed, f"{section}.{key} = {value!r}"
    par, lay = parsed["parallelism"], est["scenario"]["layout"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == lay["dp"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["tensor_parallel_degree"] \
        * par["pipeline_parallel_degree"] * par["context_parallel_degree"] == est["scenario"]["hardware"]["gpus"]
    if lay["recompute"] == "selective-op":
        assert parsed["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}


def test_torchtitan_pipeline_schedule_is_a_torch_schedule(case: tuple[dict, object]) -> None:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    est, model = case
    par = export(est, "torchtitan", model).config["parallelism"]
    if "pipeline_parallel_schedule" in par:
        schedules.get_schedule_class(par["pipeline_parallel_schedule"])  # raises on an unknown name


# ---- torchrun: torch.distributed.run's own parser ----------------------------------------------

def test_torchrun_args_parse_with_torch(case: tuple[dict, object]) -> None:
    run = pytest.importorskip("torch.distributed.run")
    est, _ = case
    args, _ = torchrun_args(est, "train.py")
    ns = run.get_args_parser().parse_args(args[1:])
    hw = est["scenario"]["hardware"]
    assert int(ns.nnodes) == hw["nodes"]
    assert int(ns.nproc_per_node) * hw["nodes"] == hw["gpus"]
    assert ns.training_script == "train.py"
    if hw["nodes"] > 1:
        assert ns.rdzv_backend == "c10d" and ns.rdzv_endpoint.endswith(":29500")


# ---- pure-Python checks and the command --------------------------------------------------------

def test_every_target_writes_text_and_notes_are_comments(case: tuple[dict, object]) -> None:
    est, model = case
    for target in TARGETS:
        ex = export(est, target, model)
        assert ex.text.strip()
        if not ex.filename.endswith(".json"):
            for note in ex.notes:
                assert f"# note: {note}" in ex.text


def test_accelerate_yaml_is_plain_yaml() -> None:
    est, _ = _case("tp4-pp4-zero2")
    ex = export(est, "accelerate")
    assert yaml.safe_load(ex.text) == ex.config
    assert ex.config["parallelism_config"]["parallelism_config_tp_size"] == 4


def test_cli_export_given_layout(capsys: pytest.CaptureFixture) -> None:
    assert main(["export", "--example", "--to", "megatron"]) == 0
    out, err = capsys.readouterr()
    assert "--tensor-model-parallel-size 4" in out and "scenario's layout" in err


def test_cli_export_plans_an_open_layout(capsys: pytest.CaptureFixture, tmp_path) -> None:
    out_file = tmp_path / "ds.json"
    assert main(["export", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--max-gpus", "16",
                 "--to", "deepspeed", "-o", str(out_file)]) == 0
    _, err = capsys.readouterr()
    assert "planned" in err
    import json

    assert json.loads(out_file.read_text())["zero_optimization"]["stage"] in (0, 1, 2, 3)


def test_cli_export_json(capsys: pytest.CaptureFixture) -> None:
    # torchtitan's FSDP2 has no ZeRO-1 (the example's stage): its layout with ZeRO-2 given
    assert main(["export", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "4", "--pp", "4",
                 "--zero", "2", "--tokens", "1T", "--to", "torchtitan", "--json"]) == 0
    import json

    res = json.loads(capsys.readouterr().out)
    assert res["target"] == "torchtitan" and res["config"]["parallelism"]["tensor_parallel_degree"] == 4


def test_cli_export_bad_target(capsys: pytest.CaptureFixture) -> None:
    assert main(["export", "--example", "--to", "jax"]) == 2


def test_async_tensor_parallelism_reaches_both_frameworks():
    est, model = _case("async-tp")
    ns = megatron_parser().parse_args(megatron_args(est, model)[0])
    assert ns.tp_comm_overlap and ns.sequence_parallel
    titan = tomllib.loads(export(est, "torchtitan", model).text)
    assert titan["parallelism"]["enable_async_tensor_parallel"] is True
    # without the overlap neither flag appears
    plain, _ = _case("tp4-pp4-zero2")
    assert not megatron_parser().parse_args(megatron_args(plain, model)[0]).tp_comm_overlap


# ---- what the target's framework cannot run is refused, never written (catalog/frameworks.json) -------

@pytest.mark.parametrize(("args", "why"), [
    (["--pp", "4", "--tp", "2", "--to", "accelerate"], "no pipeline stages"),
    (["--pp", "2", "--tp", "1", "--zero", "2", "--to", "deepspeed"], "ZeRO stage < 2"),
    (["--pp", "1", "--tp", "2", "--zero", "1", "--to", "torchtitan"], "torchtitan"),
])
def test_a_layout_the_target_cannot_run_is_refused(args, why, tmp_path, capsys):
    from gpuplan.cli import main

    out = tmp_path / "cfg"
    rc = main(["export", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", *args, "-o", str(out)])
    assert rc == 2 and why in capsys.readouterr().err and not out.exists()
