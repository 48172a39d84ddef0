"""Thin adapters that ask the runtime model's own component functions for one microbenchmark point.

Each ``*_modelled`` function takes a point of ``components.json`` and returns the model's time for
that kernel or collective, computed the way the step model computes it (model/compute.py and
model/comm.py, with the fitted constants of catalog/constants.json), so that ``components.py`` can set
it beside the published measurement. Nothing here changes a formula: where the model has no
function for a case (a non-causal attention pass, a memory-bound kernel in isolation), the adapter
composes the model's public pieces and says how.

* GEMM: ``compute.matmul_s`` at the GPU's ``compute.device`` for the dtype (MAMF share x
  ``gemm_share_of_mamf``, wave quantization over the SMs, the HBM roofline term at
  ``memory_bandwidth_efficiency``), plus one ``kernel_launch_s``.
* attention: causal passes through ``compute._attention`` (FlashAttention at the architecture's
  share x ``attention_achieved_share``, the short-sequence factor with ``attention_row_block_cost``;
  eager: full s² matmuls and the softmax traffic); a non-causal flash pass has no model path, so it
  is the full FLOPs at the same rates without the causal short-sequence factor. Kernel launches: one
  forward, two backward, as ``compute._layer_time`` charges a block.
* memory-bound: bytes at ``Device.bw`` (datasheet HBM x ``memory_bandwidth_efficiency``) plus the
  kernel launches the model charges for the op (model/software.py's byte and kernel counts).
* collectives: ``comm.all_reduce_s`` / ``all_gather_s`` / ``reduce_scatter_s`` / ``all_to_all_s``
  on ``comm.topology`` of the catalogue's hardware; a point that states the algorithm NCCL ran
  (``NCCL_ALGO=Ring``, NVLS switched off) is modelled with that algorithm only.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from gpuplan.catalog.constants import constant
from gpuplan.catalog.hardware import get_gpu, make_hardware
from gpuplan.catalog.models import load_model
from gpuplan.model.comm import all_gather_s, all_reduce_s, all_to_all_s, reduce_scatter_s, topology
from gpuplan.model.compute import (
    FLASH1_SLOWDOWN,
    Device,
    _attention,
    attention_flops,
    attention_kernel,
    device,
    matmul_s,
)
from gpuplan.model.software import software
from gpuplan.spec import ModelSpec, Training

# How each published kernel is modelled: the model's attention path (training.attention) and the
# framework whose attention kernel it stands for (compute.attention_kernel: 'te-auto' frameworks get
# cuDNN's fused attention on Hopper and later, FlashAttention-3 class; every other stack FlashAttention-2).
KERNEL_PATH = {
    "flash2": ("flash", "generic"), "flash1": ("flash1", "generic"), "eager": ("eager", "generic"),
    "cudnn": ("flash", "megatron-core"), "flash3": ("flash", "megatron-core"), "flash4": ("flash", "megatron-core"),
    "rocm_ck": ("flash", "generic"), "rocm_triton": ("flash", "generic"),
}
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "fp64": 8.0}
RESIDUAL_ADD_BYTES = 6.0  # model/software.py: read two, write one 16-bit tensor per hidden element
EAGER_RMSNORM_KERNELS = 7  # model/software.py: x.float(), pow, mean, rsqrt, mul, type_as, mul weight
NCCL_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                   "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}
COLLECTIVE = {"all_reduce": all_reduce_s, "all_gather": all_gather_s, "reduce_scatter": reduce_scatter_s,
              "all_to_all": all_to_all_s}


@lru_cache(maxsize=256)
def _device(gpu: str, precision: str = "bf16", framework: str = "generic") -> Device:
    return device(make_hardware(gpu), Training(precision=precision, framework=framework))  # type: ignore[arg-type]


def gemm_modelled_s(p: dict[str, Any]) -> float:
    """Seconds of one (batched) GEMM as the step model times a weight matmul."""
    x = p["inputs"]
    dev = _device(p["gpu"], x["dtype"])
    return matmul_s(x["m"], x["n"], x["k"], dev, elem=DTYPE_BYTES[x["dtype"]], batch=x.get("batch", 1)) \
        + constant("kernel_launch_s")


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
    """Seconds of the attention core for the point's pass, at the model's rates for its kernel."""
    x = p["inputs"]
    attention, framework = KERNEL_PATH[x["kernel"]]
    heads = x.get("heads") or 16  # a rate does not depend on the head count at fixed head size
    m = _attention_model(heads, x.get("kv_heads") or heads, x["head_dim"])
    dev = _device(p["gpu"], "bf16", framework)
    tokens, seq = x["batch"] * x["seq_len"], x["seq_len"]
    if x["causal"] or attention == "eager":
        fwd, bwd = _attention(m, tokens, seq, 1, attention, 0.0, dev)
    else:  # no model path for a full (non-causal) flash pass: its FLOPs at the same rates
        slow = FLASH1_SLOWDOWN if attention == "flash1" else 1.0
        flops = tokens * attention_flops(m, seq, causal_saving=False) * slow
        fwd, bwd = flops / (dev.peak * dev.e_attn_f), 2.5 * flops / (dev.peak * dev.e_attn_b)
    launch = constant("kernel_launch_s")
    return {"fwd": fwd + launch, "bwd": bwd + 2 * launch, "fwd_bwd": fwd + bwd + 3 * launch}[x["pass"]]


def attention_kernel_modelled(p: dict[str, Any]) -> str:
    """The kernel whose rates the model applies to the point (compute.attention_kernel)."""
    attention, framework = KERNEL_PATH[p["inputs"]["kernel"]]
    if attention != "flash":
        return attention
    return attention_kernel(framework, get_gpu(p["gpu"]).architecture)


@lru_cache(maxsize=8)
def _norm_bytes(framework: str) -> float:
    """Bytes per element of one RMSNorm as the model charges it for ``framework`` (16-bit tensors):
    model/software.py's per-hidden-element bytes are two norms and two residual adds."""
    m = _attention_model(16, 16, 128)
    return (software(framework, False, m).per_h - 2 * RESIDUAL_ADD_BYTES) / 2


