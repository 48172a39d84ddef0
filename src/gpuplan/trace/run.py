"""One traced training step: build on fake tensors, shard over a fake process group, run a
warm-up step, then the measured step (forward, backward, optimizer) under ``StepTracker``.

Layouts traced: data parallel with ZeRO 0 (one DDP replica; the DDP buckets are not simulated),
ZeRO 1 and 2 (``gpuplan.trace.optim.ShardedOptimizer``: optimizer state, and with 2 the gradients,
sharded over the data-parallel group; weights whole) and FSDP2 ``fully_shard`` for ZeRO 3 over the
shard group as a fake process group of that many ranks, in this one process, for rank 0; tensor
parallelism (``parallelize_module``: column-parallel q/k/v/gate/up, row-parallel o/down,
vocab-parallel embedding and LM head with a vocab-parallel loss, ``SequenceParallel`` norms when
the layout has sequence parallelism) over the ``tp`` dimension of a 2-D (dp × tp) device mesh; and
pipeline parallelism as one stage's ranks running their 1F1B or interleaved schedule with its
micro-batches in flight (``gpuplan.trace.stage``). The fake process group, the meshes and both parallelisms are set
up in ``gpuplan.trace.parallel``."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuplan.catalog.frameworks import keeps_unsharded_under_pp
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import read_layout
from gpuplan.model.kept import amp_of, fused_glu_keeps_input, keeps_fp32_norm_copy
from gpuplan.spec import Layout, Scenario
from gpuplan.trace.build import (
    DTYPES,
    MIXED,
    apply_recompute,
    build_on_meta,
    load_factory,
    make_inputs,
    make_optimizer,
    materialize,
)
from gpuplan.trace.model import CausalLM, causal_lm_loss
from gpuplan.trace.parallel import (
    check_tp_names,
    init_fake_pg,
    mesh_outside_fake,
    shard_fsdp2,
    tensor_parallel,
    tied_head,
)
from gpuplan.trace.stage import (
    PipelineStageLM,
    StageFeed,
    StagePlan,
    in_flight_peak,
    plan_stage,
    run_schedule,
    warm_up_ops,
)
from gpuplan.trace.tracker import FLASH_BWD_MODEL_SHARE, StepTracker


@dataclass(slots=True, kw_only=True)
class TraceResult:
    """What one traced step measured on rank 0 (bytes, FLOPs, seconds)."""

    peak: int
    peak_phase: str
    peak_by_cat: dict[str, int]
    max_by_cat: dict[str, int]
    held_max: int  # largest activations (+ what recompute rebuilt) held at once
    phase_max: dict[str, int]
    timeline: list[tuple[str, int]]
    flops: dict[str, float]
    flops_by_module: dict[str, float]
    saved_by_module: dict[str, int]
    tokens: int
    params: int
    layout: Layout
    fsdp: bool
    device: str
    world: int = 1  # ranks simulated (shard group × tp)
    stage: int | None = None  # the pipeline stage traced (None: no pipeline)
    microbatches: int = 1  # micro-batches traced
    microbatches_step: int = 1  # micro-batches of the scenario's step
    in_flight: float = 1.0  # most micro-batches (stage units) the traced schedule held at once
    wall_s: float
    notes: list[str] = field(default_factory=list)


def check_layout_traceable(lay: Layout) -> int:
    """The ZeRO shard group size (1: no sharding), or a GpuplanError for what trace cannot simulate yet."""
    for key in ("cp", "ep"):
        if getattr(lay, key) > 1:
            raise GpuplanError(f"trace simulates data (ZeRO 0-3), tensor and pipeline parallelism on one process; "
                               f"layout.{key}={getattr(lay, key)} is not traced yet: set {key}: 1")
    if lay.offload != "none":
        raise GpuplanError("trace does not simulate offload: set layout.offload: none")
    if lay.zero_group is not None and lay.zero_group != lay.dp * lay.cp:
        raise GpuplanError("trace does not simulate hybrid sharding (zero_group): drop layout.zero_group")
    nd = lay.shard_group if lay.zero else 1
    if nd * lay.tp > MAX_TRACE_WORLD:  # every simulated rank costs time in the one process (1,024: minutes)
        raise GpuplanError(f"trace simulates at most {MAX_TRACE_WORLD} ranks in one process; this layout has "
                           f"{nd * lay.tp:,} (shard group {nd} × tp {lay.tp}): trace a smaller count (e.g. --gpus "
                           f"{MAX_TRACE_WORLD}; sharded states per GPU scale as 1/shard group)")
    if lay.pp > 1 and lay.pp_schedule not in ("1f1b", "interleaved"):
        raise GpuplanError(f"trace runs the 1f1b and interleaved pipeline schedules; {lay.pp_schedule} is not traced "
                           "yet: set layout.pp_schedule: 1f1b")
    return nd


MAX_TRACE_WORLD = 128  # ranks one trace simulates: 64 took ~1.3× the time of 1, 1,024 took 6×
MAX_TRACE_LAYERS = 200  # layers one trace runs (~0.25 s each on fake tensors: 405B's 126 take ~30 s)


def choose_device(fidelity: str) -> tuple[torch.device, list[str]]:
    """cpu fakes always work; cuda fakes need a CUDA build of torch (the fake tensors then claim a
    GPU, so SDPA and autocast pick the GPU kernels). Otherwise fall back and say so."""
    if fidelity == "cuda":
        if torch.backends.cuda.is_built() and torch.cuda.is_available():
            return torch.device("cuda"), []
        return torch.device("cpu"), [
            f"--fidelity cuda not possible: torch {torch.__version__} is "
            f"{'a CPU-only build' if not torch.backends.cuda.is_built() else 'a CUDA build without a device'}; "
            "traced with cpu fakes instead (CPU flash attention saves the same tensors as CUDA flash)"]
    return torch.device("cpu"), []


def _to_loss(out: Any, labels: torch.Tensor | None) -> tuple[torch.Tensor, str | None]:
    if isinstance(out, torch.Tensor) and out.dim() == 0:
        return out, None
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss, None
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor) and out[0].dim() == 0:
        return out[0], None
    logits = getattr(out, "logits", out)
    if isinstance(logits, tuple | list) and logits:
        logits = logits[0]
    if not isinstance(logits, torch.Tensor):
        raise GpuplanError(f"forward() returned {type(out).__name__}: return a loss, logits or a tensor")
    if labels is not None and logits.dim() == 3 and logits.shape[:2] == labels.shape:
        return causal_lm_loss(logits, labels), None
    return logits.float().square().mean(), "forward() returned no loss: the trace used mean(output²) as the loss"


def _step(step: _Step, tr: StepTracker | None) -> str | None:
    """One training step: forward and backward (one micro-batch, or a pipeline stage's schedule: the
    warm-up step runs one micro-batch through the stage), then the optimizer."""
    phase = tr.set_phase if tr is not None else (lambda _p: None)
    note = None
    if step.pipe is not None:
        with _autocast(step):  # one autocast region for the stage's schedule
            run_schedule(step.model, step.pipe.ops if tr is not None else warm_up_ops(len(step.model.chunks)),
                         step.pipe.feed, tr)
    else:
        note = _forward_backward(step, tr)
    phase("optimizer")
    if tr is not None:
        tr.register([p.grad for p in step.params if p.grad is not None], "gradients")
    step.opt.step()
    step.opt.zero_grad(set_to_none=True)
    phase("end")
    return note


def _autocast(step: _Step) -> Any:
    """torch.autocast to the step's AMP dtype (on its parameters' device), else no context."""
    return nullcontext() if step.autocast is None else torch.autocast(step.params[0].device.type, dtype=step.autocast)


def _forward_backward(step: _Step, tr: StepTracker | None) -> str | None:
    phase = tr.set_phase if tr is not None else (lambda _p: None)
    phase("forward")
    with _autocast(step):  # AMP as Hugging Face Trainer / accelerate run it: the forward and loss, not backward
        try:
            out = step.model(*step.args, **step.kwargs)
        except GpuplanError:
            raise
        except Exception as err:  # noqa: BLE001 - the user's forward on the inputs we made
            raise GpuplanError(f"the model's forward() failed on the traced inputs ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}); give a matching "
                               "--input-factory package.module:function(batch, seq_len)") from None
        with tr.loss_scope() if tr is not None else nullcontext():
            loss, note = _to_loss(out, step.labels)
    del out
    phase("backward")
    loss.backward()
    del loss
    return note


def _fsdp_unsharded(model: nn.Module) -> list[torch.Tensor]:
    """FSDP2's all-gather outputs (unsharded parameters); private API, so best effort."""
    out: list[torch.Tensor] = []
    try:
        from torch.distributed.fsdp import FSDPModule

        for mod in model.modules():
            if isinstance(mod, FSDPModule):
                group = mod._get_fsdp_state()._fsdp_param_group
                for fp in group.fsdp_params if group is not None else []:
                    out.extend(getattr(fp, "all_gather_outputs", []) or [])
    except Exception:  # noqa: BLE001 - layout of private FSDP internals changed: they count as temporaries
        return []
    return out


