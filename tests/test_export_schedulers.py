"""Scheduler exports (--to slurm|kubernetes|skypilot --via FRAMEWORK) checked by the real parts where they
install: the sbatch script and the pods' launch script run under bash with stub srun/scontrol/torchrun
(what reaches the launcher is parsed by torch's and accelerate's own parsers, the configs they read by the
frameworks' loaders); every PyTorchJob validates against the Kubeflow training operator's published CRD
schema (tests/data, v1.9.0); SkyPilot's own parser (sky.Task.from_yaml) loads every SkyPilot task. The
Slurm job itself runs to completion on a one-node cluster in tests/test_slurm_job.py."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import make
from export_parsers import load_accelerate, load_torchrun, load_torchtitan
from test_export import CASES, _case, megatron_parser

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.cli import main
from gpuplan.export import FRAMEWORK_TARGETS, export
from gpuplan.export.launch import natural_target
from gpuplan.export.nccl import NCCL_DOC
from gpuplan.export.to_slurm import STARTUP_S, TIME_MARGIN, slurm_time

CRD = Path(__file__).parent / "data" / "kubeflow.org_pytorchjobs.v1.9.0.yaml"
VIAS = list(FRAMEWORK_TARGETS)


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[dict, object]:
    return _case(request.param)


# ---- running the scripts with stand-ins for the scheduler's commands ------------------------------------

STUB = """#!{python}
import json, os, sys
with open(os.environ["STUB_LOG"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""


def run_with_stubs(script: str, tmp: Path, env: dict[str, str], stubs: tuple[str, ...]) -> list[list[str]]:
    """Run ``script`` under bash with ``stubs`` on PATH recording their argv (after the shell's expansion);
    ``scontrol show hostnames`` prints two node names. Returns every recorded call."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in stubs:
        (bin_dir / name).write_text(STUB.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'node-a\\nnode-b\\n'\n")
    (bin_dir / "scontrol").chmod(0o755)
    (tmp / "job.sh").write_text(script)
    log = tmp / "calls.jsonl"
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log), "HOME": str(tmp), **env}
    out = subprocess.run(["bash", str(tmp / "job.sh")], cwd=tmp, env=full, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(ln) for ln in log.read_text().splitlines()]


def check_launcher(argv: list[str], est: dict, via: str, tmp: Path, model: object) -> None:
    """What a node's launcher got is what the plan says, read by the launcher's own parser."""
    hw = est["scenario"]["hardware"]
    if via == "accelerate":
        launch = pytest.importorskip("accelerate.commands.launch")
        ns = launch.launch_command_parser().parse_args(argv[2:])
        assert ns.training_script == "train.py"
        if hw["nodes"] > 1:
            assert int(ns.num_machines) == hw["nodes"] and int(ns.num_processes) == hw["gpus"]
        return
    ns = load_torchrun(argv)
    if ns is None:
        pytest.skip("torch not installed: torchrun's parser is not here")
    assert int(ns.nproc_per_node) == hw["gpus_per_node"] or hw["gpus"] < hw["gpus_per_node"]
    assert str(ns.nnodes) == str(hw["nodes"])
    if via == "megatron":
        i = ns.training_script_args
        parsed = megatron_parser().parse_args(i)
        assert parsed.tensor_model_parallel_size == est["scenario"]["layout"]["tp"]
    elif via == "torchtitan":
        assert argv[argv.index("--job.config_file") + 1].endswith("/job.toml")


# ---- Slurm ---------------------------------------------------------------------------------------------

def test_slurm_time_rounds_up_to_the_minute():
    assert slurm_time(60) == "0-00:01:00"
    assert slurm_time(61) == "0-00:02:00"
    assert slurm_time(86400 + 3600 + 61) == "1-01:02:00"
    assert slurm_time(30 * 86400) == "30-00:00:00"


def test_sbatch_script_for_the_example_line_by_line():
    est, model = _case("tp4-pp4-zero2")  # 64 H100 on 8 nodes, InfiniBand NDR, 1.4T tokens
    ex = export(est, "slurm", model, via="megatron")
    lines = ex.text.splitlines()
    limit = est["time"]["train_s_with_failures"] * (1 + TIME_MARGIN) + STARTUP_S
    assert [ln for ln in lines if ln.startswith("#SBATCH")] == [
        "#SBATCH --job-name=gpuplan-llama-3-1-70b", "#SBATCH --nodes=8", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8", "#SBATCH --exclusive", f"#SBATCH --time={slurm_time(limit)}",
        "#SBATCH --output=%x-%j.out"]
    assert lines[0] == "#!/bin/bash"
    assert 'NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST")' in lines and \
        'HEAD_NODE="${NODES%%$\'\\n\'*}"' in lines  # no pipe into head: pipefail would end the job on SIGPIPE
    assert [ln.split("  #")[0] for ln in lines if ln.startswith("export ")] == [
        "export NCCL_DEBUG=WARN", "export NCCL_IB_DISABLE=0"]
    assert f"{NCCL_DOC}#nccl-ib-disable" in ex.text
    assert lines[-1] == (
        'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --kill-on-bad-exit=1 torchrun --nnodes 8 '
        '--nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint "$HEAD_NODE:29500" --rdzv-id "$SLURM_JOB_ID" '
        'pretrain_gpt.py "${MEGATRON_ARGS[@]}"')
    assert "  --tensor-model-parallel-size 4" in lines and "  --pipeline-model-parallel-size 4" in lines
    # sbatch reads #SBATCH lines only before the first command: every one of them comes first
    first_command = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert max(i for i, ln in enumerate(lines) if ln.startswith("#SBATCH")) < first_command
    assert ex.config["sbatch"]["gpus-per-node"] == 8 and ex.config["via"] == "megatron"


@pytest.mark.parametrize(("fabric", "exports", "said"), [
    ("ib-ndr-400g", ["NCCL_DEBUG=WARN", "NCCL_IB_DISABLE=0"], "NCCL_IB_HCA"),
    ("roce-400g", ["NCCL_DEBUG=WARN", "NCCL_IB_DISABLE=0"], "NCCL_IB_GID_INDEX"),
    ("eth-100g", ["NCCL_DEBUG=WARN", "NCCL_IB_DISABLE=1", "NCCL_SOCKET_NTHREADS=4", "NCCL_NSOCKS_PERTHREAD=4"],
     "TCP sockets"),
    ("eth-10g", ["NCCL_DEBUG=WARN", "NCCL_IB_DISABLE=1"], "TCP sockets"),
    ("opa-100g", ["NCCL_DEBUG=WARN"], "does not say how NCCL crosses it"),
])
def test_nccl_environment_follows_the_planned_fabric(fabric, exports, said):
    sc = make("llama-3.1-8b", "h100-sxm", 16, hardware={"scale_out": fabric}, training={"global_batch": 256},
              layout={"tp": 1, "pp": 1, "zero": 3})
    ex = export(evaluate(sc).to_json(), "slurm", sc.model, via="torchtitan")
    assert [ln.split("  #")[0].removeprefix("export ") for ln in ex.text.splitlines()
            if ln.startswith("export ")] == exports
    assert any(said in n for n in ex.notes)


def test_one_node_runs_standalone_without_network_settings():
    est, model = _case("ddp")  # 8 H200 on one node
    ex = export(est, "slurm", model)
    assert "HEAD_NODE" not in ex.text and "export NCCL" not in ex.text
    assert ex.text.splitlines()[-1].endswith("torchrun --standalone --nnodes 1 --nproc-per-node 8 train.py")


@pytest.mark.parametrize("via", VIAS)
def test_sbatch_script_runs_and_hands_the_plan_to_the_launcher(case, via, tmp_path):
    est, model = case
    ex = export(est, "slurm", model, via=via)
    env = {"SLURM_JOB_NODELIST": "node-[a-b]", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "42",
           "SLURM_CPUS_ON_NODE": "96"}
    calls = run_with_stubs(ex.text, tmp_path, env, ("srun",))
    assert len(calls) == 1
    srun = calls[0]
    assert srun[:4] == ["srun", "--ntasks-per-node=1", "--cpus-per-task=96", "--kill-on-bad-exit=1"]
    launcher = srun[4:]
    if est["scenario"]["hardware"]["nodes"] > 1 and via != "accelerate":
        assert launcher[launcher.index("--rdzv-endpoint") + 1] == "node-a:29500"
        assert launcher[launcher.index("--rdzv-id") + 1] == "42"
    check_launcher(launcher, est, via, tmp_path, model)
    written = tmp_path / "gpuplan-42"
    for name in ex.config["files"]:
        _check_config(name, (written / name).read_text(), est, via, model, tmp_path)


def _check_config(name: str, text: str, est: dict, via: str, model: object, tmp: Path) -> None:
    """A config the script wrote is the framework export itself, and its framework reads it."""
    if name == "job.toml":
        assert tomllib.loads(text) == export(est, "torchtitan", model).config
        load_torchtitan(text, tmp)
    elif name == "ds_config.json":
        assert json.loads(text) == export(est, "deepspeed").config
    elif name == "accelerate.yaml":
        cfg = yaml.safe_load(text)
        assert cfg["num_processes"] == est["scenario"]["hardware"]["gpus"] and "main_process_ip" not in cfg
        load_accelerate(text, tmp)
    else:
        raise AssertionError(f"unexpected config {name} for {via}")


# ---- Kubernetes ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pytorchjob_schema() -> dict:
    """The CRD's v1 OpenAPI schema, made strict: an object with declared properties takes no other key (the
    API server would silently drop one — a misspelt field must fail here instead)."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]

    def strict(node: object) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)

    strict(schema)
    return schema


