"""``gpuplan profile``: run the trial, put measured beside predicted, advise, remember."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.catalog.hardware import get_gpu
from gpuplan.catalog.hardware import gpus as catalogue_gpus
from gpuplan.errors import GpuplanError
from gpuplan.model.estimate import evaluate
from gpuplan.profile.launch import check_devices, run_trial
from gpuplan.profile.model_check import check_model
from gpuplan.report.progress import ProgressBar
from gpuplan.report.render import estimate_json
from gpuplan.spec.layout import Layout
from gpuplan.spec.scenario import Scenario, complete_layout, normalized
from gpuplan.units import GiB


def _gpu_of(device_name: str, fallback: str) -> str:
    """Catalogue id of the GPU torch reports ("NVIDIA H200" → h200); the scenario's when unknown."""
    name = device_name.lower().replace("nvidia", "").strip()
    for cand in (name, name.replace(" ", "-")):
        try:
            return get_gpu(cand).id
        except GpuplanError:
            pass
    for g in catalogue_gpus():
        if g.id.split("-")[0] in name.split():
            return g.id
    return fallback


def measured_block(results: list[dict], tokens_per_step: int, model_flops_per_token: float, peak16: float,
                   world: int) -> dict:
    """The most loaded rank's memory and the slowest rank's time, in the Estimate's keys."""
    worst = max(results, key=lambda r: (r.get("peak_allocated") or 0, r["param_bytes"] + r["grad_bytes"]
                                        + r["optimizer_bytes"]))
    states = worst["param_bytes"] + worst["grad_bytes"] + worst["optimizer_bytes"]
    peak = worst.get("peak_allocated")
    reserved = worst.get("peak_reserved")
    step = statistics.median(max(r["step_s"][i] for r in results) for i in range(len(results[0]["step_s"])))
    tps = tokens_per_step / step
    return {
        "memory": {"weights": worst["param_bytes"], "gradients": worst["grad_bytes"],
                   "optimizer": worst["optimizer_bytes"], "model_states": states,
                   "activations": (peak - states) if peak is not None else None, "total": peak,
                   "reserved": reserved,
                   "fragmentation": (1 - peak / reserved) if peak and reserved else None,
                   "capacity": worst.get("device_total_memory")},
        "time": {"step_s": step, "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
                 "mfu": model_flops_per_token * tps / (world * peak16) if peak16 else None},
    }


FIT_SHARE = 0.95  # advice leaves 5% of a card free for allocator spikes the model does not see
MAX_ADVISED_MICRO_BATCH = 1024


def _scaled_total(sc: Scenario, scale: float, **overrides: Any) -> float | None:
    """The analytic peak of ``sc`` (with layout ``overrides``) times the measured/predicted ratio;
    None when that layout is not valid there (a micro-batch that does not divide the batch …)."""
    try:
        return evaluate(sc, **overrides).memory.total * scale
    except GpuplanError:
        return None


def largest_micro_batch(sc: Scenario, start: int, scale: float, capacity: float) -> tuple[int, float] | None:
    """The largest micro-batch above ``start`` whose scaled prediction fits ``capacity`` on the same
    layout and GPU, with that prediction; None when not even ``start + 1`` fits."""
    best = None
    for mb in range(start + 1, MAX_ADVISED_MICRO_BATCH + 1):
        total = _scaled_total(sc, scale, micro_batch=mb)
        if total is None:
            continue
        if total > capacity * FIT_SHARE:
            break  # memory grows with the micro-batch
        best = (mb, total)
    return best


def cheapest_gpu(sc: Scenario, micro_batch: int, scale: float) -> tuple[Any, float] | None:
    """The catalogue GPU type with the lowest price per GPU-hour, cheaper than the current one,
    that holds the run (same GPU count and layout; scaled prediction) — with that prediction."""
    from gpuplan.catalog.hardware import make_hardware

    here = sc.hardware.gpu
    here_price = sc.hardware.price_per_gpu_hour or here.price_usd_per_gpu_hour
    best = None
    for g in catalogue_gpus():
        price = g.price_usd_per_gpu_hour
        if g.id == here.id or price is None or (here_price is not None and price >= here_price):
            continue
        if best is not None and price >= best[0].price_usd_per_gpu_hour:
            continue
        try:
            hw = make_hardware(g.id, gpus=sc.hardware.gpus, gpus_per_node=sc.hardware.gpus_per_node)
        except GpuplanError:
            continue
        total = _scaled_total(replace(sc, hardware=hw), scale, micro_batch=micro_batch)
        if total is not None and total <= g.usable_memory_bytes * FIT_SHARE:
            best = (g, total)
    return best


