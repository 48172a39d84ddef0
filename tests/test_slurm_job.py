"""The exported sbatch script, unchanged, runs to completion on a real one-node Slurm cluster (tests/slurm_cluster.py):
a tiny Llama planned on 2 GPUs of one node, exported with ``--to slurm --via torchrun --device cpu``, trains
two FSDP2 steps on gloo through sbatch → srun → torchrun, 2 ranks. The training script is gpuplan's own trial
worker (the one ``gpuplan profile`` runs); each rank's measured model states are the prediction's. Skips with
the reason when Slurm or torch is not installed (CI installs both: .ci/run)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, why_not_here

import gpuplan
from gpuplan.cli import main

TINY = ("{model_type: llama, num_hidden_layers: 2, hidden_size: 256, num_attention_heads: 4, "
        "num_key_value_heads: 2, intermediate_size: 512, vocab_size: 1000, max_position_embeddings: 512}")
PARAMS = 1_692_928  # the tiny Llama's parameters (tests/profile/test_profile.py)
SCENARIO = ["--model", TINY, "--gpu", "h100-sxm", "--gpus", "2", "--gpus-per-node", "2", "--tp", "1", "--pp", "1",
            "--zero", "3", "--micro-batch", "2", "--seq-len", "128", "--global-batch", "4", "--steps", "3"]
TRAIN = """import sys
from gpuplan.profile.worker import main
sys.exit(main({config!r}, {out!r}))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = why_not_here()
    if why:
        pytest.skip(why)
    pytest.importorskip("torch")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_exported_sbatch_script_runs_to_completion(cluster, tmp_path, capsys):
    script = tmp_path / "gpuplan.sbatch"
    assert main(["export", *SCENARIO, "--to", "slurm", "--via", "torchrun", "--device", "cpu", "--json",
                 "-o", str(script)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["config"]["sbatch"] == {"job-name": "gpuplan-custom-llama", "nodes": 1, "ntasks-per-node": 1,
                                       "exclusive": None, "time": res["config"]["sbatch"]["time"],
                                       "output": "%x-%j.out"}
    assert res["config"]["command"] == "torchrun --standalone --nnodes 1 --nproc-per-node 2 train.py"
    # the user's train.py: here gpuplan's trial worker on the scenario the export planned
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (tmp_path / "worker.json").write_text(json.dumps({"scenario": _scenario(), "device": "cpu", "steps": 2,
                                                      "warmup": 1}))
    (tmp_path / "train.py").write_text(TRAIN.format(config=str(tmp_path / "worker.json"), out=str(out_dir)))
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # torchrun of this interpreter
           "PYTHONPATH": str(Path(gpuplan.__file__).resolve().parents[1])}
    job_id = cluster.submit(script, tmp_path, env)
    info = cluster.wait(job_id, timeout_s=300)
    log = tmp_path / f"gpuplan-custom-llama-{job_id}.out"
    text = log.read_text() if log.exists() else "(no output file)"
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), f"{info} | {text[-3000:]} | {cluster.logs()}"
    ranks = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["ok"] and r["world"] == 2 and r["device"] == "cpu"
        # ZeRO-3 over 2 ranks: 16 B of model state per parameter (fp32 weights, gradients, AdamW), halved
        assert r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] == 16 * PARAMS // 2
        assert len(r["step_s"]) == 2
    print(f"slurm job {job_id}: {info['JobState']} exit {info['ExitCode']}, run time {info.get('RunTime')}; "
          f"rank 0 step times {ranks[0]['step_s']}\n--- {log.name} ---\n{text}")


def _scenario() -> dict:
    """The scenario of SCENARIO as the worker reads it."""
    import yaml

    return {"model": yaml.safe_load(TINY), "hardware": {"gpu": "h100-sxm", "gpus": 2, "gpus_per_node": 2},
            "training": {"seq_len": 128, "global_batch": 4, "steps": 3},
            "layout": {"tp": 1, "pp": 1, "zero": 3, "micro_batch": 2}}
