"""Achievable matmul throughput by GPU architecture and precision, from ``matmul.json``.

Every number there is a published measurement with its source: the best-shape share of the
dense datasheet peak (MAMF: boost burst; MSMF: sustained at the power limit), other published
rows for the spread, shape anchors where a sweep is published, the (architecture, precision)
pairs nobody has measured, cited shape rules, and the extra memory passes of fp8 scaling.

``matmul_profile("hopper", "bf16")`` is the entry point; it returns ``None`` for a pair with no
published measurement (``not_measured_reason`` says why).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpuplan.catalog import load_json

_FILE = "matmul.json"
# spellings of a precision accepted besides the canonical bf16 / fp16 / fp8 / fp4 / tf32
_PRECISION_ALIASES = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8", "float8_e4m3fn": "fp8",
    "fp8_e4m3": "fp8", "e4m3": "fp8", "nvfp4": "fp4", "tensorfloat32": "tf32",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a number was published: a URL and the section of that page that holds it."""

    key: str
    url: str
    section: str

    def __str__(self) -> str:
        return f"{self.section} ({self.url})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One published best-shape matmul measurement on one GPU."""

    gpu: str
    gpu_id: str | None          # the gpus.json id when the GPU is in the catalogue
    peak_tflops: float          # dense datasheet peak of that GPU at this precision
    mamf_tflops: float          # max achievable (boost burst), best shape found
    msmf_tflops: float | None   # max sustainable (at the power limit), when published
    best_shape_mnk: str | None  # "MxNxK" of the MAMF, as published
    msmf_shape_mnk: str | None
    software: str
    source: Source
    note: str

    @property
    def mamf_share(self) -> float:
        return self.mamf_tflops / self.peak_tflops

    @property
    def msmf_share(self) -> float | None:
        return None if self.msmf_tflops is None else self.msmf_tflops / self.peak_tflops


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeAnchor:
    """Published throughput of one matmul shape: (m x k) @ (k x n)."""

    m: int
    n: int
    k: int
    tflops: float
    peak_tflops: float
    gpu: str
    source: Source
    note: str

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def share(self) -> float:
        return self.tflops / self.peak_tflops


@dataclass(frozen=True, slots=True, kw_only=True)
class MatmulProfile:
    """Achievable matmul throughput of one architecture at one precision."""

    architecture: str
    precision: str
    mamf_share: float            # measured.mamf_share: best shape, boost burst
    msmf_share: float | None     # measured.msmf_share: best shape, sustained; None if unpublished
    measured: Measurement        # the row to model with
    alternates: tuple[Measurement, ...]
    anchors: tuple[ShapeAnchor, ...]
    anchors_note: str            # what shape data exists, or that none is published
    notes: tuple[str, ...]
    source: Source               # of ``measured``


@dataclass(frozen=True, slots=True, kw_only=True)
class NotMeasured:
    architecture: str
    precision: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CitedFact:
    fact: str
    source: Source


@dataclass(frozen=True, slots=True, kw_only=True)
class Fp8ScalingCost:
    """Memory traffic that fp8 scaling adds for one tensor of a Linear (fwd + bwd), per element."""

    recipe: str                  # tensorwise | rowwise | rowwise_with_gw_hp | mxfp8 | delayed
    granularity: str
    role: str                    # input_or_grad_output | weight | any
    kernels: tuple[str, ...]
    bytes_per_element: float
    bytes_per_element_fused_with_prev: float | None  # first read fused into the producer; None: not modelled
    source: Source
    note: str


def _canonical_precision(precision: str) -> str:
    key = precision.strip().lower()
    return _PRECISION_ALIASES.get(key, key)


@cache
def _doc() -> dict[str, Any]:
    return load_json(_FILE)


@cache
def _sources() -> dict[str, Source]:
    return {key: Source(key=key, url=row["url"], section=row["section"])
            for key, row in _doc()["sources"].items()}


def source(key: str) -> Source:
    """A source of ``matmul.json`` by its key (KeyError if unknown)."""
    return _sources()[key]


def _measurement(row: dict[str, Any]) -> Measurement:
    return Measurement(
        gpu=row["gpu"], gpu_id=row.get("gpu_id"), peak_tflops=float(row["peak_tflops"]),
        mamf_tflops=float(row["mamf_tflops"]),
        msmf_tflops=float(row["msmf_tflops"]) if row.get("msmf_tflops") is not None else None,
        best_shape_mnk=row.get("best_shape_mnk"), msmf_shape_mnk=row.get("msmf_shape_mnk"),
        software=row["software"], source=source(row["source"]), note=row.get("note", ""),
    )