def _short_name(name: str) -> str:
    """'NVIDIA A100 80GB PCIe' → 'A100 80GB PCIe'; 'NVIDIA A10G (AWS G5)' → 'A10G'."""
    words = name.split(" (")[0].split()
    return " ".join(w for w in words[1:] if w != "Instinct") or name


def _with_article(name: str) -> str:
    """'an L40S', 'an A100 …', 'a GeForce RTX 4090' (letters read with a leading vowel sound take 'an')."""
    return f"{'an' if name[:1].upper() in 'AEFHILMNORSX' else 'a'} {name}"


def advise(sc: Scenario, measured: dict, predicted: dict, oom: bool) -> list[str]:
    """Advice from a trial. Unused memory (under 60% of the card) → the largest micro-batch that
    still fits and the cheapest catalogue GPU type that holds the run, both from the analytic model
    scaled by this run's measured/predicted peak (so its error on this stack is corrected)."""
    out = []
    lay = predicted["scenario"]["layout"]
    if oom:
        fixes = [f for f in ("micro_batch=1" if lay["micro_batch"] > 1 else "",
                             "recompute=full" if lay["recompute"] != "full" else "",
                             "zero=3" if lay["zero"] < 3 else "", "more GPUs") if f]
        return [f"out of memory on the first steps: try {', '.join(fixes)} (`gpuplan plan` ranks them)"]
    cap = measured["memory"]["capacity"]
    used = measured["memory"]["reserved"] or measured["memory"]["total"]
    if not (cap and used) or used / cap >= 0.6:
        return out
    head = f"you use {used / GiB:.0f} of {cap / GiB:.0f} GiB ({used / cap:.0%})"
    p_total = predicted["memory"]["total"]
    if not p_total:
        return [f"{head}: raise the micro-batch (`--find-max-batch` measures the largest that fits) "
                "or take a smaller, cheaper GPU type"]
    scale = used / p_total
    mb = lay["micro_batch"]
    ideas = []
    bigger = largest_micro_batch(sc, mb, scale, cap)
    if bigger:
        ideas.append(f"micro_batch {bigger[0]} fits (predicted {bigger[1] / GiB:.0f} GiB"
                     f"{', `--find-max-batch` measures it' if bigger[0] > mb else ''})")
    cheaper = cheapest_gpu(sc, mb, scale)
    if cheaper:
        g, total = cheaper
        ideas.append(f"{_with_article(_short_name(g.name))} "
                     f"({g.usable_memory_bytes / GiB:.0f} GiB) holds it at ${g.price_usd_per_gpu_hour:.2f}/GPU-h "
                     f"(predicted {total / GiB:.0f} GiB)")
    if not ideas:
        return [f"{head}: no larger micro-batch or cheaper catalogue GPU type holds this run by the "
                "prediction; `--find-max-batch` measures the largest micro-batch that fits"]
    scaled = f"; predictions scaled by this run's measured/predicted peak {scale:.2f}" if abs(scale - 1) > 0.005 else ""
    return [f"{head}: {', or '.join(ideas)}{scaled}"]


def profile(sc: Scenario, *, device: str, nproc: int, nnodes: int = 1, steps: int = 5, warmup: int = 2,
            timeout_s: float = 600, find_max_batch: bool = False, max_micro_batch: int = 64,
            extra_args: list[str] | None = None, raw: dict | None = None,
            progress: ProgressBar | None = None) -> dict[str, Any]:
    """``progress`` (optional) is redrawn while torchrun runs: steps done of warm-up + measured."""
    check_devices(device, nproc)
    extra_args = _rendezvous(nnodes, extra_args)
    world = nproc * nnodes
    sc, lay, notes = _trial_scenario(sc, nproc, world)
    run = _TrialRun(device=device, nproc=nproc, steps=steps, warmup=warmup, timeout_s=timeout_s,
                    extra_args=extra_args, progress=progress)
    results, trial = run.attempt(sc, lay.micro_batch)
    oom = any(r.get("oom") for r in results)
    failed = [r for r in results if not r.get("ok") and not r.get("oom")]
    if failed:
        raise GpuplanError(f"rank {failed[0]['rank']} failed: {failed[0]['error']}")
    gpu_id = _gpu_of(results[0].get("device_name", "cpu"), sc.hardware.gpu.id) if device == "cuda" \
        else sc.hardware.gpu.id
    if gpu_id != sc.hardware.gpu.id:
        from gpuplan.catalog.hardware import make_hardware

        hw = make_hardware(gpu_id, gpus=world, gpus_per_node=nproc)
        sc = replace(sc, hardware=hw)
        trial = replace(trial, hardware=hw)
    predicted = estimate_json(evaluate(trial))
    report: dict[str, Any] = {"device": device, "gpu": gpu_id if device == "cuda" else "cpu", "world": world,
                              "predicted": {"memory": predicted["memory"], "time": predicted["time"]},
                              "scenario": predicted["scenario"], "oom": oom, "notes": notes}
    if oom:
        report["advice"] = advise(sc, {}, predicted, True)
        return report
    report.update(_measured_vs_predicted(sc, results, predicted, device, world))
    if find_max_batch:
        report["max_micro_batch"] = _bisect(lambda mb: run.attempt(sc, mb), lay.micro_batch, max_micro_batch)
    return report


