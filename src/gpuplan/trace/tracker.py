"""A light memory and FLOP tracker for one training step on fake tensors.

One ``TorchDispatchMode`` sees every operator. Each new output storage is entered in a table
with its bytes and a category; a weakref finalizer removes it when the storage dies, and
``UntypedStorage.resize_`` (how FSDP2 frees and re-allocates unsharded parameters) is wrapped to
follow size changes. The running total gives the peak; the per-category totals are copied at
each new peak, which is O(categories), not O(live tensors) — PyTorch's ``MemTracker`` walks
every module on every operator and takes ~20× longer on a 7B step (it stays the reference in
the tests).

Categories: ``weights`` (parameter storages), ``buffers`` (module buffers), ``gradients`` (``.grad`` storages),
``optimizer`` (optimizer state), ``activations`` (storages autograd saved for backward, found
with ``saved_tensors_hooks``), ``loss`` (activations saved by the loss: the fp32 log-softmax),
``fsdp_unsharded`` (FSDP2 all-gathered parameters), ``recomputed`` (what activation
checkpointing rebuilds during backward) and ``temporaries`` (everything else: outputs not (yet)
saved, gradients of activations, collective buffers, optimizer temporaries). Checkpointed regions
keep their tensors through their own hooks, out of sight of ``saved_tensors_hooks``; so at the end
of forward every storage made during forward and still alive becomes an activation too.

FLOPs come from PyTorch's own formulas (``torch.utils.flop_counter.flop_registry``), plus the
CPU flash-attention kernels it lacks, split by phase and kind. For flash attention, PyTorch
charges the backward 5 matmul-equivalents (it recomputes Q·Kᵀ); the model-FLOP convention
(PaLM, ``gpuplan.flops``) charges 4, i.e. backward = 2 × forward. Both are kept.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

CATEGORIES = ("weights", "buffers", "gradients", "optimizer", "activations", "recomputed", "loss", "fsdp_unsharded",
              "temporaries")
aten = torch.ops.aten


def _flash_cpu_fwd(q, k, v, *args, out_shape=None, **kw) -> int:  # noqa: ANN001
    return sdpa_flop_count(q, k, v)


def _flash_cpu_bwd(grad_out, q, k, v, *args, out_shape=None, **kw) -> int:  # noqa: ANN001
    return sdpa_backward_flop_count(grad_out, q, k, v)


def _shapes(f):  # noqa: ANN001, ANN202
    """Call a shape formula with tensors replaced by their shapes (like flop_counter.shape_wrapper)."""
    def g(*args, out_val=None, **kwargs):  # noqa: ANN001, ANN202
        conv = (lambda x: x.shape if isinstance(x, torch.Tensor) else x)  # noqa: E731
        return f(*[conv(a) for a in args], out_shape=None, **{k: conv(v) for k, v in kwargs.items()})
    return g


EXTRA_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _shapes(_flash_cpu_fwd),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _shapes(_flash_cpu_bwd),
}
ATTENTION_BWD = {
    aten._scaled_dot_product_flash_attention_for_cpu_backward, aten._scaled_dot_product_flash_attention_backward,
    aten._scaled_dot_product_efficient_attention_backward, aten._scaled_dot_product_cudnn_attention_backward,
}
ATTENTION = ATTENTION_BWD | {
    aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_cudnn_attention,
}
# backward attention kernels that recompute the scores: model convention charges 4 of their 5 matmuls
FLASH_BWD_MODEL_SHARE = 4 / 5


def _local(x: Any) -> Any:
    return getattr(x, "_local_tensor", x)


def _local_flops(formula: Any, args: tuple, kwargs: dict, out: Any) -> float:
    """FLOPs of one op on this rank. A DTensor op runs its local op below this mode (DTensor
    dispatches in C++), so count it on the local shards; where the shards do not line up (the op
    redistributes first) count the global op split evenly over the mesh."""
    if not any(hasattr(a, "_local_tensor") for a in tree_leaves((args, kwargs))):
        return float(formula(*args, **kwargs, out_val=out))
    from torch.utils._pytree import tree_map

    try:
        return float(formula(*tree_map(_local, args), **tree_map(_local, kwargs), out_val=tree_map(_local, out)))
    except (AssertionError, RuntimeError, ValueError, IndexError):
        mesh = next(a.device_mesh for a in tree_leaves((args, kwargs)) if hasattr(a, "_local_tensor"))
        return float(formula(*args, **kwargs, out_val=out)) / mesh.size()


class StepTracker(TorchDispatchMode):
    """Track live storages by category, the peak and its composition, and FLOPs by phase."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, list] = {}       # storage key → [bytes, category]
        self.by_cat: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.total = 0
        self.peak = 0
        self.peak_by_cat: dict[str, int] = dict(self.by_cat)
        self.peak_phase = "setup"
        self.held_max = 0  # largest activations + recomputed held at once
        self.phase = "setup"
        self.phase_max: dict[str, int] = {}
        self.cat_max: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.timeline: list[tuple[str, int]] = []
        self.flops: dict[tuple[str, str], float] = defaultdict(float)  # (phase, kind) → FLOPs
        self.flash_bwd_flops = 0.0
        self.module_flops: dict[str, float] = defaultdict(float)
        self.module_stack: list[str] = []
        self.in_loss = False
        self.saved_by_module: dict[str, int] = defaultdict(int)

    # ---- storage table -------------------------------------------------------------------------
    def _key(self, t: torch.Tensor) -> tuple[int, Any] | None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse/nested or DTensor wrappers: skip
            return None
        return st._cdata, st

    def add(self, t: torch.Tensor, cat: str) -> None:
        """Enter (or re-categorise) the storage behind ``t``."""
        ks = self._key(t)
        if ks is None:
            return
        key, st = ks
        entry = self.live.get(key)
        if entry is None:
            nbytes = st.nbytes()
            self.live[key] = [nbytes, cat, self.phase]
            weakref.finalize(st, self._free, key)
            self.by_cat[cat] += nbytes
            self.total += nbytes
            self._check_peak()
        elif entry[1] != cat:
            self.by_cat[entry[1]] -= entry[0]
            self.by_cat[cat] += entry[0]
            entry[1] = cat
            self.cat_max[cat] = max(self.cat_max[cat], self.by_cat[cat])
            self._check_peak()

    def reclassify(self, t: torch.Tensor, cat: str, only_from: tuple[str, ...] = ("temporaries",)) -> None:
        ks = self._key(t)
        if ks is None:
            return
        entry = self.live.get(ks[0])
        if entry is None:
            self.add(t, cat)
        elif entry[1] in only_from:
            self.add(t, cat)

    def _free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.by_cat[entry[1]] -= entry[0]
            self.total -= entry[0]

    def _resize(self, st: torch.UntypedStorage, nbytes: int) -> None:
        entry = self.live.get(st._cdata)
        if entry is None:
            return
        delta = nbytes - entry[0]
        entry[0] = nbytes
        self.by_cat[entry[1]] += delta
        self.total += delta
        self._check_peak()

    def _check_peak(self) -> None:
        held = self.by_cat["activations"] + self.by_cat["recomputed"]
        if held > self.held_max:
            self.held_max = held
        if self.total > self.phase_max.get(self.phase, 0):
            self.phase_max[self.phase] = self.total
        for c, v in self.by_cat.items():
            if v > self.cat_max[c]:
                self.cat_max[c] = v
        if self.total > self.peak:
            self.peak = self.total
            self.peak_by_cat = dict(self.by_cat)
            self.peak_phase = self.phase

    def mark(self, event: str) -> None:
        self.timeline.append((event, self.total))

    def set_phase(self, phase: str, label: str | None = None) -> None:
        if self.phase == "forward" and phase == "backward":
            for entry in self.live.values():  # alive since forward: kept for backward
                if entry[1] == "temporaries" and entry[2] == "forward":
                    self.by_cat["temporaries"] -= entry[0]
                    self.by_cat["activations"] += entry[0]
                    entry[1] = "activations"
            self._check_peak()
        self.module_stack.clear()
        self.phase = phase
        self.mark(label or phase)

    def reset_peak(self) -> None:
        self.peak = self.total
        self.peak_by_cat = dict(self.by_cat)
        self.peak_phase = self.phase
        self.cat_max = dict(self.by_cat)
        self.held_max = 0
        self.phase_max = {}
        self.timeline = []
        self.flops.clear()
        self.module_flops.clear()
        self.saved_by_module.clear()
        self.flash_bwd_flops = 0.0

    # ---- dispatch --------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._new_outputs(out)
        packet = func._overloadpacket
        formula = EXTRA_FORMULAS.get(packet) or flop_registry.get(packet)
        if formula is not None:
            n = _local_flops(formula, args, kwargs, out)
            attention = packet in ATTENTION
            phase = self.phase
            if phase == "backward" and self.module_stack:  # a module's forward during backward: recompute
                phase = "recompute"
            self.flops[(phase, "attention" if attention else "matmul")] += n
            if packet in ATTENTION_BWD:
                self.flash_bwd_flops += n
            if self.module_stack and phase == "forward":
                self.module_flops[self.module_stack[-1]] += n
        return out

    # ---- hooks ------------------------------------------------------------------------------
    def _new_outputs(self, out: Any) -> None:
        """Enter the storages an op made that the table does not hold yet (a temporary, or in a backward's module
        forward a recomputed tensor)."""
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                t = getattr(t, "_local_tensor", t)  # DTensor (tensor parallel): this rank's shard
                ks = self._key(t)
                if ks is not None and ks[0] not in self.live:
                    self.add(t, "recomputed" if self.phase == "backward" and self.module_stack else "temporaries")

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, torch.Tensor) and not isinstance(t, torch.nn.Parameter):
            local = getattr(t, "_local_tensor", t)
            ks = self._key(local)
            entry = self.live.get(ks[0]) if ks is not None else None
            if entry is not None and entry[1] == "temporaries":
                cat = "loss" if self.in_loss else "activations"
                self.add(local, cat)
                where = self.module_stack[-1] if self.module_stack else ("loss" if self.in_loss else "(top level)")
                self.saved_by_module[where] += entry[0]
        return t

    @contextmanager
    def loss_scope(self):  # noqa: ANN201
        self.in_loss = True
        try:
            yield
        finally:
            self.in_loss = False

    @contextmanager
    def tracking(self):  # noqa: ANN201
        """Enter the dispatch mode, the saved-tensor hook and the resize wrapper."""
        orig = torch.UntypedStorage.resize_
        tracker = self

        def resize_(st, size):  # noqa: ANN001, ANN202
            orig(st, size)
            tracker._resize(st, size)

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t), _local_ops(self), self:
                yield self
        finally:
            torch.UntypedStorage.resize_ = orig  # type: ignore[method-assign]

    def watch_modules(self, model: torch.nn.Module) -> list:
        """Forward hooks naming the module that runs each op (layer indices folded to ``*``)."""
        handles = []
        for name, mod in model.named_modules():
            label = ".".join("*" if p.isdigit() else p for p in name.split(".")) or type(mod).__name__

            def pre(_m, _a, label=label):  # noqa: ANN001, ANN202
                self.module_stack.append(label)

            def post(_m, _a, _o):  # noqa: ANN001, ANN202
                if self.module_stack:
                    self.module_stack.pop()

            handles.append(mod.register_forward_pre_hook(pre))
            handles.append(mod.register_forward_hook(post))
        return handles

    def register(self, tensors: Iterable[torch.Tensor], cat: str) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self.add(getattr(t, "_local_tensor", t), cat)


