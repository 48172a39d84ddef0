"""Open catalogues (issue 13, item 7): a user catalogue file ($GPUPLAN_CATALOG or --catalog) adds GPUs,
fabrics and models under the built-in rules, with errors naming the file and the entry; NVL72 racks are
the scale-up domain of GB200/GB300 (72 GPUs over NVLink, trays of 4 for the host); Llama-shaped Hugging
Face families read through the generic decoder mapping, with a note."""

from __future__ import annotations

import json

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog import load_json
from gpuplan.catalog.hardware import get_fabric, get_gpu, gpus, make_hardware
from gpuplan.catalog.models import list_models, load_model
from gpuplan.catalog.user import ENV, check_fabric_row, check_gpu_row, use_catalog
from gpuplan.cli import main
from gpuplan.errors import GpuplanError
from gpuplan.model.comm import topology
from gpuplan.search.enumerate import tp_domain

# NVIDIA A10 datasheet: BF16 Tensor Core 125 TFLOPS (250 with sparsity), 24 GB GDDR6, 600 GB/s
CATALOG = """
gpus:
  - {id: my-a10, base: a10g, name: NVIDIA A10 (mine), bf16_dense_tflops: 125, fp16_dense_tflops: 125,
     source: "NVIDIA A10 datasheet: BF16 125 TFLOPS dense"}
  - {id: lab-gpu, name: Lab GPU, vendor: nvidia, memory_gib: 48, memory_bw_tb_per_s: 0.96, bf16_dense_tflops: 181,
     scale_up: lab-link, scale_up_gb_per_s: 100, gpus_per_node: 4, scale_up_domain: 4,
     source: "vendor sheet"}
fabrics:
  - {id: lab-link, name: Lab link, kind: scale_up, gb_per_s_per_gpu: 100, domain_gpus: 4, source: "vendor sheet"}
  - {id: roce-200g-x4, name: RoCE 200G x4, kind: scale_out, link_gbit_per_s: 200, links_per_node: 4,
     source: "our cluster"}
models:
  my-tiny: {model_type: llama, hidden_size: 2048, num_hidden_layers: 16, num_attention_heads: 16,
            intermediate_size: 5632, vocab_size: 32000, tie_word_embeddings: false}
"""


@pytest.fixture
def user_catalog(tmp_path, monkeypatch):
    path = tmp_path / "mine.yaml"
    path.write_text(CATALOG)
    monkeypatch.setenv(ENV, str(path))
    yield path
    use_catalog(None)


def test_user_gpus_fabrics_and_models_join_the_catalogue(user_catalog):
    a10 = get_gpu("my-a10")
    assert a10.peak_flops["bf16"] == 125e12 and a10.memory_bytes == get_gpu("a10g").memory_bytes
    assert get_gpu("lab-gpu").scale_up == "lab-link" and get_fabric("lab-link").domain_gpus == 4
    assert {"my-a10", "lab-gpu"} <= {g.id for g in gpus()}
    assert load_model("my-tiny").n_layers == 16
    assert any(r["id"] == "my-tiny" and r["source"] == str(user_catalog) for r in list_models())
    hw = make_hardware("lab-gpu", gpus=8, scale_out="roce-200g-x4")
    assert hw.scale_out.links_per_node == 4 and hw.gpus_per_node == 4


def test_a_user_gpu_answers_with_a_time(user_catalog):
    sc = make("my-tiny", "my-a10", 2, training={"tokens": 1e9, "method": "qlora"})
    est = evaluate(sc).to_json()
    assert est["time"]["train_s"] > 0 and est["memory"]["fits"]


