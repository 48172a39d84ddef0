"""Thin adapters that ask the runtime model's own component functions for one microbenchmark point.

Each ``*_modelled`` function takes a point of ``components.json`` and returns the model's time for
that kernel or collective, computed by the functions the step model calls (model/gemm.py,
model/attention.py, model/compute.py, model/comm.py) at the GPU's burst rates: a microbenchmark runs
one kernel alone, so the share a training step sustains (``gemm_share_of_mamf``) is not applied.

* GEMM: ``compute.matmul_s`` on ``compute.kernel_device`` for the dtype (the library's tiles, waves
  and K splits at the GPU's measured best-shape rate, the per-kernel floor, the alignment rule, and
  the catalogue's shape sweep interpolated where the architecture has one).
* attention: ``attention.attention_core_s`` for the point's kernel, mask and pass (a fused kernel at
  its measured plateau shaped by the per-row-block cost; eager: batched GEMMs and the passes over the
  scores, with the causal mask's add).
* memory-bound: the bytes and kernels model/software.py charges for the op (``Software.cost``), at
  the GPU's measured streaming bandwidth plus the per-kernel floor (``compute.streamed_s``).
* chunked scans (Mamba-2 SSD): ``ssm.fused_kernel_s`` — the kernel's FLOPs at the fused chunk-scan rate or
  its bytes at streaming bandwidth, whichever is longer, plus the kernel floor.
* an fp8 linear (torchao's LayerNorm → Linear → Sigmoid, forward + backward, over the same module in bf16): the
  step model's pieces for one linear — ``compute.matmul_s`` for its three GEMMs at the forward's shape (the weight
  gradient's in bf16 under rowwise_with_gw_hp), ``fp8.linear_cast`` and ``compute.fp8_cast_s`` for the recipe's
  scaling kernels (the input's cast fused into the LayerNorm, the output gradient's into the sigmoid's backward,
  under torch.compile), the norm and the sigmoid at the streaming rate (backward twice the forward, as
  ``compute._layer_time`` charges them).
* collectives: ``comm.all_reduce_s`` / ``all_gather_s`` / ``reduce_scatter_s`` / ``all_to_all_s``
  on ``comm.topology`` of the catalogue's hardware; a point that states the algorithm NCCL ran
  (``NCCL_ALGO=Ring``, NVLS switched off) is modelled with that algorithm only. DeepEP's dispatch and combine:
  ``comm.deepep_s`` with the ranks and nodes a token reaches (``comm.touched``), in DeepEP's own byte count.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from gpuplan.catalog.hardware import get_gpu, make_hardware
from gpuplan.catalog.models import load_model
from gpuplan.model.attention import SOFTMAX_FWD_BYTES, attention_core_s, runs_on
from gpuplan.model.comm import all_gather_s, all_reduce_s, all_to_all_s, deepep_s, reduce_scatter_s, topology, touched
from gpuplan.model.compute import ELEMENT_BYTES, Device, fp8_cast_s, kernel_device, matmul_s, streamed_s
from gpuplan.model.fp8 import fp8_scheme, linear_cast
from gpuplan.model.software import software
from gpuplan.model.ssm import fused_kernel_s
from gpuplan.spec import ModelSpec

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": ELEMENT_BYTES["fp4"], "fp32": 4.0, "fp64": 8.0}
NCCL_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                   "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}
COLLECTIVE = {"all_reduce": all_reduce_s, "all_gather": all_gather_s, "reduce_scatter": reduce_scatter_s,
              "all_to_all": all_to_all_s}


@lru_cache(maxsize=256)
def _device(gpu: str, precision: str = "bf16", kernel: str = "flash2") -> Device:
    return kernel_device(get_gpu(gpu), precision, kernel)


def gemm_modelled_s(p: dict[str, Any]) -> float:
    """Seconds of one (batched) GEMM kernel as the step model times a weight matmul, at burst rates."""
    x = p["inputs"]
    dev = _device(p["gpu"], x["dtype"])
    return matmul_s(x["m"], x["n"], x["k"], dev, elem=DTYPE_BYTES[x["dtype"]], batch=x.get("batch", 1))


def gemm_flops(p: dict[str, Any]) -> float:
    x = p["inputs"]
    return 2.0 * x["m"] * x["n"] * x["k"] * x.get("batch", 1)


@lru_cache(maxsize=64)
def _attention_model(heads: int, kv_heads: int, head_dim: int) -> ModelSpec:
    """A one-layer decoder carrying the benchmark's attention shape (only heads and head size enter
    the attention core's FLOPs and time)."""
    return load_model({"model_type": "llama", "hidden_size": heads * head_dim, "num_attention_heads": heads,
                       "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": 1,
                       "intermediate_size": 4 * heads * head_dim, "vocab_size": 32000})