@contextmanager
def _local_ops(tracker: StepTracker):  # noqa: ANN201
    """Let ``tracker`` see the ops a DTensor runs on its local shards. A dispatch mode is popped while a tensor
    subclass's ``__torch_dispatch__`` runs, so the local ops inside one DTensor op — the temporaries of PyTorch's
    loss_parallel handlers (zeros_like, exp and their sum beside the saved log-softmax), an implicit redistribute's
    buffers — reach only the fake mode underneath: hooked there, for the step's own fake mode, outside DTensor's
    sharding propagation (which runs the op on global-shape fakes under that mode; on a GPU they take no memory)."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = detect_fake_mode()
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:  # torch without distributed: no DTensor to look inside
        yield
        return
    orig_dispatch, orig_prop = FakeTensorMode.__torch_dispatch__, ShardingPropagator._propagate_tensor_meta_non_cached
    propagating = [0]

    def dispatch(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
        out = orig_dispatch(self, func, types, args, kwargs)
        if self is mode and not propagating[0]:
            tracker._new_outputs(out)
        return out

    def propagate(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        propagating[0] += 1
        try:
            return orig_prop(self, *args, **kwargs)
        finally:
            propagating[0] -= 1

    FakeTensorMode.__torch_dispatch__ = dispatch  # type: ignore[method-assign]
    ShardingPropagator._propagate_tensor_meta_non_cached = propagate  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeTensorMode.__torch_dispatch__ = orig_dispatch  # type: ignore[method-assign]
        ShardingPropagator._propagate_tensor_meta_non_cached = orig_prop  # type: ignore[method-assign]