def run_trace(sc: Scenario, *, module: str | None = None, input_factory: str | None = None,
              fidelity: str = "cpu", stage: int | None = None) -> TraceResult:
    """Trace one step of ``sc``; under a pipeline, of ``stage`` (default: the most loaded, as
    ``model.memory.worst_stage`` says)."""
    t0 = time.perf_counter()
    lay = read_layout(sc)  # the layout evaluate reads: its open ZeRO stage and recomputation settled
    nd = check_layout_traceable(lay)
    _check_model(sc, lay, module)
    pipe = plan_stage(sc, lay, module, stage, MAX_TRACE_LAYERS) if lay.pp > 1 else None
    device, notes = choose_device(fidelity)
    fsdp, sharded_opt = lay.zero == 3 and nd > 1, lay.zero in (1, 2) and nd > 1
    mixed = sc.training.precision in MIXED
    compute = DTYPES[sc.training.precision]
    amp = amp_of(sc.training, lay)  # PyTorch AMP: fp32 parameters, the forward under autocast
    if amp:
        notes.append("traced as PyTorch AMP (fp32 parameters, forward and loss under torch.autocast; docs/amp.md)")
    param_dtype = torch.float32 if (mixed and fsdp) or amp else compute
    model, infac, tied = _build(sc, lay, module, input_factory, param_dtype, notes, pipe)
    if fsdp and pipe is not None and keeps_unsharded_under_pp(sc.training.framework):
        notes.append(f"{sc.training.framework} keeps a stage's parameters gathered and its gradients unsharded "
                     "between micro-batches (the formula counts that); the trace runs FSDP2 resharding after each "
                     "micro-batch (torch.distributed.pipelining's no-sync path is not simulated yet)")
    meshes = init_fake_pg(nd, lay.tp) if (nd > 1 or lay.tp > 1) else None
    try:
        fm = FakeTensorMode()
        with fm, mesh_outside_fake() if meshes else nullcontext():
            materialize(model, device)
            loss_ctx: Any = nullcontext
            if lay.tp > 1:
                loss_ctx = tensor_parallel(model, meshes["tp"], lay.sequence_parallel, tied, notes)
            if fsdp:
                shard_fsdp2(model, meshes["dp"], lay.zero, compute if mixed else None, notes)
            if pipe is not None:
                sp = lay.sequence_parallel and lay.tp > 1
                pipe.feed = StageFeed(vocab=sc.model.vocab, micro_batch=lay.micro_batch, seq_len=sc.training.seq_len,
                                      received_shape=(lay.micro_batch, sc.training.seq_len // (lay.tp if sp else 1),
                                                      sc.model.hidden), dtype=compute, device=device)
            group = meshes["dp"].get_group() if sharded_opt else None
            step = _make_step(model, sc, lay, device, infac, vocab=sc.model.vocab if not module else None,
                              master_fp32=mixed and not (fsdp or amp), shards=nd if sharded_opt else 1, group=group,
                              pipe=pipe)
            step.autocast = compute if amp else None
            tracker, note = _tracked_step(step, fsdp, loss_ctx)
    finally:
        if meshes is not None:
            import torch.distributed as dist

            dist.destroy_process_group()
    if note:
        notes.append(note)
    traced = pipe.traced if pipe is not None else 1
    res = _result(tracker, lay, fsdp, device, step.n_params, traced * lay.micro_batch * sc.training.seq_len, notes,
                  time.perf_counter() - t0)
    res.world = nd * lay.tp
    if pipe is not None:
        res.stage, res.microbatches, res.microbatches_step = pipe.stage, pipe.traced, pipe.microbatches
        res.in_flight = in_flight_peak(pipe.ops, len(model.chunks))
    return res


