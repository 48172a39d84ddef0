"""Bad scenario input of every kind is ONE line naming the problem and the fix (exit 2), never a
traceback, a hang or a silent wrong default. Cases from the fuzzing report (A1-A4, B1, D1-D23, E4-E21)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuplan.catalog.hardware import get_fabric, get_gpu
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.io.scenario import parse_scenario, read_file
from gpuplan.spec import LORA_TARGETS_ALL
from gpuplan.units import fmt_count, parse_bytes, parse_count, parse_duration, parse_money

CLI = [sys.executable, "-m", "gpuplan.cli"]
BASE = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm"]


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def one_line_error(out: subprocess.CompletedProcess, *needles: str) -> str:
    """The CLI contract for bad input: exit 2, nothing on stdout, one stderr line with the needles."""
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def sc(training: dict | None = None, hardware: dict | None = None, layout: dict | None = None,
       model: object = "llama-3.1-8b"):
    raw: dict = {"model": model, "hardware": {"gpu": "h100-sxm", **(hardware or {})}}
    if training is not None:
        raw["training"] = training
    if layout is not None:
        raw["layout"] = layout
    return parse_scenario(raw)


def error(*needles: str, **kw) -> str:
    """parse_scenario(**kw) raises one GpuplanError line holding every needle."""
    with pytest.raises(GpuplanError) as err:
        sc(**kw)
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


# ---- A1: a section that is not a mapping --------------------------------------------------------
@pytest.mark.parametrize("value", ["[1, 2]", "5", "abc"])
def test_training_that_is_not_a_mapping_is_one_line(tmp_path, value):
    f = write(tmp_path, "s.yaml", f"model: llama-3.1-8b\nhardware: {{gpu: h100-sxm}}\ntraining: {value}\n")
    one_line_error(run("evaluate", f), "training must be a mapping of keys")


def test_null_section_is_an_empty_one_and_flags_still_apply(tmp_path):
    f = write(tmp_path, "s.yaml", "model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\ntraining:\n")
    out = run("evaluate", f, "--seq-len", "2048", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["scenario"]["training"]["seq_len"] == 2048


# ---- A2, D17: lora_targets ---------------------------------------------------------------------
@pytest.mark.parametrize(("value", "needle"), [
    (5, "got 5"), (True, "got true"), ({"q_proj": 1}, "got a mapping"), ([1, 2], "got 1"),
    ([], "is empty"), ("q_proj,q_proj", "q_proj more than once"), (["v_proj", "v_proj"], "v_proj more than once"),
    ("q_proj,bogus", "'bogus' names no linear layer of Llama-3.1-8B"), (["q-proj"], "'q-proj' is not a module name"),
])
def test_bad_lora_targets_are_rejected(value, needle):
    error("training.lora_targets", needle, training={"method": "lora", "lora_targets": value})


def test_lora_targets_accept_lists_text_and_all():
    assert sc({"method": "lora", "lora_targets": "q_proj, v_proj"}).training.lora_targets == ("q_proj", "v_proj")
    assert sc({"method": "lora", "lora_targets": ["o_proj"]}).training.lora_targets == ("o_proj",)
    assert sc({"method": "lora", "lora_targets": "all"}).training.lora_targets == LORA_TARGETS_ALL
    assert sc({"method": "lora", "lora_targets": None}).training.lora_targets == LORA_TARGETS_ALL  # null: default


def test_lora_targets_as_a_flag_with_duplicates_is_one_line():
    one_line_error(run("evaluate", *BASE, "--method", "lora", "--lora-targets", "q_proj,q_proj"),
                   "training.lora_targets", "more than once")


# ---- A3: global_batch_tokens -------------------------------------------------------------------
def test_global_batch_tokens_with_seq_len_zero_names_seq_len():
    one_line_error(run("evaluate", *BASE, "--global-batch-tokens", "4M", "--seq-len=0"),
                   "training.seq_len must be positive")


@pytest.mark.parametrize(("value", "needle"), [
    (0, "must be positive"), (-4096, "must be positive"), (4096.5, "whole number"),
    (1e300, "more than 1,048,576 sequences"), ("4M+1", "cannot read"), (6000, "not a multiple of seq_len=4096"),
])
def test_bad_global_batch_tokens(value, needle):
    error("training.global_batch_tokens", needle, training={"global_batch_tokens": value})


def test_global_batch_tokens_gives_global_batch():
    assert sc({"global_batch_tokens": 2**22, "seq_len": 4096}).training.global_batch == 1024


# ---- A4: model_type not a string ----------------------------------------------------------------
@pytest.mark.parametrize("mt", [["llama"], {"a": 1}, 5])
def test_model_type_that_is_not_a_name(mt):
    with pytest.raises(GpuplanError, match="model_type must be a name"):
        load_model({"model_type": mt, "hidden_size": 64})


def test_model_type_list_in_a_config_file_is_one_line(tmp_path):
    f = write(tmp_path, "config.json", json.dumps({"model_type": ["llama"], "hidden_size": 64}))
    one_line_error(run("evaluate", "--model", f, "--gpu", "h100-sxm"), "model_type must be a name", "list")


# ---- B1: absurd model sizes: an error, quickly ---------------------------------------------------
def test_params_1e30_is_an_error_not_a_hang():
    start = time.monotonic()
    one_line_error(run("evaluate", "--model", "{params: 1e30}", "--gpu", "h100-sxm"), "params", "limit")
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("n", [1e16, 1e20, "1e18"])
def test_params_above_1e15_are_rejected(n):
    with pytest.raises(GpuplanError, match=r"params = .* is more than the limit"):
        load_model({"params": n})


def test_params_1e15_is_still_a_model():
    spec = load_model({"params": 1e15})
    assert spec.params == 10**15 and spec.n_layers < 10_000


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("num_hidden_layers", 10_000_000, "num_hidden_layers = 10,000,000 is more than the limit"),
    ("hidden_size", 2**40, "hidden_size = 1,099,511,627,776 is more than the limit"),
    ("vocab_size", 1e13, "vocab_size = 10,000,000,000,000 is more than the limit"),
    ("intermediate_size", 2**31, "intermediate_size"),
])
def test_huge_config_sizes_are_rejected_quickly(key, value, needle):
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "vocab_size": 32000, "intermediate_size": 11008, key: value}
    start = time.monotonic()
    with pytest.raises(GpuplanError, match=needle):
        load_model(cfg)
    assert time.monotonic() - start < 5


def test_shapes_whose_product_is_absurd_are_rejected():
    cfg = {"model_type": "llama", "hidden_size": 2**20, "num_hidden_layers": 9000, "num_attention_heads": 8192,
           "vocab_size": 32000, "intermediate_size": 2**22}
    with pytest.raises(GpuplanError, match="more than the limit 1e\\+15"):
        load_model(cfg)


# ---- D1: a decimal comma is not a thousands separator -------------------------------------------
@pytest.mark.parametrize(("text", "fix"), [("2,5", "2.5"), ("1,5T", "1.5T"), ("10,00", "10.00"), ("1,0000", "1.0000"),
                                           ("1,000,00", "1.000,00")])
def test_decimal_comma_is_rejected_with_a_decimal_point_fix(text, fix):
    with pytest.raises(GpuplanError) as err:
        parse_count(text, "training.tokens")
    assert "comma only groups thousands" in str(err.value) and f"e.g. {fix}" in str(err.value)


@pytest.mark.parametrize(("text", "value"), [("1,000,000", 1e6), ("1,500.5", 1500.5), ("1,000T", 1e15),
                                             ("-1,000", -1000.0), ("1_000", 1000.0)])
def test_thousands_groups_still_read(text, value):
    assert parse_count(text) == value


def test_price_with_a_decimal_comma_is_one_line():
    one_line_error(run("evaluate", "--example", "--price", "2,5"), "hardware.price_per_gpu_hour", "2.5")
    assert parse_money("$1,500.50") == 1500.5


# ---- D3: steps and tokens ------------------------------------------------------------------------
def test_steps_and_tokens_together_are_an_error():
    one_line_error(run("evaluate", *BASE, "--tokens", "1T", "--steps", "100"), "training.tokens or training.steps")
    assert sc({"steps": 100}).training.steps == 100
    assert sc({"tokens": "1T", "steps": None}).training.tokens == 1e12  # a null is not given


# ---- D4: top-k above the expert count -------------------------------------------------------------
MIXTRAL = {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 128, "num_local_experts": 2}


def test_top_k_above_the_experts_is_rejected():
    with pytest.raises(GpuplanError, match="num_experts_per_tok = 8 is more than the 2 experts"):
        load_model({**MIXTRAL, "num_experts_per_tok": 8})
    spec = load_model({**MIXTRAL, "num_experts_per_tok": 2})
    assert spec.params_active == spec.params


def test_deepseek_top_k_above_the_experts_is_rejected():
    cfg = json.loads((Path(__file__).parents[1] / "src/gpuplan/catalog/models/deepseek-v2-lite.json").read_text())
    cfg["num_experts_per_tok"] = cfg["n_routed_experts"] + 1
    with pytest.raises(GpuplanError, match="is more than the .* experts"):
        load_model(cfg)


# ---- D5: LoRA rank -----------------------------------------------------------------------------------
def test_lora_rank_above_the_smallest_targeted_dimension_is_rejected():
    # Llama-3.1-8B: k_proj and v_proj are 1024 × 4096 (8 KV heads × 128)
    error("training.lora_rank = 2048", "at most 1024", training={"method": "lora", "lora_rank": 2048})
    assert sc({"method": "lora", "lora_rank": 1024}).training.lora_rank == 1024
    # targets q_proj and o_proj only: 4096 × 4096
    assert sc({"method": "lora", "lora_rank": 2048, "lora_targets": ["q_proj", "o_proj"]}).training.lora_rank == 2048
    error("at most 4096", training={"method": "qlora", "lora_rank": 4097, "lora_targets": ["q_proj"]})


def test_lora_rank_1e9_is_one_line():
    one_line_error(run("evaluate", *BASE, "--method", "lora", "--lora-rank", "1e9"), "training.lora_rank", "limit")


# ---- D6, D18: huge values --------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value", "needle"), [
    ("--gpus", "1e12", "hardware.gpus = 1,000,000,000,000 is more than the limit 1,048,576"),
    ("--global-batch", "1e15", "training.global_batch"),
    ("--tokens", "1e30", "training.tokens"),
    ("--price", "1e300", "hardware.price_per_gpu_hour"),
    ("--power-limit", "1e9", "TDP"),
    ("--power-limit", "5000", "above the 700 W TDP"),
    ("--power-limit", "0", "must be positive"),
    ("--gpus-per-node", "1e9", "hardware.gpus_per_node"),
    ("--micro-batch", "1e6", "layout.micro_batch"),
    ("--seq-len", "1e15", "training.seq_len"),
])
def test_huge_flag_values_are_one_line(flag, value, needle):
    one_line_error(run("evaluate", *BASE, flag, value), needle)


@pytest.mark.parametrize(("section", "values", "needle"), [
    ("training", {"tokens": 1e300}, "training.tokens"),
    ("training", {"tokens": 1e18}, "training.tokens"),
    ("training", {"steps": 1e12}, "training.steps"),
    ("training", {"global_batch": 2**21}, "training.global_batch"),
    ("training", {"seq_len": 2**25}, "training.seq_len"),
    ("training", {"lora_rank": 2**17}, "training.lora_rank"),
    ("hardware", {"gpus": 2**21}, "hardware.gpus"),
    ("hardware", {"gpus_per_node": 2048}, "hardware.gpus_per_node"),
    ("hardware", {"price_per_gpu_hour": 1001}, "hardware.price_per_gpu_hour"),
    ("hardware", {"power_limit_w": 701}, "hardware.power_limit_w"),
    ("layout", {"micro_batch": 2**17}, "layout.micro_batch"),
    ("layout", {"tp": 2**21}, "layout.tp"),
])
def test_values_above_the_documented_limits_are_rejected(section, values, needle):
    error(needle, "limit" if "power" not in needle else "TDP", **{section: values})


def test_values_at_the_limits_are_accepted():
    s = sc({"tokens": 1e17, "seq_len": 2**24, "global_batch": 2**20}, {"price_per_gpu_hour": 1000,
                                                                       "power_limit_w": 700})
    assert s.training.tokens == 1e17 and s.hardware.power_limit_w == 700
    assert sc(hardware={"gpus": 2**20, "gpus_per_node": 1024}).hardware.gpus == 2**20


# ---- D9: safetensors with negative dimensions ------------------------------------------------------
def test_safetensors_with_a_negative_dimension_is_rejected(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "vocab_size": 100, "intermediate_size": 128}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [10, -5], "data_offsets": [0, 0]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(GpuplanError, match=r"tensor w has no valid shape .*\[10, -5\]"):
        load_model(tmp_path)


# ---- D10, E7, E9, E10, E21: the scenario file itself --------------------------------------------------
def test_an_empty_list_file_is_an_error(tmp_path):
    one_line_error(run("evaluate", write(tmp_path, "s.yaml", "[]\n")), "holds no scenarios")
    one_line_error(run("plan", write(tmp_path, "s.json", "[]")), "holds no scenarios")


def test_a_folder_as_the_scenario(tmp_path):
    one_line_error(run("evaluate", str(tmp_path)), "is a folder")


def test_deeply_nested_json_says_json_on_one_line(tmp_path):
    f = write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    msg = one_line_error(run("evaluate", f), "malformed JSON", "nested too deeply")
    assert "YAML" not in msg


def test_binary_file_is_one_line(tmp_path):
    f = write(tmp_path, "bin.yaml", bytes(range(256)) * 4)
    one_line_error(run("evaluate", f), "not UTF-8")


def test_control_character_in_yaml_is_one_line(tmp_path):
    f = write(tmp_path, "c.yaml", "model: llama\x07-3.1-8b\nhardware: {gpu: h100-sxm}\n")
    one_line_error(run("evaluate", f), "malformed YAML", "special characters")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
def test_utf16_file_says_utf8(tmp_path, encoding):
    f = write(tmp_path, "s.yaml", "model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\n".encode(encoding))
    with pytest.raises(GpuplanError, match="UTF-8"):
        read_file(f)


def test_utf8_with_a_byte_order_mark_is_read(tmp_path):
    f = write(tmp_path, "s.json", "\ufeff" + json.dumps({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}}))
    assert read_file(f)["model"] == "llama-3.1-8b"


# ---- D12: null is "not given" ---------------------------------------------------------------------
def test_null_layout_and_training_names_are_not_given():
    s = sc({"precision": None, "optimizer": None, "method": None},
           layout={"recompute": None, "pp_schedule": None, "offload": None, "zero3_gather": None,
                   "sequence_parallel": None, "tp": None})
    assert s.layout == {}  # left open: plan searches them
    assert s.training.precision == "bf16" and s.training.method == "full"
    assert sc(hardware={"gpus": None, "gpus_per_node": None}).hardware.gpus == 1


@pytest.mark.parametrize(("section", "key", "value"), [("layout", "recompute", ["full"]),
                                                       ("training", "precision", ["bf16"]),
                                                       ("layout", "pp_schedule", 5)])
def test_non_text_names_are_rejected(section, key, value):
    error(f"{section}.{key} must be a name", **{section: {key: value}})


# ---- D21: bare numbers without a unit ----------------------------------------------------------------
def test_deadline_without_a_unit_is_an_error():
    one_line_error(run("plan", *BASE, "--tokens", "1T", "--max-gpus", "8", "--deadline", "14"),
                   "--deadline", "no unit", "14d")
    assert parse_duration("14d", "--deadline") == 14 * 86400
    assert parse_duration("600", "--timeout", bare="s") == 600  # profile --timeout documents bare seconds
    with pytest.raises(GpuplanError, match="no unit"):
        parse_duration(30, "--deadline")


@pytest.mark.parametrize(("value", "needle"), [("2", "has no unit"), (2, "has no unit"), ("1KiB", "less than 1 GiB"),
                                               ("0", "must be positive"), ("2EiB", "unknown unit")])
def test_host_memory_needs_a_unit(value, needle):
    error("hardware.host_memory", needle, hardware={"host_memory": value})


def test_host_memory_with_a_unit_is_read():
    assert sc(hardware={"host_memory": "2TiB"}).hardware.host_memory_bytes == 2 * 2**40
    assert sc(hardware={"host_memory": 2 * 2**40}).hardware.host_memory_bytes == 2 * 2**40  # bytes, ≥ 1 GiB
    assert parse_bytes(512) == 512  # elsewhere a bare number is still bytes


def test_host_memory_flag_without_a_unit_is_one_line():
    one_line_error(run("evaluate", *BASE, "--host-memory", "2"), "hardware.host_memory", "no unit")


# ---- D23, E6: names of GPUs and fabrics -----------------------------------------------------------------
@pytest.mark.parametrize("key", ["scale_out", "scale_up"])
def test_empty_fabric_is_an_error(key):
    error(f"hardware.{key} is empty", hardware={key: ""})


@pytest.mark.parametrize(("gpu", "needle"), [
    ("all", "unknown GPU 'all': `gpuplan gpus` lists them"),
    ("", "hardware.gpu is empty"),
    (None, "has no hardware.gpu"),
    (["h100-sxm"], "hardware.gpu must be a name, got a list"),
])
def test_gpu_name_errors_read_cleanly(gpu, needle):
    msg = error(needle, hardware={"gpu": gpu})
    assert "(`" not in msg and "'None'" not in msg and "[" not in msg.split("got")[0]


def test_fabric_errors_read_cleanly():
    with pytest.raises(GpuplanError) as err:
        get_fabric("bogus", "scale_out")
    assert str(err.value).startswith("unknown fabric 'bogus': known: ") and "(" not in str(err.value)
    assert get_gpu("H100 SXM").id == "h100-sxm"


def test_gpu_list_as_a_flag_value_in_a_file_is_one_line(tmp_path):
    f = write(tmp_path, "s.yaml", "model: llama-3.1-8b\nhardware: {gpu: [h100-sxm]}\n")
    one_line_error(run("evaluate", f), "hardware.gpu must be a name, got a list")


# ---- E4, E5: {params: N} messages and names ---------------------------------------------------------------
@pytest.mark.parametrize(("key", "example"), [("layers", "layers: 32"), ("vocab", "vocab: 32000"),
                                              ("seq", "seq: 4096"), ("hidden", "hidden: 4096")])
def test_params_hint_errors_give_an_example_that_fits_the_key(key, example):
    with pytest.raises(GpuplanError) as err:
        load_model({"params": 7e9, key: 0})
    assert f"give e.g. {example}" in str(err.value) and "7e9" not in str(err.value)


@pytest.mark.parametrize(("n", "text"), [(999.96e6, "1B"), (999.6e3, "1M"), (999.5, "1k"), (8.03e9, "8.03B"),
                                         (1.4e12, "1.4T"), (512e3, "512k"), (6e20, "600,000P"), (12, "12"),
                                         (-999.96e6, "-1B"), (0.25, "0.25")])
def test_fmt_count_never_prints_scientific_notation(n, text):
    assert fmt_count(n) == text


def test_fmt_count_has_no_exponent_anywhere():
    for e in range(-3, 22):
        for m in (1.0, 9.994, 9.9951, 9.99999):
            assert "e" not in fmt_count(m * 10**e), m * 10**e


def test_params_1e6_is_named_custom_1m():
    assert load_model({"params": 1e6}).name == "custom-1M"
    assert load_model({"params": "7B"}).name == "custom-7B"


# ---- E8: trace_calibration ---------------------------------------------------------------------------
def test_trace_calibration_folder_says_folder(tmp_path):
    error("training.trace_calibration", "is a folder", training={"trace_calibration": str(tmp_path)})


def test_trace_calibration_true_means_the_default_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPLAN_CACHE_DIR", str(tmp_path))
    (tmp_path / "calibration.json").write_text(json.dumps({"llama": {"n": 1, "activations": 1.125}}))
    assert sc({"trace_calibration": True}).corrections.activations == 1.125
    assert sc({"trace_calibration": False}).corrections.activations == 1.0
    error("training.trace_calibration must be default or the path", training={"trace_calibration": 5})


def test_batch_tokens_as_papers_write_them_are_read_as_whole_sequences_and_said_so():
    # "4M" is 4,000,000, not whole sequences of 4,096: read as the power of two it rounds, 1,024 sequences =
    # 4,194,304 tokens (Llama 2's "4M tokens", arXiv:2307.09288 Table 1), and said under assumed
    s = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                        "training": {"global_batch_tokens": "4M", "seq_len": 4096}})
    assert s.training.global_batch == 1024
    assert any(r[0] == "training.global_batch_tokens" and r[2] == 4_194_304 for r in s.read_as)
    # 3,000,000 at 2,048 is 1,464.8 sequences: the count within 2 % with the most factors of two, 23 x 64
    three = parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                            "training": {"global_batch_tokens": "3M", "seq_len": 2048}})
    assert three.training.global_batch == 1472
    with pytest.raises(GpuplanError, match=r"use e\.g\. 8,192 \(2 sequences\)"):  # 1.46 sequences: too far off
        parse_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                        "training": {"global_batch_tokens": 6000, "seq_len": 4096}})


# ---- sizes written with k or M: 1024 for lengths, batches and GPU counts, decimal for token totals -------------
@pytest.mark.parametrize("section, key, text, value", [
    ("training", "seq_len", "8k", 8192),          # an "8k context" is 8,192 positions
    ("training", "seq_len", "128K", 131072),
    ("training", "global_batch", "2k", 2048),
    ("hardware", "gpus", "16k", 16384),           # Llama 3's "16K H100 GPUs" (Dubey et al. 2024, Sec. 3.3)
    ("training", "tokens", "15T", 15e12),         # a token total stays decimal
    ("training", "steps", "100k", 100_000),
])
def test_sizes_with_a_suffix(section, key, text, value):
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 8}}
    raw[section] = {**raw.get(section, {}), key: text}
    sc = parse_scenario(raw)
    assert getattr(sc.hardware if section == "hardware" else sc.training, key) == value
    assert parse_count("8k", "training.seq_len") == 8192 and parse_count("8k") == 8000


@pytest.mark.parametrize("section, key, text, value", [
    # a count with the word for its quantity, as run descriptions write it; a scale word is its suffix
    ("training", "global_batch", "2048 sequences", 2048),
    ("training", "seq_len", "8192 tokens", 8192),
    ("training", "tokens", "300 billion tokens", 300e9),
    ("training", "tokens", "1.4T tokens", 1.4e12),
    ("hardware", "gpus", "2048 GPUs", 2048),
    ("layout", "tp", "8-way", 8),
    ("layout", "pp", "16 stages", 16),
])
def test_a_count_with_its_unit_word(section, key, text, value):
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "gpus": 64}}
    raw[section] = {**raw.get(section, {}), key: text}
    sc = parse_scenario(raw)
    got = sc.layout[key] if section == "layout" else getattr(sc.hardware if section == "hardware" else sc.training, key)
    assert got == value


def test_a_unit_word_of_another_quantity_is_refused():
    with pytest.raises(GpuplanError, match="unknown suffix 'sequences'"):
        parse_count("2048 sequences", "training.tokens")
    # a batch in tokens, as run descriptions write it ("4M tokens"): global_batch_tokens takes it, others name it
    assert parse_count("4M tokens", "training.global_batch_tokens") == 4e6
    with pytest.raises(GpuplanError, match=r"counts tokens, but global_batch counts sequences: .*global_batch_tokens"):
        parse_count("4M tokens", "training.global_batch")
    with pytest.raises(GpuplanError, match="counts tokens, but micro_batch counts sequences"):
        parse_count("8192 tokens", "layout.micro_batch")
    with pytest.raises(GpuplanError, match="a node count is hardware.nodes"):
        parse_count("256 nodes", "hardware.gpus")