def _validate(obj: dict, schema: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(obj, schema)


@pytest.mark.parametrize("via", VIAS)
def test_pytorchjob_validates_against_the_crd_and_its_pods_launch_the_plan(case, via, pytorchjob_schema, tmp_path):
    est, model = case
    ex = export(est, "kubernetes", model, via=via)
    docs = list(yaml.safe_load_all(ex.text))
    assert docs == [ex.config["configmap"], ex.config["pytorchjob"]]
    job = ex.config["pytorchjob"]
    _validate(job, pytorchjob_schema)
    hw = est["scenario"]["hardware"]
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1
    assert specs.get("Worker", {"replicas": 0})["replicas"] == hw["nodes"] - 1
    container = specs["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch" and container["resources"]["limits"] == {"nvidia.com/gpu":
                                                                                   hw["gpus_per_node"]}
    assert job["spec"]["nprocPerNode"] == str(hw["gpus_per_node"])
    data = ex.config["configmap"]["data"]
    env = {"MASTER_ADDR": "gpuplan-master-0", "MASTER_PORT": "23456", "PET_NODE_RANK": "1"}
    calls = run_with_stubs(data["launch.sh"].replace("/etc/gpuplan", str(tmp_path)), tmp_path, env,
                           ("torchrun", "accelerate"))
    argv = calls[0]
    if hw["nodes"] > 1 and via != "accelerate":
        assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--master-addr") + 1] == \
            "gpuplan-master-0"
    for name, text in data.items():
        if name != "launch.sh":
            _check_config(name, text, est, via, model, tmp_path)


def test_the_crd_check_has_teeth(pytorchjob_schema):
    jsonschema = pytest.importorskip("jsonschema")
    est, model = _case("hsdp-offload")
    job = export(est, "kubernetes", model).config["pytorchjob"]
    bad = json.loads(json.dumps(job))
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 7  # misspelt
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        jsonschema.validate(bad, pytorchjob_schema)
    bad = json.loads(json.dumps(job))
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "7"  # a string where the CRD wants an integer
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, pytorchjob_schema)


# ---- SkyPilot ------------------------------------------------------------------------------------------

SKY_LOADER = """
import json, socket, sys
def no_network(*a, **k):
    raise OSError("the tests touch no network")
socket.socket.connect = no_network
socket.create_connection = no_network
import sky
out = []
for path in sys.argv[1:]:
    task = sky.Task.from_yaml(path)
    (res,) = task.resources
    out.append({"num_nodes": task.num_nodes, "accelerators": res.accelerators, "envs": dict(task.envs)})
print(json.dumps(out))
"""


def test_skypilot_loads_every_task(tmp_path):
    """One SkyPilot process loads every case × framework (its import takes seconds); HOME is a temporary
    folder (SkyPilot writes ~/.sky on import) and sockets refuse to connect."""
    import importlib.util

    if importlib.util.find_spec("sky") is None:
        pytest.skip("skypilot is not installed (pip install '.[skypilot]'; CI does)")
    exports = []
    for name in sorted(CASES):
        est, model = _case(name)
        for via in VIAS:
            ex = export(est, "skypilot", model, via=via)
            path = tmp_path / f"{name}-{via}.yaml"
            path.write_text(ex.text)
            exports.append((est, ex, path))
    out = subprocess.run([sys.executable, "-c", SKY_LOADER, *(str(p) for _, _, p in exports)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    for (est, ex, _), got in zip(exports, json.loads(out.stdout.splitlines()[-1]), strict=True):
        hw = est["scenario"]["hardware"]
        assert got["num_nodes"] == hw["nodes"]
        name, count = ex.config["resources"]["accelerators"].split(":")
        assert got["accelerators"] == {name: int(count)} and int(count) == hw["gpus_per_node"]
        assert got["envs"] == ex.config.get("envs", {})


def test_skypilot_parser_has_teeth(tmp_path):
    import importlib.util

    if importlib.util.find_spec("sky") is None:
        pytest.skip("skypilot is not installed (pip install '.[skypilot]'; CI does)")
    est, model = _case("ddp")
    task = dict(export(est, "skypilot", model).config, num_node=2)  # misspelt
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(task))
    out = subprocess.run([sys.executable, "-c", SKY_LOADER, str(tmp_path / "bad.yaml")], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode != 0 and "num_node" in out.stderr


@pytest.mark.parametrize("via", VIAS)
def test_skypilot_run_starts_the_plan_on_each_node(case, via, tmp_path):
    est, model = case
    ex = export(est, "skypilot", model, via=via)
    hw = est["scenario"]["hardware"]
    assert ex.config["num_nodes"] == hw["nodes"]
    env = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.8"}
    argv = run_with_stubs(ex.config["run"], tmp_path, env, ("torchrun", "accelerate"))[0]
    if hw["nodes"] > 1 and via != "accelerate":
        assert argv[argv.index("--node-rank") + 1] == "1" and argv[argv.index("--master-addr") + 1] == "10.0.0.7"
    if hw["nodes"] > 1 and via == "accelerate":
        assert argv[argv.index("--machine_rank") + 1] == "1"
    check_launcher(argv, est, via, tmp_path, model)
    for name, text in ((p.name, p.read_text()) for p in (tmp_path / "gpuplan").glob("*")):
        _check_config(name, text, est, via, model, tmp_path)


def test_rdma_asks_skypilot_for_its_best_network():
    est, model = _case("tp4-pp4-zero2")
    task = export(est, "skypilot", model).config
    assert task["resources"] == {"accelerators": "H100:8", "network_tier": "best"} and "envs" not in task


# ---- the command: --via, defaults, refusals (never written) ---------------------------------------------

_8B = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "16", "--tp", "1", "--pp", "1", "--zero", "3"]


@pytest.mark.parametrize(("framework", "via"), [("megatron-core", "megatron"), ("torchtitan", "torchtitan"),
                                                ("pytorch-fsdp", "accelerate"), ("deepspeed", "deepspeed"),
                                                ("torchtune", "torchrun"), ("generic", "torchrun")])
def test_the_default_framework_is_the_scenarios_own(framework, via):
    assert natural_target(framework) == via


def test_cli_slurm_via_default_from_training_framework(capsys, tmp_path):
    out = tmp_path / "job.sbatch"
    assert main(["export", *_8B, "--framework", "megatron-core", "--to", "slurm", "-o", str(out)]) == 0
    assert "slurm runs megatron" in capsys.readouterr().err
    assert 'pretrain_gpt.py "${MEGATRON_ARGS[@]}"' in out.read_text()


@pytest.mark.parametrize(("args", "why"), [
    (["--gpu", "mi250x", "--to", "skypilot"], "no SkyPilot accelerator name"),
    (["--gpu", "h100-sxm", "--to", "slurm", "--via", "accelerate", "--pp", "2"], "no pipeline stages"),
    (["--gpu", "h100-sxm", "--to", "slurm", "--via", "torchtitan", "--device", "cpu"], "--device cpu"),
    (["--gpu", "h100-sxm", "--to", "torchrun", "--via", "torchtitan"], "--via applies to the scheduler targets"),
    (["--gpu", "h100-sxm", "--to", "torchrun", "--device", "cpu"], "apply to the scheduler targets"),
])
def test_what_a_scheduler_cannot_state_is_refused_and_not_written(args, why, tmp_path, capsys):
    out = tmp_path / "job"
    base = ["--model", "llama-3.1-8b", "--gpus", "16", "--tp", "1", "--zero", "3"]
    rc = main(["export", *base, *(["--pp", "1"] if "--pp" not in args else []), *args, "-o", str(out)])
    assert rc == 2 and why in capsys.readouterr().err and not out.exists()


def test_kubernetes_refuses_a_gpu_without_a_device_plugin_name(tmp_path, capsys):
    catalog = tmp_path / "mine.yaml"
    catalog.write_text("gpus:\n  - {id: my-xpu, base: h100-sxm, name: Some XPU, vendor: intel}\n")
    out = tmp_path / "job.yaml"
    rc = main(["export", *_8B[2:], "--model", "llama-3.1-8b", "--gpu", "my-xpu", "--catalog", str(catalog),
               "--to", "kubernetes", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "device-plugin resource" in err and "intel" in err and not out.exists()


def test_cpu_dry_run_requests_no_gpus():
    sc = make({"params": 1e6}, "h100-sxm", 2, hardware={"gpus_per_node": 2}, training={"steps": 3},
              layout={"tp": 1, "pp": 1})
    est = evaluate(sc).to_json()
    slurm = export(est, "slurm", sc.model, device="cpu")
    assert "gpus-per-node" not in slurm.config["sbatch"] and "export NCCL" not in slurm.text
    assert math.isfinite(float(est["time"]["train_s"]))
    kube = export(est, "kubernetes", sc.model, device="cpu").config["pytorchjob"]
    assert kube["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"] == \
        {"requests": {"cpu": 2}}
    assert export(est, "skypilot", sc.model, device="cpu").config["resources"] == {"cpus": "2+"}
    assert shlex.split(slurm.config["command"])[:3] == ["torchrun", "--standalone", "--nnodes"]