def _check_model(sc: Scenario, lay: Layout, module: str | None) -> None:
    if module is None and lay.pp == 1 and sc.model.n_layers > MAX_TRACE_LAYERS:  # every layer is run, op by op
        raise GpuplanError(f"trace runs every layer of the model in one process (Llama-3.1-405B's 126 take ~30 s); "
                           f"this model has {sc.model.n_layers:,}, more than {MAX_TRACE_LAYERS}: trace a model of "
                           f"that class (the per-layer terms are the same) or use evaluate")
    if (tr_cfg := sc.training).precision not in DTYPES:
        raise GpuplanError(f"trace runs bf16, fp16, bf16-pure and fp32; precision {tr_cfg.precision} needs "
                           "Transformer Engine kernels that do not run on fake tensors")
    if tr_cfg.method != "full" or tr_cfg.preference is not None:  # adapters; pairs and a reference model
        raise GpuplanError(f"trace runs full supervised training; method {tr_cfg.method} / preference "
                           f"{tr_cfg.preference} is not traced yet")


def _build(sc: Scenario, lay: Layout, module: str | None, input_factory: str | None, param_dtype: torch.dtype,
           notes: list[str], pipe: StagePlan | None) -> tuple[nn.Module, Callable | None, bool | None]:
    """The model (a pipeline stage's part of it) on the meta device with recompute applied, the input
    factory (if given), and whether its LM head is tied to the embedding (None without tensor parallelism)."""
    if module:
        factory, source = load_factory(module, "--module"), f"--module {module}"
    else:
        eager = sc.training.attention == "eager"
        # the framework's norms and SwiGLU, as evaluate counts them
        hf_norm, fused = keeps_fp32_norm_copy(sc.model, sc.training), fused_glu_keeps_input(sc.training)
        if pipe is not None:
            def factory() -> nn.Module:
                return PipelineStageLM(sc.model, pp=lay.pp, vstages=pipe.vstages, stage=pipe.stage, eager=eager,
                                       hf_norm=hf_norm, fused_glu=fused)
        else:
            def factory() -> nn.Module:
                return CausalLM(sc.model, eager=eager, hf_norm=hf_norm, fused_glu=fused)
        source = f"model {sc.model.name}"
    infac = load_factory(input_factory, "--input-factory") if input_factory else None
    model = build_on_meta(factory, param_dtype, source)
    tp = lay.tp
    if tp > 1 and not module and sc.model.n_kv_heads % tp:
        raise GpuplanError(f"trace shards K/V heads over tp; layout.tp={tp} does not divide the {sc.model.n_kv_heads} "
                           "key/value heads (replicated K/V heads are not traced): use a tp that divides them")
    tied = tied_head(model) if tp > 1 else None
    notes += check_tp_names(model, tp) if tp > 1 else []
    notes += apply_recompute(model, lay.recompute)
    return model, infac, tied