def _rendezvous(nnodes: int, extra_args: list[str] | None) -> list[str] | None:
    """Several nodes need torchrun's rendezvous options (after ``--``), with the node count in them."""
    if nnodes > 1 and not extra_args:
        raise GpuplanError(f"--nnodes {nnodes} needs torchrun's rendezvous options after `--` on every node, e.g. "
                           "`-- --node-rank 0 --rdzv-backend c10d --rdzv-endpoint HOST:29400`; one node needs none")
    if extra_args and not any(a == "--nnodes" or a.startswith("--nnodes=") for a in extra_args):
        return ["--nnodes", str(nnodes), *extra_args]
    return extra_args


def _trial_scenario(sc: Scenario, nproc: int, world: int) -> tuple[Scenario, Layout, list[str]]:
    """The scenario on ``world`` ranks as the trial runs it, its complete layout and notes; refuses
    layouts the trial cannot run before torchrun starts."""
    sc = replace(sc, hardware=replace(sc.hardware, gpus=world, gpus_per_node=max(nproc, 1)))
    notes = []
    if sc.layout.get("tp", 1) > 1 and "sequence_parallel" not in sc.layout:
        # the trial's tensor parallelism keeps whole activations (no sequence parallelism): predict that
        sc = replace(sc, layout={**sc.layout, "sequence_parallel": False})
        notes.append("tensor parallel without sequence parallelism (norms and activations whole on each tp rank)")
    sc, launched = _as_launched(sc, world)
    notes += launched
    lay = complete_layout(sc)
    if lay.pp > 1 or lay.cp > 1 or lay.ep > 1:
        raise GpuplanError(f"trial runs use FSDP2 with tensor parallel (dp × tp): set pp, cp and ep to 1 "
                           f"(got pp={lay.pp}, cp={lay.cp}, ep={lay.ep})")
    if lay.sequence_parallel:
        raise GpuplanError("trial runs apply tensor parallel without sequence parallelism: "
                           "set sequence_parallel false")
    if lay.recompute not in ("none", "full"):
        raise GpuplanError(f"trial runs apply recompute none or full, not {lay.recompute!r}: choose one of them")
    if sc.training.preference is not None:
        raise GpuplanError(f"trial runs train a supervised step; preference {sc.training.preference} (pairs, a "
                           "reference model) is not run: drop training.preference to profile the policy's step")
    if sc.training.optimizer_in_backward or sc.training.activation_offloading:
        raise GpuplanError("trial runs step the optimizer after backward and keep activations on the GPU: drop "
                           "training.optimizer_in_backward and training.activation_offloading to profile")
    if sc.training.cuda_graphs != "none":
        raise GpuplanError("trial runs launch their kernels eagerly, without CUDA graphs: set training.cuda_graphs: "
                           "none to profile (the estimate carries the graphs' documented allowance instead)")
    check_model(sc.model, lay.tp)  # before torchrun starts, not in every rank after it
    return sc, lay, notes


TRIAL_FRAMEWORK = "pytorch-fsdp"  # the trial's worker: plain PyTorch, FSDP2 fully_shard (profile/worker.py)


