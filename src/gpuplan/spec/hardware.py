"""The hardware a run is planned on: a GPU type, fabrics, counts, price (SI units inside)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpuplan.errors import GpuplanError
from gpuplan.spec._checks import positive as _positive


@dataclass(frozen=True, slots=True, kw_only=True)
class BusCurve:
    """A published collective bandwidth sweep on one fabric (nccl-tests / rccl-tests ``busbw`` by
    message size): what ``model/comm.py`` reads the fabric's efficiency, size ramp and small-message
    latency from. Sizes follow nccl-tests (the all-reduce buffer, the all-gather output)."""

    collective: Literal["all_reduce", "all_gather", "reduce_scatter"]
    gpus: int                                # the group the sweep ran on: inside one domain, or over two nodes
    algorithm: Literal["ring", "nvls", "tree"]  # what NCCL ran (NVLS: NVLink SHARP; tree: its default on two nodes)
    sizes: tuple[float, ...]                 # bytes, ascending
    bus_bytes_per_s: tuple[float, ...]       # nccl-tests busbw at each size
    fabric: str = ""                         # the fabric it was measured on, and that fabric's rates:
    link_bytes_per_s: float = 0.0            # per GPU, per direction
    mesh_link_bytes_per_s: float = 0.0       # one link of a full mesh (0: switched)
    nvls_efficiency: float = 0.0             # NVLink SHARP (0: none)
    nics: int = 0                            # a network sweep: the NICs per node of the fabric it ran on
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """An interconnect from the catalogue (``catalog/fabrics.json``), in SI units."""

    id: str
    name: str
    kind: Literal["scale_up", "scale_out"]
    bytes_per_s_per_gpu: float | None = None  # scale-up: per GPU, per direction
    domain_gpus: int | None = None            # scale-up: GPUs in one domain
    link_bytes_per_s: float | None = None     # scale-out: one link, per direction
    links_per_node: int | None = None         # scale-out: NICs per node
    latency_s: float | None = None
    efficiency: float | None = None           # achievable share of line rate (cited)
    source: str = ""
    mesh_link_bytes_per_s: float | None = None  # scale-up full mesh: one GPU-to-GPU link, per direction
    nvls_efficiency: float | None = None      # scale-up NVLink SHARP (NCCL's nvlsEfficiency); None: none
    curve: BusCurve | None = None             # the measured collective sweep (its own or borrowed); a network's
    #                                           sweep lends its ramp only (model/comm.py)
    curve_scope: Literal["all", "ramp"] = "all"  # what it sets: efficiency, ramp and latency, or the ramp only
    _h: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:  # the planner's caches key on fabrics: a few fields hashed once, all compared
        object.__setattr__(self, "_h", hash((self.id, self.bytes_per_s_per_gpu, self.link_bytes_per_s,
                                             self.links_per_node)))

    def __hash__(self) -> int:
        return self._h

    def node_bytes_per_s(self) -> float:
        """Scale-out bandwidth of one node, per direction."""
        return (self.link_bytes_per_s or 0.0) * (self.links_per_node or 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class GPU:
    """A GPU type from the catalogue (``catalog/gpus.json``), in SI units."""

    id: str
    name: str
    vendor: str
    memory_bytes: int            # datasheet capacity (GiB on the datasheet → bytes)
    usable_memory_bytes: int     # what the driver reports to the framework
    memory_bw_bytes_per_s: float
    peak_flops: dict[str, float]  # dense FLOP/s by precision: fp32, tf32, bf16, fp16, fp8, fp4
    scale_up: str
    scale_up_bytes_per_s: float
    gpus_per_node: int
    scale_up_domain: int
    tdp_w: float
    price_usd_per_gpu_hour: float | None
    price_date: str | None
    source: str
    usable_memory_measured: bool = True
    architecture: str = ""
    sm_count: int = 108
    aliases: tuple[str, ...] = field(default=())
    scale_out: str = ""          # the network its nodes usually have (gpus.json; "" = the catalogue default)
    scale_out_source: str = ""   # where that network is documented (gpus.json scale_out_source)
    host_memory_bytes: float | None = None  # CPU memory of its usual node (gpus.json, the vendor's reference system)
    _h: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:  # peak_flops is a dict: equal GPUs share an id; hashed once
        object.__setattr__(self, "_h", hash((self.id, self.memory_bytes, self.memory_bw_bytes_per_s)))

    def __hash__(self) -> int:
        return self._h

    @property
    def lacks_bf16(self) -> bool:
        """Tensor peaks are listed, an fp16 one but no bf16 one (Volta, Turing: V100, T4): 16-bit training is fp16."""
        return bool(self.peak_flops) and "bf16" not in self.peak_flops and "fp16" in self.peak_flops


@dataclass(frozen=True, slots=True, kw_only=True)
class Market:
    """Where the GPUs are bought: one dated row of the price catalogue (catalog/prices.py) — the provider,
    region and pricing model a plan priced the run at. Spot capacity is preemptible: the run loses goodput
    to preemptions (model/estimate.py ``preemption_overhead``)."""

    provider: str
    region: str
    geo: str
    pricing: Literal["on_demand", "spot", "reserved_1y"]
    usd_per_gpu_hour: float
    date: str                  # ISO date the price was read
    age_days: int              # on the day of the answer
    stale: bool                # older than catalog/prices.py STALE_AFTER_DAYS
    source: str
    instance: str | None = None

    @property
    def preemptible(self) -> bool:
        return self.pricing == "spot"


@dataclass(frozen=True, slots=True, kw_only=True)
class Hardware:
    gpu: GPU
    gpus: int
    gpus_per_node: int
    scale_up: Fabric
    scale_out: Fabric | None
    price_per_gpu_hour: float | None
    power_limit_w: float | None = None  # a board power cap below TDP lowers the sustained clock
    host_memory_bytes: float | None = None  # CPU memory per node, for offload (unchecked when unknown)
    market: Market | None = None  # the price row the plan chose (plan --provider/--region/--pricing)

    def __post_init__(self) -> None:
        _positive(self.gpus, "hardware.gpus")
        if self.power_limit_w is not None and self.power_limit_w <= 0:
            raise GpuplanError(f"hardware.power_limit_w must be positive, got {self.power_limit_w}")
        _positive(self.gpus_per_node, "hardware.gpus_per_node")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise GpuplanError(
                f"hardware.gpus={self.gpus} is more than one node but not a multiple of "
                f"gpus_per_node={self.gpus_per_node}: use {self.gpus // self.gpus_per_node * self.gpus_per_node} "
                f"or {(self.gpus // self.gpus_per_node + 1) * self.gpus_per_node}")
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise GpuplanError(f"hardware.price_per_gpu_hour must be >= 0, got {self.price_per_gpu_hour}")

    @property
    def nodes(self) -> int:
        return max(1, -(-self.gpus // self.gpus_per_node))


def scale_up_gpus(gpu: GPU, gpus_per_node: int, fabric: Fabric) -> int:
    """GPUs one scale-up domain joins: the fabric's, within the node — an HGX board's 8-GPU NVLink in a node of 4
    joins those 4 — unless the fabric spans nodes by design (a domain larger than the GPU's own node: GB200 NVL72's
    72 GPUs over 4-GPU trays)."""
    domain = fabric.domain_gpus or gpus_per_node
    return domain if domain > gpu.gpus_per_node else min(domain, gpus_per_node)


def tp_domain(hw: Hardware) -> int:
    """GPUs a tensor-parallel group may span on the scale-up fabric: the scale-up (NVLink) domain — 72 on a GB200/GB300
    NVL72 rack of 4-GPU trays — or the node where the domain is smaller (NVLink bridge pairs talk over PCIe)."""
    return max(hw.gpus_per_node, scale_up_gpus(hw.gpu, hw.gpus_per_node, hw.scale_up))