@dataclass(slots=True, kw_only=True)
class _Step:
    """What the traced step runs: the (parallelised, materialised) model, its trainable parameters
    and optimizer, and one micro-batch of inputs (or a pipeline stage's schedule and inputs)."""

    model: nn.Module
    params: list[nn.Parameter]
    n_params: int
    opt: torch.optim.Optimizer
    args: tuple
    kwargs: dict
    labels: torch.Tensor | None
    pipe: StagePlan | None = None
    autocast: torch.dtype | None = None  # AMP: the forward (and loss) under torch.autocast to this dtype


def _make_step(model: nn.Module, sc: Scenario, lay: Layout, device: torch.device, infac: Callable | None, *,
               vocab: int | None, master_fp32: bool, shards: int, group: Any, pipe: StagePlan | None) -> _Step:
    """The optimizer over the trainable parameters and the inputs of one micro-batch (in fake mode)."""
    tr_cfg = sc.training
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)  # DTensor: the global count
    opt = make_optimizer(params, tr_cfg.optimizer, tr_cfg.optimizer_impl, master_fp32=master_fp32, zero=lay.zero,
                         shards=shards, group=group)
    args: tuple = ()
    kwargs: dict = {}
    labels = None
    if pipe is None:
        with torch.device(device):
            args, kwargs, labels = make_inputs(model, lay.micro_batch, tr_cfg.seq_len, infac, vocab)
    return _Step(model=model, params=params, n_params=n_params, opt=opt, args=args, kwargs=kwargs, labels=labels,
                 pipe=pipe)