def _anchor(row: dict[str, Any]) -> ShapeAnchor:
    return ShapeAnchor(m=int(row["m"]), n=int(row["n"]), k=int(row["k"]), tflops=float(row["tflops"]),
                       peak_tflops=float(row["peak_tflops"]), gpu=row["gpu"], source=source(row["source"]),
                       note=row.get("note", ""))


def _profile(row: dict[str, Any]) -> MatmulProfile:
    measured = _measurement(row["measured"])
    return MatmulProfile(
        architecture=row["architecture"], precision=row["precision"],
        mamf_share=measured.mamf_share, msmf_share=measured.msmf_share, measured=measured,
        alternates=tuple(_measurement(r) for r in row.get("alternates", ())),
        anchors=tuple(_anchor(r) for r in row.get("anchors", ())),
        anchors_note=row.get("anchors_note", ""), notes=tuple(row.get("notes", ())),
        source=measured.source,
    )


@cache
def _profile_index() -> dict[tuple[str, str], MatmulProfile]:
    out: dict[tuple[str, str], MatmulProfile] = {}
    for row in _doc()["profiles"]:
        prof = _profile(row)
        key = (prof.architecture, prof.precision)
        if key in out:
            raise ValueError(f"{_FILE}: two profiles for {key}")
        out[key] = prof
    return out


def matmul_profile(architecture: str, precision: str) -> MatmulProfile | None:
    """The published achievable-matmul profile of an architecture (as in gpus.json, e.g.
    ``hopper``) at a precision (``bf16``, ``fp16``, ``fp8``, ``fp4``, ``tf32``); ``None`` if none
    is published."""
    return _profile_index().get((architecture.strip().lower(), _canonical_precision(precision)))


def matmul_profiles() -> tuple[MatmulProfile, ...]:
    return tuple(_profile_index().values())


def _sustained_ratios(architecture: str) -> tuple[float, ...]:
    """MSMF / MAMF of every published 16-bit row of an architecture that gives both (the same sweep's best shape
    held at the power limit against its boost burst)."""
    prof = matmul_profile(architecture, "bf16")
    rows = (prof.measured, *prof.alternates) if prof is not None else ()
    return tuple(r.msmf_tflops / r.mamf_tflops for r in rows if r.msmf_tflops is not None)


@cache
def sustained_ratio(architecture: str) -> float:
    """The share of its burst matmul rate a GPU of ``architecture`` holds under sustained load: the median MSMF / MAMF
    of the architecture's 16-bit rows that publish both (ML Engineering's sustained-matmul table: Hopper 0.849 and
    0.888, Ampere 0.905, Blackwell 0.80-0.84, CDNA3 0.975 — MI300X reaches its power cap within the first kernel, so
    its MAMF is already a sustained rate); an architecture with none measured takes the median over the measured
    architectures (an estimate). fp8 and fp4 rows of the same GPUs sit within 0.02 of their 16-bit ratio (H200
    0.888, B200 0.823-0.845): one ratio per architecture."""
    own = _sustained_ratios(architecture)
    if own:
        return statistics.median(own)
    return statistics.median(statistics.median(r) for r in map(_sustained_ratios, sorted(
        {p.architecture for p in matmul_profiles()})) if r)


@cache
def not_measured() -> tuple[NotMeasured, ...]:
    """The (architecture, precision) pairs with no published measurement, each with the reason."""
    return tuple(NotMeasured(architecture=r["architecture"], precision=r["precision"], reason=r["reason"])
                 for r in _doc()["not_measured"])


def not_measured_reason(architecture: str, precision: str) -> str | None:
    arch, prec = architecture.strip().lower(), _canonical_precision(precision)
    return next((n.reason for n in not_measured() if (n.architecture, n.precision) == (arch, prec)), None)


def _facts(rows: list[dict[str, Any]]) -> tuple[CitedFact, ...]:
    return tuple(CitedFact(fact=r["fact"], source=source(r["source"])) for r in rows)


@cache
def shape_facts() -> tuple[CitedFact, ...]:
    """Cited rules of how matmul throughput depends on shape (alignment, tile and wave quantization,
    K, power), valid across architectures."""
    return _facts(_doc()["shape_dependence"]["rules"])


@cache
def fp8_scaling_facts() -> tuple[CitedFact, ...]:
    return _facts(_doc()["fp8_scaling_overhead"]["facts"])


@cache
def _fp8_costs() -> tuple[Fp8ScalingCost, ...]:
    out = []
    for r in _doc()["fp8_scaling_overhead"]["recipes"]:
        fused = r.get("bytes_per_element_fused_with_prev")
        out.append(Fp8ScalingCost(
            recipe=r["recipe"], granularity=r["granularity"], role=r["role"], kernels=tuple(r["kernels"]),
            bytes_per_element=float(r["bytes_per_element"]),
            bytes_per_element_fused_with_prev=None if fused is None else float(fused),
            source=source(r["source"]), note=r.get("note", ""),
        ))
    return tuple(out)


