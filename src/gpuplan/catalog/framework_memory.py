"""The memory facts of a framework profile (frameworks.json ``memory``), one question each: what the training
software keeps beside the model's own tensors — DDP bucket copies, half-precision gradients alive at the end of
backward, an eager norm's fp32 copy, how LoRA adapters keep their input. catalog/frameworks.py reads the file."""

from __future__ import annotations

from functools import cache

from gpuplan.catalog.frameworks import get_framework


def _memory_fact(framework: str, name: str) -> object:
    """The value of the profile's ``memory.<name>`` fact, or None where it states none."""
    fact = get_framework(framework).memory.get(name)
    return None if fact is None else fact.value


@cache
def ddp_copies_gradients(framework: str) -> bool:
    """Whether the framework's plain DDP (ZeRO-0) keeps its all-reduce buckets beside the gradients — one more
    gradient-sized buffer (frameworks.json ``memory.ddp_bucket_copy``: PyTorch DDP's gradient_as_bucket_view
    defaults to False); else buckets are views of one contiguous gradient buffer (Megatron) or two in flight."""
    return _memory_fact(framework, "ddp_bucket_copy") in (True, "param")


@cache
def ddp_bucket_in_param_dtype(framework: str) -> bool:
    """Whether that DDP bucket copy is in the parameters' dtype rather than the kept gradients' (``memory.
    ddp_bucket_copy`` "param": nanotron wraps bf16 parameters in torch DDP beside its own fp32 gradient buffer)."""
    return _memory_fact(framework, "ddp_bucket_copy") == "param"


@cache
def keeps_half_grads(framework: str) -> bool:
    """Whether each micro-batch's backward leaves a parameter-dtype ``.grad`` of every parameter of the stage
    beside the fp32 gradient buffer until it returns (frameworks.json ``memory.half_grads``: nanotron's
    FP32GradientAccumulator.backward adds them into the fp32 buffer only after ``loss.backward()``)."""
    return _memory_fact(framework, "half_grads") is True


@cache
def norm_keeps_fp32_copy(framework: str) -> bool:
    """Whether the framework's RMSNorm runs as eager ops that keep an fp32 copy of its input and the
    normalized tensor for backward (frameworks.json ``memory.norm_fp32_copy``: Hugging Face's LlamaRMSNorm),
    instead of a fused kernel that keeps its input."""
    return _memory_fact(framework, "norm_fp32_copy") is True


@cache
def fsdp_root_holds_embedding(framework: str) -> bool:
    """Whether the framework's FSDP root unit — never resharded after the forward — holds the embedding beside the LM
    head (frameworks.json ``memory.fsdp_root`` "embedding_and_head": accelerate wraps the decoder layers only) rather
    than the head in a unit of its own (torchtitan's [norm, output])."""
    return _memory_fact(framework, "fsdp_root") == "embedding_and_head"


@cache
def loss_logit_bytes(framework: str) -> float | None:
    """Bytes per logit the framework's own loss holds at the start of backward (frameworks.json
    ``memory.loss_logit_bytes``: Megatron's vocab-parallel loss, 6), or None where its fused-kernel fact decides."""
    return _bytes_fact(framework, "loss_logit_bytes")


@cache
def loss_parallel_logit_bytes(framework: str) -> float | None:
    """Bytes per local logit a vocab-parallel loss built on DTensor holds at its backward where the framework runs it
    under tensor parallelism (frameworks.json ``memory.loss_parallel_logit_bytes``: torchtitan's loss_parallel, 16),
    or None."""
    return _bytes_fact(framework, "loss_parallel_logit_bytes")


def _bytes_fact(framework: str, key: str) -> float | None:
    value = _memory_fact(framework, key)
    return None if value is None else float(value)


@cache
def swiglu_saves_input(framework: str) -> bool:
    """Whether the framework's gated MLP runs a fused activation that saves only its input (frameworks.json
    ``memory.swiglu_saves_input``: Megatron-Core's bias-SwiGLU fusion)."""
    return _memory_fact(framework, "swiglu_saves_input") is True


@cache
def nf4_state_sharded(framework: str) -> bool:
    """Whether the framework's 4-bit weights shard their quantization constants with the values under FSDP /
    ZeRO-3 (frameworks.json ``memory.nf4_state`` "sharded": torchao's NF4Tensor, torchtune) rather than keep them
    whole on every rank (bitsandbytes' quant_state, the Hugging Face stacks)."""
    return _memory_fact(framework, "nf4_state") == "sharded"


@cache
def lora_keeps_shared_input(framework: str) -> bool:
    """Whether the framework's LoRA adapters keep their input tensor itself (frameworks.json ``memory.lora_input``
    "shared": torchtune's LoRALinear; "fused": Unsloth's matmul_lora) rather than a copy each (PEFT's cast to its fp32
    adapters, the default)."""
    return _memory_fact(framework, "lora_input") in ("shared", "fused")