def attention_flops_published(p: dict[str, Any]) -> float:
    """The FLOPs the FlashAttention benchmarks divide by: 4·b·s²·h·d forward, halved when causal,
    backward 2.5x, forward + backward 3.5x (benchmarks/benchmark_flash_attention.py)."""
    x = p["inputs"]
    fwd = 4.0 * x["batch"] * x["seq_len"] ** 2 * (x.get("heads") or 16) * x["head_dim"] / (2 if x["causal"] else 1)
    return fwd * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[x["pass"]]


def attention_modelled_s(p: dict[str, Any]) -> float:
    """Seconds of the attention core for the point's kernel, mask and pass (model/attention.py)."""
    x = p["inputs"]
    heads = x.get("heads") or 16  # a rate does not depend on the head count at fixed head size
    dev = _device(p["gpu"], "bf16", x["kernel"])
    return attention_core_s(dev, x["kernel"], x["causal"], x["pass"], tokens=x["batch"] * x["seq_len"],
                            seq=x["seq_len"], heads=heads, head_dim=x["head_dim"])


def attention_kernel_modelled(p: dict[str, Any]) -> str:
    """The kernel whose rates the model applies to the point: the point's own, where the cited support
    lists let it run on the GPU's architecture."""
    kernel = p["inputs"]["kernel"]
    return kernel if runs_on(kernel, get_gpu(p["gpu"]).architecture) else f"{kernel} (does not run here)"


def memory_op_cost(op: str, dtype: str) -> tuple[float, int]:
    """(bytes per element, kernels) the model charges for a memory-bound op (``Software.cost`` of the
    stack that runs it that way; eager attention's softmax pass); the model counts 16-bit tensors,
    so a 32-bit benchmark scales the bytes by 2."""
    m = _attention_model(16, 16, 128)
    fused, eager, compiled = (software(f, c, m) for f, c in (("megatron-core", False), ("torchtitan", False),
                                                             ("torchtitan", True)))
    native = software("torchtitan", False, replace(m, norm="layernorm"))  # an eager stack's LayerNorm: F.layer_norm
    table = {"rmsnorm_fused": fused.cost("norm"), "rmsnorm_eager": eager.cost("norm"),
             "layernorm_fused": fused.cost("norm"), "layernorm_native": native.cost("norm"),
             "add_rmsnorm_fused": compiled.cost("add_norm"),
             "softmax_fused": (SOFTMAX_FWD_BYTES, 1), "softmax_native": (SOFTMAX_FWD_BYTES, 1)}
    per, kernels = table[op]
    return per * DTYPE_BYTES[dtype] / 2.0, kernels


def memory_bandwidth(p: dict[str, Any]) -> float:
    """The bandwidth the model streams memory-bound work at on the point's GPU: ``Device.bw``."""
    return _device(p["gpu"]).bw


def memory_modelled(p: dict[str, Any]) -> tuple[float, float]:
    """(modelled seconds, bytes the model moves) of a memory-bound kernel of ``rows`` x ``cols``."""
    x = p["inputs"]
    per, kernels = memory_op_cost(x["op"], x["dtype"])
    nbytes = per * x["rows"] * x["cols"]
    return streamed_s(nbytes, kernels, _device(p["gpu"])), nbytes


def collective_modelled_s(p: dict[str, Any]) -> float:
    """Seconds of one collective over a group of contiguous ranks on the catalogue's fabrics."""
    x = p["inputs"]
    hw = make_hardware(p["gpu"], gpus=x["gpus"], scale_out=x.get("scale_out"))
    topo = topology(hw)
    if x.get("algorithm") == "ring":  # NVLink SHARP off (or not chosen): the ring alone
        topo = replace(topo, nvls=0.0)
    return COLLECTIVE[x["collective"]](float(x["bytes"]), x["group"], 1, topo)