def fp8_cast_share(recipe: str) -> float:
    """The share of the streaming bandwidth a recipe's scaling kernels reach (``fp8_scaling_overhead``
    ``cast_bandwidth_share``, measured where a microbenchmark gives it: torchao's rowwise kernels under
    torch.compile); 1 (the streaming rate) for the others."""
    entry = _doc()["fp8_scaling_overhead"].get("cast_bandwidth_share", {}).get(recipe.strip().lower())
    return float(entry["value"]) if entry else 1.0


def fp8_scaling_costs(recipe: str | None = None) -> tuple[Fp8ScalingCost, ...]:
    """Per-element bytes that fp8 scaling adds, for all recipes or one (``tensorwise``, ``rowwise``,
    ``rowwise_with_gw_hp``, ``mxfp8``, ``delayed``); empty for an unknown recipe."""
    costs = _fp8_costs()
    return costs if recipe is None else tuple(c for c in costs if c.recipe == recipe.strip().lower())


@dataclass(frozen=True, slots=True)
class KernelModel:
    """How an architecture's GEMM library tiles a problem (catalog/matmul.json ``kernel_model``): the
    output tiles it chooses among, the K splits, the K depth of one mainloop step, the fixed time of a
    kernel, the fixed work per output tile (in K elements), the split-K reduction's fixed cost, and the
    alignment below which a slower kernel runs (``align_factor`` of the aligned rate)."""

    tiles: tuple[tuple[int, int], ...]
    splits: tuple[int, ...]
    tile_depth: int
    floor_s: float
    tile_k: float
    reduce_s: float
    align_bytes: int
    align_factor: float


@dataclass(frozen=True, slots=True)
class Sweep:
    """A published shape sweep: (m, n, k, TFLOP/s) measured on ``gpu_id``."""

    architecture: str
    precision: str
    gpu_id: str
    source: Source
    points: tuple[tuple[int, int, int, float], ...]


@cache
def _kernel_models() -> dict[str, KernelModel]:
    doc = _doc()["kernel_model"]
    align = doc["alignment"]
    out = {}
    for arch, row in doc["architectures"].items():
        base = doc["architectures"][row["as"]] if "as" in row else row
        out[arch] = KernelModel(
            tiles=tuple(tuple(t) for t in base["tiles"]), splits=tuple(base["split_k"]),  # type: ignore[misc]
            tile_depth=int(base["tile_depth"]), floor_s=float(base["floor_s"]), tile_k=float(base["tile_k"]),
            reduce_s=float(base["reduce_s"]), align_bytes=int(align["bytes"]), align_factor=float(align["factor"]))
    return out


def kernel_model(architecture: str) -> KernelModel:
    """The GEMM kernel model of an architecture (``default`` for one the catalogue does not name)."""
    models = _kernel_models()
    return models.get(architecture, models["default"])


@cache
def _sweeps() -> dict[tuple[str, str], Sweep]:
    return {(s["architecture"], s["precision"]): Sweep(
        architecture=s["architecture"], precision=s["precision"], gpu_id=s["gpu_id"], source=source(s["source"]),
        points=tuple((int(m), int(n), int(k), float(tf)) for m, n, k, tf in s["m_n_k_tflops"]))
        for s in _doc().get("sweeps", ())}


def matmul_sweep(architecture: str, precision: str) -> Sweep | None:
    """The measured shape sweep of an architecture at a precision, or None."""
    return _sweeps().get((architecture, _canonical_precision(precision)))


def _shape(mnk: str | None) -> tuple[int, int, int] | None:
    if not mnk:
        return None
    m, n, k = (int(x) for x in mnk.split("x"))
    return m, n, k


Shape = tuple[int, int, int]


def mamf_row(architecture: str, precision: str, gpu_id: str | None = None) -> tuple[float, Shape | None] | None:
    """(MAMF share of peak, its best shape) for a GPU: its own published row (the profile's
    ``measured`` row first, then the alternates in order) where there is one, else the architecture's
    ``measured`` row; None with no profile. A row without a shape takes the architecture's shape."""
    prof = matmul_profile(architecture, precision)
    if prof is None:
        return None
    own = next((r for r in (prof.measured, *prof.alternates) if gpu_id and r.gpu_id == gpu_id), None)
    row = own or prof.measured
    return row.mamf_share, _shape(row.best_shape_mnk) or _shape(prof.measured.best_shape_mnk)
