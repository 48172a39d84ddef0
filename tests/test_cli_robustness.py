"""Plan, fit and export on impossible or incomplete requests: one clear line (exit 2) naming the
field, never a layout another command would reject; and the messages that used to mislead."""

from __future__ import annotations

import json
import time

import pytest
from test_cli import NO_PEAK, run


def _error(out) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-500:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "needle"), [
    (("plan", "--model", "mixtral-8x7b", "--ep", "3"), "layout.ep=3 does not divide the 8 experts"),
    (("plan", "--model", "llama-3.1-8b", "--ep", "2"), "has no experts"),
    (("plan", "--model", "llama-3.1-8b", "--tp", "3"), "layout.tp=3 does not divide the 32 attention heads"),
    (("fit", "--model", "llama-3.1-8b", "--tp", "3"), "layout.tp=3"),
    (("fit", "--model", "mixtral-8x7b", "--ep", "3"), "layout.ep=3"),
    (("plan", "--model", "llama-3.1-8b", "--virtual-stages", "2", "--pp-schedule", "1f1b"), "interleaved"),
    (("plan", "--model", "llama-3.1-8b", "--offload", "params", "--zero", "1"), "needs zero 3"),
    # an open tp under sequence parallelism is read (model/tp_open.py); one GPU leaves no degree to read
    (("evaluate", "--model", "llama-3.1-8b", "--gpus", "1", "--sequence-parallel", "true"), "needs tp > 1"),
    (("export", "--model", "mixtral-8x7b", "--ep", "3", "--to", "megatron"), "layout.ep=3"),
    (("evaluate", "--example", "--precision", "fp8", "--gpu", "a100-80gb-sxm"), "no fp8 tensor cores"),
    (("evaluate", "--example", "--gpu", "v100-32gb"), "no bf16 tensor cores"),
    (("plan", "--model", "llama-3.1-8b", "--gpu", "h100-nvl", "--tokens", "1T", "--objective", "cost"),
     "needs a price"),
    (("plan", "--model", "llama-3.1-8b", "--deadline", "7d"), "--deadline needs the length of the run"),
    (("plan", "--model", "llama-3.1-8b", "--budget", "1000"), "--budget needs the length of the run"),
    (("evaluate", "--example", "--budget", "2"), "see `gpuplan evaluate --help`"),
    # a negative value after a space is the value (argparse alone says "expected one argument")
    (("plan", "--model", "llama-3.1-8b", "--tokens", "-1T"), "training.tokens must be positive"),
    (("plan", "--model", "llama-3.1-8b", "--tokens", "1T", "--budget", "-$5k"), "--budget must be positive"),
    (("plan", "--model", "llama-3.1-8b", "--tokens", "1T", "--deadline", "-3d"), "--deadline must be positive"),
])
def test_impossible_requests_name_the_field(args, needle):
    assert needle in _error(run(*args, "--gpu", "h100-sxm") if "--gpu" not in args else run(*args))


def test_a_fixed_hybrid_shard_group_is_kept_and_divides_the_replicas():
    out = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--zero-group", "4", "--tokens", "1T",
              "--max-gpus", "64", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    for est in res["candidates"]:
        lay = est["scenario"]["layout"]
        assert lay["zero_group"] == 4 and (lay["dp"] * lay["cp"]) % 4 == 0 and lay["zero"] >= 1


def test_plan_with_fp8_skips_gpus_without_fp8_and_says_why():
    out = run("plan", "--example", "--precision", "fp8", "--gpu", "a100-80gb-sxm,h100-sxm", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert {c["scenario"]["hardware"]["gpu"] for c in res["candidates"]} == {"h100-sxm"}
    assert any("a100-80gb-sxm has no fp8 tensor cores" in k for k in res["rejected"])


def test_a_gpu_with_no_peak_says_why_nothing_was_planned():
    out = run("plan", "--catalog", NO_PEAK, "--model", "llama-3.1-8b", "--gpu", "lab-24gb", "--tokens", "1T",
              "--max-gpus", "64")
    assert out.returncode == 0, out.stderr
    assert "nothing was searched: lab-24gb: no published compute peak" in out.stdout


def test_an_unmet_budget_is_not_called_out_of_memory():
    out = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--max-gpus", "64",
              "--budget", "1")
    assert out.returncode == 0, out.stderr
    assert "no layout meets the deadline or budget." in out.stdout and "no layout fits." not in out.stdout