def _as_launched(sc: Scenario, world: int) -> tuple[Scenario, list[str]]:
    """``sc`` as the trial runs it: PyTorch FSDP2 (framework pytorch-fsdp, its gradient dtype), and on more
    than one data-parallel rank FSDP2's full shard — ZeRO-3 — where the scenario leaves ZeRO open."""
    notes = []
    tr = sc.training
    if tr.framework != TRIAL_FRAMEWORK:
        from gpuplan.catalog.frameworks import grad_dtype_of

        tr = replace(tr, framework=TRIAL_FRAMEWORK)
        if tr.grad_dtype is not None and "training.grad_dtype" not in sc.given:
            tr = replace(tr, grad_dtype=grad_dtype_of(replace(tr, grad_dtype=None)))
        notes.append(f"predicted as the trial runs: PyTorch FSDP2 (framework {TRIAL_FRAMEWORK}, not "
                     f"{sc.training.framework}; gradients {tr.grad_dtype or 'param'})")
        sc = replace(sc, training=tr)
    dp = world // max(1, int(sc.layout.get("tp", 1)) * int(sc.layout.get("pp", 1)) * int(sc.layout.get("cp", 1)))
    if dp > 1:
        zero = sc.layout.get("zero")
        if zero is None:
            sc = replace(sc, layout={**sc.layout, "zero": 3})
            notes.append(f"FSDP2 full shard over the {dp} data-parallel ranks: predicted as zero=3")
        elif zero != 3:
            raise GpuplanError(f"trial runs shard with FSDP2 full shard (ZeRO-3) over {dp} data-parallel ranks: "
                               f"set zero 3 or leave it open (got zero={zero})")
    return sc, notes


@dataclass(frozen=True, slots=True, kw_only=True)
class _TrialRun:
    """How every trial of one ``profile`` call runs (torchrun options, the progress line)."""
    device: str
    nproc: int
    steps: int
    warmup: int
    timeout_s: float
    extra_args: list[str] | None
    progress: ProgressBar | None

    def attempt(self, sc: Scenario, micro_batch: int) -> tuple[list[dict], Scenario]:
        """One torchrun of ``sc`` at ``micro_batch``: every rank's result, and the scenario it ran."""
        trial = replace(sc, layout={**sc.layout, "micro_batch": micro_batch})
        if self.progress is not None:
            self.progress.title = f"profiling (micro-batch {micro_batch})"
        return run_trial(_raw(trial), device=self.device, nproc=self.nproc, steps=self.steps, warmup=self.warmup,
                         timeout_s=self.timeout_s, extra_args=self.extra_args, progress=self.progress), trial


def _measured_vs_predicted(sc: Scenario, results: list[dict], predicted: dict, device: str,
                           world: int) -> dict[str, Any]:
    """The report's ``measured``, ``ratio`` (measured / predicted) and ``advice`` of a run that fitted."""
    peak16 = sc.hardware.gpu.peak_flops.get("bf16") if device == "cuda" else None
    measured = measured_block(results, results[0]["tokens_per_step"], predicted["time"]["model_flops_per_token"],
                              peak16, world)
    pm, mm = predicted["memory"], measured["memory"]
    p_states = pm["weights"] + pm["gradients"] + pm["optimizer"]
    ratio = {
        "model_states": mm["model_states"] / p_states if p_states else None,
        "total": mm["total"] / pm["total"] if mm["total"] else None,
        "tokens_per_s": measured["time"]["tokens_per_s"] / predicted["time"]["tokens_per_s"]
        if device == "cuda" else None,
    }
    return {"measured": measured, "ratio": ratio, "advice": advise(sc, measured, predicted, False)}


def _raw(sc: Scenario) -> dict:
    """A scenario mapping the worker can parse again (the model as its normalized reference)."""
    lay = dict(sc.layout)
    n = normalized(sc, complete_layout(sc))
    hw = {k: n["hardware"][k] for k in ("gpu", "gpus", "gpus_per_node")}
    tr = {k: v for k, v in n["training"].items() if v is not None and k in (
        "seq_len", "global_batch", "precision", "optimizer", "method", "attention")}
    return {"model": _model_ref(sc), "hardware": hw, "training": tr, "layout": lay}


def _model_ref(sc: Scenario) -> Any:
    return sc.model_ref if sc.model_ref is not None else sc.model.name


def _bisect(attempt, start: int, cap: int) -> int:
    """Largest micro-batch that trains without running out of memory: double, then bisect.
    Each try is a fresh torchrun, so memory is released between tries."""
    def fits(mb: int) -> bool:
        res, _ = attempt(mb)
        return not any(r.get("oom") for r in res)

    good, bad = start, None
    mb = start * 2
    while mb <= cap:
        if fits(mb):
            good, mb = mb, mb * 2
        else:
            bad = mb
            break
    if bad is None:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good