def _tracked_step(step: _Step, fsdp: bool, loss_ctx: Any) -> tuple[StepTracker, str | None]:
    """A warm-up step, then the measured step under a StepTracker: the tracker and the loss note."""
    model, opt, params = step.model, step.opt, step.params
    with loss_ctx():
        _step(step, None)  # warm-up: lazy optimizer state, FSDP init
    tracker = StepTracker()
    handles = tracker.watch_modules(model)
    if not fsdp:
        def grad_ready(p: torch.Tensor) -> None:
            if p.grad is not None:  # ZeRO-2 has moved it into its partition already
                grad = getattr(p.grad, "_local_tensor", p.grad)
                tracker.reclassify(grad, "gradients", ("temporaries", "activations"))

        for p in params:
            p.register_post_accumulate_grad_hook(grad_ready)
    from torch.utils.checkpoint import set_checkpoint_early_stop

    with tracker.tracking(), set_checkpoint_early_stop(False), loss_ctx():
        tracker.register(list(model.parameters()), "weights")
        tracker.register(list(model.buffers()), "buffers")
        tracker.register([v for st in opt.state.values() for v in st.values()], "optimizer")
        tracker.register([p.grad for p in params if p.grad is not None], "gradients")  # ZeRO-1: persistent
        tracker.register(list(getattr(opt, "grad_shards", {}).values()), "gradients")  # ZeRO-2 partitions
        tracker.register(_fsdp_unsharded(model), "fsdp_unsharded")
        tracker.register([*step.args, *step.kwargs.values(), step.labels], "temporaries")
        tracker.reset_peak()
        tracker.mark("start")
        note = _step(step, tracker)
    for h in handles:
        h.remove()
    return tracker, note


def _result(tr: StepTracker, lay: Layout, fsdp: bool, device: torch.device, n_params: int, tokens: int,
            notes: list[str], wall_s: float) -> TraceResult:
    fwd = sum(v for (ph, _k), v in tr.flops.items() if ph == "forward")
    bwd = sum(v for (ph, _k), v in tr.flops.items() if ph == "backward")
    rec = sum(v for (ph, _k), v in tr.flops.items() if ph == "recompute")
    flash_extra = tr.flash_bwd_flops * (1 - FLASH_BWD_MODEL_SHARE)
    flops = {
        "forward": fwd, "backward": bwd, "recompute": rec,
        "attention_forward": tr.flops.get(("forward", "attention"), 0.0),
        "attention_backward": tr.flops.get(("backward", "attention"), 0.0),
        "flash_backward_recompute": flash_extra,
        "model": fwd + bwd - flash_extra,           # PaLM convention: no recomputation of any kind
        "hardware": fwd + bwd + rec,                 # what the kernels execute (flash bwd recompute included)
    }
    timeline = list(tr.timeline)
    return TraceResult(peak=tr.peak, peak_phase=tr.peak_phase, peak_by_cat=dict(tr.peak_by_cat),
                       max_by_cat=dict(tr.cat_max), held_max=tr.held_max,
                       phase_max=dict(tr.phase_max), timeline=timeline, flops=flops,
                       flops_by_module=dict(tr.module_flops), saved_by_module=dict(tr.saved_by_module),
                       tokens=tokens, params=n_params, layout=lay, fsdp=fsdp, device=device.type,
                       wall_s=wall_s, notes=notes)