def test_export_of_a_layout_that_does_not_fit_says_so(tmp_path):
    out = run("export", "--model", "llama-3.1-405b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--pp", "1",
              "--to", "torchtitan", "--json", "-o", str(tmp_path / "job.toml"))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["notes"][0].startswith("this layout does NOT fit: it needs")
    # --json and -o together: the file is written as well
    assert (tmp_path / "job.toml").read_text() == res["text"] and res["written_to"] == str(tmp_path / "job.toml")


def test_host_memory_shortfall_is_named_as_host_memory():
    # seq 2048: the GPU holds the rest (63.7 of 79.6 GiB), so the host is what runs out
    out = run("evaluate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--offload", "optimizer",
              "--host-memory", "10GiB", "--seq-len", "2048")
    assert out.returncode == 0, out.stderr
    assert "DOES NOT FIT in host memory: 89.7 GiB offloaded per node but hardware.host_memory is 10.0 GiB" \
        in out.stdout


def test_memory_table_keeps_other_non_negative_and_shows_the_gradient_timing():
    # Llama-3.1-8B on one 24 GB card without recomputation (PyTorch AMP: fp32 weights and gradients, as traced): the
    # peak is the start of backward, before any gradient exists (an open recompute would be read as the full
    # recomputation that comes nearest to fitting: model/recompute_open.py)
    out = run("evaluate", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--global-batch", "1",
              "--grad-dtype", "param", "--recompute", "none")
    lines = {line.rsplit(None, 1)[0].strip(): float(line.rsplit(None, 1)[1]) for line in out.stdout.splitlines()
             if line[:1].isalpha() and line.rsplit(None, 1)[-1].lstrip("-").replace(".", "").isdigit()}
    assert lines["gradients not yet allocated at the peak"] == -lines["gradients"] == -29.92
    other = next(v for k, v in lines.items() if k.startswith("other (sum of the"))
    assert other > 0
    parts = ("weights", "gradients", "optimizer states", "activations (1 micro-batch in flight)")
    total = sum(lines[k] for k in parts) + other + lines["gradients not yet allocated at the peak"]
    assert total == pytest.approx(lines["total per GPU"], abs=0.02)


def test_fit_stops_once_more_gpus_cannot_help():
    # ZeRO-0 with tp = pp = 1 keeps the whole 70B state on every GPU: no count fits, and fit must
    # see that instead of visiting every node count up to a million GPUs
    t0 = time.perf_counter()
    out = run("fit", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "1", "--pp", "1", "--zero", "0",
              "--max-gpus", "1e6")
    assert out.returncode == 0, out.stderr
    assert "does not fit" in out.stdout
    assert time.perf_counter() - t0 < 30


def test_version():
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("gpuplan ")