def lora_adapts_experts(framework: str) -> bool:
    """Whether the framework's LoRA reaches a MoE block's routed experts (frameworks.json ``memory.lora_experts``; not
    stated: it does — Megatron-Core's grouped expert linears take adapters)."""
    return _memory_fact(framework, "lora_experts") is not False


def lora_fused(framework: str) -> bool:
    """Whether the framework runs the adapters inside the base linear's own kernels (frameworks.json
    ``memory.lora_input`` "fused": Unsloth's matmul_lora accumulates x·A·B into the base output by addmm_) rather than
    as eager scaling and add kernels (model/adapters.py)."""
    return _memory_fact(framework, "lora_input") == "fused"


@cache
def autocast_fp32_weights(framework: str) -> bool:
    """Whether the framework's ZeRO-0 (plain DDP or one GPU) trains under bf16/fp16 mixed precision as PyTorch's
    AMP does — fp32 parameters and gradients, autocast casting each linear's weight and input to 16 bits
    (frameworks.json ``memory.autocast_fp32_weights``) — rather than 16-bit parameters beside an fp32 master."""
    return _memory_fact(framework, "autocast_fp32_weights") is True


@cache
def pp_grads_in_fp32(framework: str) -> bool:
    """Whether a pipeline stage that keeps its parameters gathered (frameworks.``keeps_unsharded_under_pp``)
    accumulates its unsharded gradients in fp32 between micro-batches (frameworks.json ``memory.pp_grad_dtype``:
    FSDP2 moves each unsharded bf16 gradient into an accumulator of the fp32 reduce dtype while gradient sync
    is off, and torchtitan reduces in fp32)."""
    return _memory_fact(framework, "pp_grad_dtype") == "fp32"


@cache
def keeps_gathered_sp_input(framework: str) -> bool:
    """Whether, under sequence parallelism, the column-parallel linears keep their all-gathered input whole for
    the weight gradient (frameworks.json ``memory.sp_saved_input`` "gathered": torchtitan's DTensor plan
    redistributes the block input Shard(1) -> Replicate and F.linear saves it), rather than the sequence shard
    all-gathered again in backward (Megatron, Korthikanti et al. 2022 Sec. 4.2.2; nanotron)."""
    return _memory_fact(framework, "sp_saved_input") == "gathered"


@cache
def keeps_stage_buffers(framework: str) -> bool:
    """Whether the framework's pipeline keeps a receive buffer per micro-batch of the step on each stage (and a
    gradient receive buffer, and each in-flight micro-batch's stage output until its backward) — frameworks.json
    ``memory.pp_stage_buffers`` "per-microbatch": torch.distributed.pipelining, as torchtitan runs it."""
    return _memory_fact(framework, "pp_stage_buffers") == "per-microbatch"


@cache
def prepares_kbit_in_fp32(framework: str) -> bool:
    """Whether the framework's QLoRA runs PEFT's ``prepare_model_for_kbit_training`` (frameworks.json
    ``memory.kbit_upcast`` "fp32"): the parameters left in 16 bits by the 4-bit load become fp32."""
    return _memory_fact(framework, "kbit_upcast") == "fp32"


@cache
def offloads_checkpoints(framework: str) -> bool:
    """Whether full recomputation keeps each checkpointed block input in host memory, two on the GPU (frameworks.json
    ``memory.checkpoint_offload``: Unsloth's 'unsloth' gradient checkpointing copies the input to the CPU in forward
    and back in backward) — what ``training.activation_offloading`` does for any stack."""
    return _memory_fact(framework, "checkpoint_offload") is True


@cache
def sets_expandable_segments(framework: str) -> bool:
    """Whether the framework's launcher or import sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``
    (frameworks.json ``memory.expandable_segments``): the caching allocator then maps 2 MiB pages into one growing
    segment, so what it reserves beyond what it allocates stays small; PyTorch's default is off."""
    return _memory_fact(framework, "expandable_segments") is True


@cache
def logged_peak(framework: str) -> str | None:
    """What the framework's training log calls its peak memory (frameworks.json ``memory.logged_peak``):
    "reserved", the caching allocator's reserved peak without the CUDA context and NCCL's buffers; None where the
    profile states none (then a published peak is read as the process's whole memory)."""
    value = _memory_fact(framework, "logged_peak")
    return None if value is None else str(value)


@cache
def zero3_buffers(framework: str) -> tuple[float, float, float] | None:
    """(max live, prefetch, reduce bucket) in elements where the framework's ZeRO-3 gathers module by module
    under a live-parameter limit (frameworks.json ``memory.zero3_buffers``: DeepSpeed); None where it gathers
    a whole block at a time (FSDP)."""
    fact = get_framework(framework).memory.get("zero3_buffers")
    if fact is None or not isinstance(fact.value, dict):
        return None
    v = fact.value
    return float(v["max_live_parameters"]), float(v["prefetch_bucket_size"]), float(v["reduce_bucket_size"])
