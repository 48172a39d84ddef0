"""The ZeRO-3 gather styles that the DeepSpeed rows of Narayanan et al. 2021 Table 2 need."""

import pytest
from conftest import make

from gpuplan.api import evaluate_scenario as evaluate
from gpuplan.catalog.constants import constant
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.model.dp_comm import gather_calls

GPT3 = {"model_type": "gpt2", "n_layer": 96, "n_embd": 12288, "n_head": 96, "vocab_size": 51200,
        "n_positions": 2048}


def test_gather_calls_per_layer():
    # GPT-2 block: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj — each a module with weight and bias
    gpt = load_model(GPT3).layers[0]
    assert [gather_calls(gpt, s) for s in ("layer", "module", "tensor-sync")] == [1, 6, 12]
    # Llama block: 7 bias-free Linears and 2 RMSNorms
    llama = load_model("llama-3.1-8b").layers[0]
    assert [gather_calls(llama, s) for s in ("layer", "module", "tensor-sync")] == [1, 9, 9]


def _zero3(gpus: int, mb: int, style: str) -> dict:
    sc = make(GPT3, "a100-80gb-sxm", gpus, hardware={"scale_out": "ib-hdr-200g"},
              training={"seq_len": 2048, "global_batch": 1536, "precision": "fp16", "attention": "eager",
                        "dropout": 0.1},
              layout={"zero": 3, "micro_batch": mb, "recompute": "full", "zero3_gather": style})
    return evaluate(sc).to_json()["time"]


def test_blocking_per_tensor_gathers_cost_more_than_prefetched_blocks():
    layer, module, sync = (_zero3(1536, 1, s) for s in ("layer", "module", "tensor-sync"))
    assert layer["step_s"] <= module["step_s"] < sync["step_s"]
    # the compute is the same; only the exposed communication differs
    assert layer["compute_s"] == pytest.approx(module["compute_s"], rel=0.25)
    assert sync["comm_exposed_s"] > 5 * layer["comm_exposed_s"]


def test_blocking_gathers_hurt_more_as_the_group_grows():
    # Narayanan et al. 2021 Table 2: ZeRO-3 at a fixed global batch of 1536 falls from 144 to
    # 44 TFLOP/s per GPU from 384 to 1536 GPUs — the per-step gathers do not shrink with more
    # GPUs and each ring call has 4× the steps
    small, big = _zero3(384, 4, "tensor-sync"), _zero3(1536, 1, "tensor-sync")
    assert big["comm_exposed_s"] > small["comm_exposed_s"]
    assert big["hfu"] < 0.5 * small["hfu"]


def _tp8(step: bool = False, **layout) -> dict:
    sc = make("llama-3.1-70b", "h100-sxm", 256, hardware={"scale_out": "roce-400g"},
              training={"seq_len": 8192, "global_batch": 512, "precision": "fp8"},
              layout={"tp": 8, "zero": 3, "micro_batch": 16, "recompute": "full", **layout})
    est = evaluate(sc)
    return est.time.step if step else est.to_json()["time"]


def test_async_tp_hides_all_but_the_first_of_tp_steps():
    # Wang et al. 2023 (ASPLOS, decomposition): a TP collective split into tp steps runs under the
    # partial matmuls; with matmuls longer than the traffic only the first step (1/tp) stays exposed
    plain, overlapped = _tp8(), _tp8(tp_overlap=True)
    tp = plain["comm_detail"]["tp"]
    assert plain["comm_detail"]["tp_exposed"] == pytest.approx(tp, rel=1e-12)
    assert overlapped["comm_detail"]["tp"] == pytest.approx(tp, rel=1e-12)
    assert overlapped["comm_detail"]["tp_exposed"] == pytest.approx(tp / 8, rel=1e-12)
    # the hidden 7/8 costs interference (comm_interference s of compute per second hidden); the matmuls under the
    # decomposed collectives run as 8 pieces of tokens / 8 rows each, no faster than whole (``pieces``)
    kappa = constant("comm_interference")
    whole, split = _tp8(step=True), _tp8(step=True, tp_overlap=True)
    pieces = (split.compute_s - split.interference_s) - (whole.compute_s - whole.interference_s)
    assert pieces >= 0
    assert overlapped["step_s"] == pytest.approx(plain["step_s"] + pieces - (1 - kappa) * tp * 7 / 8, rel=1e-9)


def test_async_tp_needs_sequence_parallelism():
    with pytest.raises(GpuplanError, match="tp_overlap"):
        _tp8(tp_overlap=True, sequence_parallel=False)


def test_expert_all_to_all_overlap_hides_it_under_the_other_micro_batch():
    # DeepSeek-V3 (arXiv:2412.19437, Sec. 3.2.1): DualPipe pairs chunks so all-to-all runs under
    # computation. Mixtral 8x7B, ep 8 over 64 H100: the a2a is far shorter than the stage's compute,
    # so it is hidden whole; what stays is the interference the overlapped kernels cost.
    def run(ov: bool) -> dict:
        sc = make("mixtral-8x7b", "h100-sxm", 64, training={"global_batch": 512},
                  layout={"ep": 8, "zero": 1, "ep_overlap": ov})
        return evaluate(sc).to_json()["time"]

    plain, over = run(False), run(True)
    ep = plain["comm_detail"]["ep"]
    assert ep > 0 and over["comm_detail"]["ep_exposed"] == 0.0
    assert over["step_s"] == pytest.approx(plain["step_s"] - (1 - constant("comm_interference")) * ep, rel=1e-9)


def test_expert_overlap_needs_expert_parallelism():
    with pytest.raises(GpuplanError, match="ep_overlap"):
        evaluate(make("mixtral-8x7b", "h100-sxm", 8, layout={"ep": 1, "ep_overlap": True}))


def test_async_tp_runs_each_matmul_as_tp_pieces():
    # Wang et al. 2023 / PyTorch's fused_all_gather_matmul and fused_matmul_reduce_scatter: the matmul under a
    # decomposed collective runs as tp GEMMs of tokens / tp rows each; the weight-gradient matmuls stay whole
    from dataclasses import replace

    from gpuplan.catalog.hardware import make_hardware
    from gpuplan.model.compute import device, layer_time, matmul_s
    from gpuplan.spec import Layout, Training

    m = load_model("llama-3.1-70b")
    lg, tr = m.kinds[0], Training(seq_len=4096)
    dev = device(make_hardware("h100-sxm", 64), tr)
    lay = Layout(dp=8, tp=8, zero=1, micro_batch=1, sequence_parallel=True)
    tokens = 4096.0
    whole = layer_time(m, lg, tokens, 4096, lay, tr, dev)
    split = layer_time(m, lg, tokens, 4096, replace(lay, tp_overlap=True), tr, dev)
    mats = [w for w in lg.weights if w.is_matrix and w.group in ("attention", "mlp")]
    assert whole.mm == pytest.approx(sum(matmul_s(tokens, w.shape[0] / 8, w.shape[1], dev) * w.count for w in mats))
    assert split.mm == pytest.approx(sum(8 * matmul_s(tokens / 8, w.shape[0] / 8, w.shape[1], dev) * w.count
                                         for w in mats))
    assert split.mm > whole.mm  # 512-row pieces fill fewer waves than one 4,096-row GEMM
    # backward: the input-gradient matmuls in pieces, the weight-gradient ones whole
    assert split.bwd - whole.bwd == pytest.approx(split.mm - whole.mm, rel=1e-9)