def collective_measured_s(p: dict[str, Any]) -> float:
    """Seconds the source measured: size / algorithm bandwidth (nccl-tests busbw undone)."""
    x, meas = p["inputs"], p["measured"]
    algbw = meas["value"]
    if meas["quantity"] == "bus_bytes_per_s":
        algbw /= NCCL_BUS_FACTOR[x["collective"]](x["group"])
    return x["bytes"] / algbw


def deepep_rates(p: dict[str, Any]) -> tuple[float, float]:
    """(measured, modelled) bytes/s of a DeepEP point in DeepEP's own count (tests/test_internode.py): the tokens a rank
    receives (one node) or one row per (token, node it reaches), its own included, times the bytes of a token."""
    x = p["inputs"]
    hw = make_hardware(p["gpu"], gpus=x["gpus"], scale_out=x.get("scale_out"))
    topo = topology(hw)
    ranks = touched(x["experts"], x["topk"], x["group"], x["groups"], x["topk_groups"])
    nodes = touched(x["experts"], x["topk"], x["nodes"], x["groups"], x["topk_groups"])
    token_bytes = x["hidden"] * x["value_bytes"]
    counted = x["tokens"] * (ranks if x["nodes"] == 1 else nodes) * token_bytes
    return p["measured"]["value"], counted / deepep_s(x["tokens"], token_bytes, ranks, nodes, x["group"], 1, topo)


def scan_flops(p: dict[str, Any]) -> float:
    """FLOPs of one Mamba-2 chunk-scan forward as its benchmark counts them: the masked intra-chunk product at
    half, 2·b·L·chunk·heads·dim·0.5, plus the output from the chunk states, 2·b·L·heads·dim·state."""
    x = p["inputs"]
    tokens = x["batch"] * x["seq_len"]
    per_head = x["chunk"] * 0.5 + x["state"]
    return 2 * tokens * x["heads"] * x["head_dim"] * per_head


def scan_modelled_s(p: dict[str, Any]) -> float:
    """Seconds of the chunk-scan forward kernel (one launch) as model/ssm.py times a scan pass, at burst rates:
    it reads x, C, dt, the fp32 cumulative decays, the passed 16-bit chunk states and the fp32 C·Bᵀ blocks, and
    writes the output."""
    x = p["inputs"]
    tokens = x["batch"] * x["seq_len"]
    chunks = tokens / x["chunk"]
    nbytes = (tokens * (2 * 2 * x["heads"] * x["head_dim"] + 2 * x["groups"] * x["state"] + 2 * 4 * x["heads"])
              + chunks * (2 * x["heads"] * x["head_dim"] * x["state"] + 4 * x["groups"] * x["chunk"] ** 2))
    return fused_kernel_s(scan_flops(p), nbytes, 1, _device(p["gpu"], x["dtype"]))


# the sigmoid's forward: read and write one bf16 element, one kernel (its backward twice that, as the step model
# charges an elementwise op's backward)
SIGMOID_BYTES = 4.0


def fp8_linear_times(p: dict[str, Any], share: float | None = None) -> tuple[float, float]:
    """(bf16, fp8) seconds of forward + backward of torchao's benchmark module on the point's (M, K, N), recipe and
    GPU, at burst rates: the same LayerNorm and sigmoid in both, the GEMMs at each precision's rates, the recipe's
    scaling work in fp8 (torchtitan runs torchao's Float8Linear: its stack's fp8 settings, one rank). ``share``: the
    scaling kernels' bandwidth share instead of the catalogue's (tools/derive_kernel_rates.py derives it)."""
    x = p["inputs"]
    m, k, n = x["m"], x["k"], x["n"]
    d16, d8 = _device(p["gpu"], "bf16"), _device(p["gpu"], "fp8")
    per, kernels = software("torchtitan", x.get("compile", True), replace(_attention_model(16, 16, 128),
                                                                          norm="layernorm")).cost("norm")
    around = 3 * (streamed_s(m * k * per, kernels, d16) + streamed_s(m * n * SIGMOID_BYTES, 1, d16))
    s = fp8_scheme(x["recipe"], "torchtitan", x.get("compile", True), 1)
    s = s if share is None else replace(s, share=share)
    mm8 = matmul_s(m, n, k, d8)
    cast_f, cast_b = fp8_cast_s(linear_cast(m * k, m * n, k * n, False, 1, s), s, d8)
    fp8 = around + 2 * mm8 + (matmul_s(m, n, k, d16) if s.grad_weight_hp else mm8) + cast_f + cast_b
    return around + 3 * matmul_s(m, n, k, d16), fp8