def memory_op_cost(op: str, dtype: str) -> tuple[float, int]:
    """(bytes per element, kernels) the model charges for a memory-bound op; the model counts
    16-bit tensors, so a 32-bit benchmark scales the bytes by 2."""
    scale = DTYPE_BYTES[dtype] / 2.0
    fused_norm = _norm_bytes("megatron-core")     # fused RMSNorm: read x, write y
    table = {"rmsnorm_fused": (fused_norm, 1), "rmsnorm_eager": (_norm_bytes("torchtitan"), EAGER_RMSNORM_KERNELS),
             "layernorm_fused": (fused_norm, 1), "layernorm_native": (fused_norm, 1),
             "add_rmsnorm_fused": (RESIDUAL_ADD_BYTES + fused_norm, 2),  # the model does not fuse the add
             "softmax_fused": (4.0, 1), "softmax_native": (4.0, 1)}   # eager attention's softmax: read + write
    per, kernels = table[op]
    return per * scale, kernels


def memory_bandwidth(p: dict[str, Any]) -> float:
    """The bandwidth the model streams memory-bound work at on the point's GPU: ``Device.bw``."""
    return _device(p["gpu"]).bw


def memory_modelled(p: dict[str, Any]) -> tuple[float, float]:
    """(modelled seconds, bytes the model moves) of a memory-bound kernel of ``rows`` x ``cols``."""
    x = p["inputs"]
    per, kernels = memory_op_cost(x["op"], x["dtype"])
    nbytes = per * x["rows"] * x["cols"]
    return nbytes / memory_bandwidth(p) + kernels * constant("kernel_launch_s"), nbytes


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