def test_catalogue_models_carry_no_assumptions_but_inline_configs_do():
    from gpuplan.catalog.models import load_model

    assert load_model("gpt2").assumed == () and load_model("gemma-2-9b").assumed == ()
    inline = load_model({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
                         "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000})
    assert any("not given" in a for a in inline.assumed)


def test_a_sequence_beyond_the_models_positions_is_noted():
    from conftest import make

    from gpuplan.api import evaluate_scenario as evaluate

    long = evaluate(make("llama-2-7b", gpus=8, training={"seq_len": 65536}, layout={"zero": 3})).to_json()
    assert long["notes"] and "beyond the 4,096 positions" in long["notes"][0]
    assert evaluate(make("llama-2-7b", gpus=8, training={"seq_len": 4096}, layout={"zero": 3})).to_json()["notes"] == []


@pytest.mark.parametrize(("args", "check"), [
    # a fixed offload is searched as given (it used to be ignored: "nothing fits … try offload")
    (("--model", "llama-3.1-70b", "--offload", "optimizer", "--zero", "3", "--max-gpus", "8"),
     lambda lay: lay["offload"] == "optimizer"),
    # sequence parallelism asked for, tp left open: never sp on tp = 1
    (("--model", "llama-3.1-8b", "--sequence-parallel", "true", "--max-gpus", "64"),
     lambda lay: lay["tp"] > 1 or not lay["sequence_parallel"]),
    # virtual stages asked for: interleaved over a real pipeline
    (("--model", "llama-3.1-8b", "--virtual-stages", "2", "--max-gpus", "64"),
     lambda lay: lay["pp"] > 1 and lay["pp_schedule"] == "interleaved" and lay["virtual_stages"] == 2),
])
def test_plan_keeps_the_fixed_fields_valid(args, check):
    out = run("plan", "--gpu", "h100-sxm", *args, "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["candidates"]
    assert all(check(c["scenario"]["layout"]) for c in res["candidates"])


def test_a_fixed_micro_batch_that_cannot_divide_the_batch_is_named():
    line = _error(run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--micro-batch", "3",
                      "--global-batch", "1024"))
    assert "not a multiple of the fixed dp×micro_batch = 1×3" in line


def test_a_fixed_micro_batch_rounds_the_default_batch_as_evaluate_does():
    # the default (~4M tokens: 512 sequences of 8,192) rounds down to a multiple of the fixed micro-batch, as
    # `evaluate` rounds it to dp × micro_batch
    out = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--micro-batch", "3", "--seq-len", "8192",
              "--tokens", "1T", "--max-gpus", "8", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["global_batch"] == 510 and res["best"]["scenario"]["layout"]["micro_batch"] == 3


def test_fp32_on_v100_runs_at_the_fp32_peak_not_the_tensor_cores():
    from conftest import make

    from gpuplan.api import evaluate_scenario as evaluate

    def t(precision):
        return evaluate(make("llama-3.2-1b", "v100-32gb", 8, training={"precision": precision})).to_json()["time"]

    # V100: 125 TFLOPS fp16 tensor cores, 15.7 TFLOPS fp32 (no tf32): fp32 matmuls ~8x slower; the step's
    # non-matmul work (the same bytes in both, twice the bytes in fp32) dilutes it to ~5x, far from the 1x
    # that fp32 on the tensor cores would give
    assert t("fp32")["compute_s"] > 4 * t("fp16")["compute_s"]


def test_non_finite_config_numbers_are_one_line():
    line = _error(run("evaluate", "--gpu", "h100-sxm", "--model",
                      "{model_type: llama, hidden_size: .inf, num_hidden_layers: 2, num_attention_heads: 4, "
                      "vocab_size: 1000, intermediate_size: 256}"))
    assert "hidden_size = inf is not a whole number" in line


def test_profile_passes_everything_after_double_dash_to_torchrun(tmp_path, monkeypatch):
    # README: `gpuplan profile SCENARIO --nnodes 2 -- --rdzv-endpoint host:29400`
    from gpuplan import cli
    from gpuplan.errors import GpuplanError

    seen: dict = {}

    def fake_profile(sc, **kw):
        seen.update(kw)
        raise GpuplanError("stopped before launching")
    monkeypatch.setattr("gpuplan.profile.run.profile", fake_profile)
    sc = tmp_path / "sc.yaml"
    sc.write_text("model: llama-3.2-1b\nhardware: {gpu: h100-sxm}\n")
    assert cli.main(["profile", str(sc), "--nnodes", "2", "--device", "cpu", "--no-store", "--",
                     "--rdzv-endpoint", "h:29400"]) == 2
    assert seen["extra_args"] == ["--rdzv-endpoint", "h:29400"] and seen["nnodes"] == 2
    assert cli.main(["evaluate", "--example", "--", "x"]) == 2  # only profile takes torchrun options


def test_a_power_cap_is_checked_against_the_listed_gpu_that_allows_most():
    # 900 W caps a B200 (1000 W TDP); with H100 (700 W) beside it the plan must not be refused
    out = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,b200", "--power-limit", "900", "--tokens", "1T",
              "--max-gpus", "16", "--json")
    assert out.returncode == 0, out.stderr
    assert "above the 700 W TDP" in _error(run("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,a100-80gb-sxm",
                                              "--power-limit", "900", "--tokens", "1T", "--max-gpus", "16"))