def test_catalog_flag_and_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"fabrics": [{"id": "eth-400g-x8", "name": "Eth 400G x8", "kind": "scale_out",
                                             "link_gbit_per_s": 400, "links_per_node": 8, "source": "ours"}]}))
    assert main(["fabrics", "--catalog", str(path), "--json"]) == 0
    assert "eth-400g-x8" in capsys.readouterr().out
    assert main(["fabrics", "--json"]) == 0  # --catalog holds for its command only
    assert "eth-400g-x8" not in capsys.readouterr().out
    monkeypatch.setenv(ENV, str(path))
    assert main(["evaluate", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--gpus", "16",
                 "--scale-out", "eth-400g-x8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["hardware"]["scale_out"] == "eth-400g-x8"


@pytest.mark.parametrize(("text", "message"), [
    ("gpus:\n  - {id: x1, base: h100-sxm, hbm_gb: 96}\n", "gpus[0] (x1): hbm_gb is not a GPU key"),
    ("gpus:\n  - {id: x2, name: X, vendor: nvidia, memory_gib: 40}\n", "gpus[0] (x2): missing memory_bw_tb_per_s"),
    ("gpus:\n  - {id: x3, base: h100-sxm, memory_gib: -4}\n", "gpus[0] (x3): memory_gib must be a positive number"),
    ("gpus:\n  - {id: x4, base: h100-sxm, scale_up: ib-ndr-400g}\n", "gpus[0] (x4): scale_up 'ib-ndr-400g' is not"),
    ("gpus:\n  - {id: H100, base: h100-sxm}\n", "gpus[0] (H100): the GPU name 'H100' is already taken"),
    ("gpus:\n  - {id: x5, base: nope}\n", "gpus[0] (x5): base 'nope' is not a catalogue GPU"),
    ("gpus:\n  - {id: x6, base: h100-sxm, bf16_dense_tflops: 3000}\n", "fp8_dense_tflops 1978.9 must be above"),
    ("fabrics:\n  - {id: f1, name: F, kind: scale_out, source: s}\n", "fabrics[0] (f1): missing link_gbit_per_s"),
    ("fabrics:\n  - {id: f2, name: F, kind: wifi, source: s}\n", "fabrics[0] (f2): kind must be scale_up or"),
    ("fabrics:\n  - {id: f3, name: F, kind: scale_up, gb_per_s_per_gpu: 100, domain_gpus: 8, source: s,\n"
     "     collective_curve: pcie4}\n",
     "fabrics[0] (f3): collective_curve names 'pcie4', which is not a scale_up fabric with"),
    ("fabrics:\n  - {id: f4, name: F, kind: scale_up, gb_per_s_per_gpu: 100, domain_gpus: 8, source: s,\n"
     "     collective_curve: {collective: all_reduce, gpus: 8, algorithm: ring, bytes: [2048, 1024],\n"
     "                        busbw_gb_per_s: [1, 2], source: s}}\n", "collective_curve.bytes must be ascending"),
    ("fabrics:\n  - {id: f5, name: F, kind: scale_up, gb_per_s_per_gpu: 100, domain_gpus: 8, source: s,\n"
     "     nvls_efficiency: 1.5}\n", "fabrics[0] (f5): nvls_efficiency is a share of line rate"),
    ("models:\n  m1: {model_type: llama, hidden_size: 64}\n", "models[0] (m1): "),
    ("models:\n  llama-3.1-8b: {params: 8e9}\n", "models[0] (llama-3.1-8b): the model name"),
    ("racks: []\n", "'racks' is not a catalogue section"),
    ("gpus: [\n", "malformed YAML"),
])
def test_errors_name_the_file_and_the_entry(tmp_path, monkeypatch, capsys, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    monkeypatch.setenv(ENV, str(path))
    rc = main(["evaluate", "--model", "m1" if "m1" in text else "llama-3.2-1b", "--gpu", "h100-sxm"])
    err = capsys.readouterr().err
    assert rc == 2 and str(path) in err and message in err and "Traceback" not in err


def test_a_missing_catalogue_file_is_one_clear_error(tmp_path, capsys):
    assert main(["gpus", "--catalog", str(tmp_path / "none.yaml")]) == 2
    assert "catalogue file not found" in capsys.readouterr().err


def test_a_user_fabric_brings_its_own_measured_sweep(tmp_path, monkeypatch):
    # a scale-up fabric with a published sweep of its own: the model reads its latency off the smallest
    # message (32 KiB in 114.7 µs), its efficiency off the largest (80 GB/s busbw on a 100 GB/s link:
    # 0.8) and its ramp off the rest: at 1 MiB (183.5 µs) the bandwidth term takes 68.8 µs where the
    # 1 GiB rate, 21.9 ps per byte, would take 22.9 µs — a share of 0.33
    path = tmp_path / "mine.yaml"
    path.write_text("fabrics:\n  - {id: my-link, name: Mine, kind: scale_up, gb_per_s_per_gpu: 100, domain_gpus: 8,\n"
                    "     source: my nccl-tests run,\n"
                    "     collective_curve: {collective: all_reduce, gpus: 8, algorithm: ring,\n"
                    "     bytes: [32768, 1048576, 1073741824], busbw_gb_per_s: [0.5, 10, 80], source: my run}}\n"
                    "gpus:\n  - {id: my-gpu, base: h100-sxm, scale_up: my-link}\n")
    monkeypatch.setenv(ENV, str(path))
    use_catalog(None)
    topo = topology(make_hardware("my-gpu", gpus=8))
    assert topo.bw_up == pytest.approx(80e9, rel=1e-3)
    assert topo.share(2**30) == 1.0 and topo.share(2**20) == pytest.approx(0.333, rel=0.01)
    assert topo.hops[0] == pytest.approx((114.688e-6 - 8.4e-6) / 14, rel=1e-3)


def test_built_in_rows_pass_the_rules_user_rows_must_pass():
    fabrics = load_json("fabrics.json")["fabrics"]
    kinds = {r["id"]: r["kind"] for r in fabrics}
    for r in fabrics:
        check_fabric_row(r, f"fabrics.json {r['id']}")
        for key in ("collective_curve", "collective_ramp"):  # a borrowed sweep names a fabric with one
            if isinstance(r.get(key), str):
                assert isinstance(next(x for x in fabrics if x["id"] == r[key])["collective_curve"], dict)
    for r in load_json("gpus.json")["gpus"]:
        check_gpu_row(r, f"gpus.json {r['id']}", kinds)


# ---- NVL72: the rack is the NVLink domain, the tray is the host --------------------------------------
# NVIDIA GB200 NVL72 datasheet: 72 Blackwell GPUs in one NVLink domain, 130 TB/s of NVLink bandwidth
# (1.8 TB/s per GPU, both directions = 900 GB/s each way); compute trays of 4 GPUs (2 Grace + 4 Blackwell)

@pytest.mark.parametrize("gpu", ["gb200", "gb300"])
def test_nvl72_domain_is_72_gpus_on_trays_of_4(gpu):
    hw = make_hardware(gpu, gpus=72)
    assert hw.gpus_per_node == 4 and hw.scale_up.domain_gpus == 72
    assert topology(hw).domain == 72 and tp_domain(hw) == 72
    assert hw.scale_up.bytes_per_s_per_gpu * 2 * 72 == pytest.approx(130e12, rel=0.01)


def test_tensor_parallelism_across_trays_stays_on_nvlink():
    # tp=8 spans two 4-GPU trays of one rack: the same NVLink collectives as if the host held 8 GPUs
    trays = evaluate(make("llama-3.1-70b", "gb200", 16, layout={"tp": 8, "pp": 1})).to_json()
    hosts8 = evaluate(make("llama-3.1-70b", "gb200", 16, hardware={"gpus_per_node": 8},
                           layout={"tp": 8, "pp": 1})).to_json()
    assert trays["time"]["step_s"] == pytest.approx(hosts8["time"]["step_s"], rel=1e-9)


def test_plan_on_nvl72_searches_tensor_parallelism_beyond_the_tray():
    from gpuplan.api import plan_scenario

    res = plan_scenario(make("llama-3.1-405b", "gb200", None, training={"tokens": 1e11}), max_gpus=144,
                        top_k=50).to_json()
    assert any(c["scenario"]["layout"]["tp"] == 8 for c in res["candidates"])


# ---- the generic decoder mapping ----------------------------------------------------------------------

def test_olmo2_reads_through_the_generic_mapping_with_a_note():
    # allenai/OLMo-2-1124-7B config.json (shapes); the Hub's safetensors total: 7,298,617,344 parameters
    cfg = {"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 100352, "rms_norm_eps": 1e-6,
           "rope_theta": 500000, "tie_word_embeddings": False, "max_position_embeddings": 4096}
    m = load_model(cfg)
    h, L, f, V = 4096, 32, 11008, 100352
    # per block: q/k/v/o, the SwiGLU MLP, q_norm and k_norm over the whole projections, the two post-norms
    assert m.params == L * (4 * h * h + 3 * h * f + 4 * h) + 2 * V * h + h == 7_298_617_344
    assert any("generic Llama-shaped decoder mapping" in a and "post-norm" in a for a in m.assumed)
    assert m.post_norms  # OLMo 2 is post-norm: Megatron's pretrain_gpt.py cannot build it


@pytest.mark.parametrize(("cfg", "words"), [
    # baichuan-inc/Baichuan2-7B-Base config.json (shapes; multi-head attention, W_pack fused q/k/v)
    ({"model_type": "baichuan", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
      "num_hidden_layers": 32, "vocab_size": 125696, "rms_norm_eps": 1e-6}, "W_pack"),
    # internlm/internlm2-7b config.json (shapes; GQA 32/8, wqkv fused)
    ({"model_type": "internlm2", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
      "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 92544, "bias": False}, "wqkv"),
])
def test_fused_qkv_llama_families_read_as_llama_with_a_note(cfg, words):
    m = load_model(cfg)
    llama = load_model({**cfg, "model_type": "llama"})
    # the fused projections hold the Llama shapes: the same parameters, to the parameter
    assert m.params == llama.params
    assert (m.n_heads, m.n_kv_heads, m.ffn) == (llama.n_heads, llama.n_kv_heads, llama.ffn)
    assert any("generic Llama-shaped decoder mapping" in a and words in a for a in m.assumed)


def test_baichuan2_7b_holds_its_published_count():
    # Baichuan 2 (Yang et al. 2023, arXiv:2309.10305) 7B: hidden 4096, 32 layers, 32 heads, ffn 11008, vocab
    # 125,696 — 7,505,973,248 parameters with untied embeddings (the "7B" of the paper, 7.5B)
    m = load_model({"model_type": "baichuan", "hidden_size": 4096, "intermediate_size": 11008,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 125696})
    assert m.params == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 2 * 125696 * 4096 + 4096


def test_an_unknown_family_says_how_to_read_it_as_llama():
    with pytest.raises(GpuplanError, match="model_type: llama"):
        load_model({"model_type": "mystery", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 100})


def test_an_inline_gpu_is_named_in_the_text_answers(tmp_path, capsys):
    gpu = {"base": "h100-sxm", "id": "h100-96gb", "name": "H100 96GB (Grand Teton)", "memory_gib": 96}
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"model": "llama-3.2-1b", "hardware": {"gpu": gpu, "gpus": 8},
                                "training": {"seq_len": 2048, "tokens": 1e9}}))
    for command in ("evaluate", "plan"):
        assert main([command, str(path)]) == 0
        out = capsys.readouterr().out
        assert "8× H100 96GB (Grand Teton)" in out and "'base'" not in out
