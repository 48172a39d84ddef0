"""The NCCL environment of a scheduled job, for the scale-out fabric the plan assumed.

Every setting is one of NCCL's documented environment variables, with the section of NCCL's page
that says what it does (NCCL_DOC; the same names are read by RCCL on AMD GPUs). Only what the planned
fabric decides is set; what depends on the site (interface and adapter names, RoCE GID index and traffic
class) is left to a note, because a wrong value there breaks a job that NCCL's own detection would run.

  tcp (plain Ethernet): NCCL_IB_DISABLE=1 — "prevents the IB/RoCE transport from being used by NCCL.
      Instead, NCCL will fall back to using IP sockets": the plan priced TCP sockets, so NCCL must not
      pick an RDMA adapter the plan did not count. On links of 100 Gb/s and faster, NCCL_SOCKET_NTHREADS=4
      ("for generic 100G networks, this value can be manually set to 4") and NCCL_NSOCKS_PERTHREAD=4
      (sockets per helper thread, "larger than 1 may improve the network performance" where one socket is
      limited); their product, 16, stays within NCCL's limit of 64 sockets per connection.
  infiniband, roce: NCCL_IB_DISABLE=0 — NCCL's IB verbs transport (RDMA), the path the plan priced.
  every multi-node job: NCCL_DEBUG=WARN — "prints an explicit error message whenever any NCCL call errors
      out" (the level NCCL's page itself shows for a configuration file).
"""

from __future__ import annotations

from dataclasses import dataclass

NCCL_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
# above this line rate a single socket thread does not keep up: NCCL's advice for "generic 100G networks"
FAST_SOCKET_GBIT = 100
SOCKET_THREADS = 4        # NCCL_SOCKET_NTHREADS for generic 100G networks (NCCL's page)
SOCKETS_PER_THREAD = 4    # NCCL_NSOCKS_PERTHREAD; 4 × 4 = 16 ≤ 64, NCCL's cap on their product


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str
    why: str       # what it does, in NCCL's words or close to them
    section: str   # anchor of ``doc``
    doc: str = NCCL_DOC

    def url(self) -> str:
        return f"{self.doc}#{self.section}"

    def shell(self) -> str:
        """The variable as a shell script exports it, with what it does and its documentation."""
        return f"export {self.name}={self.value}  # {self.why}: {self.url()}"


def nccl_env(transport: str | None, link_gbit_per_s: float | None, nodes: int) -> tuple[EnvVar, ...]:
    """The NCCL variables a job on ``nodes`` nodes sets for its scale-out fabric (none on one node)."""
    if nodes <= 1:
        return ()
    env = [EnvVar("NCCL_DEBUG", "WARN", "an explicit error message whenever an NCCL call fails", "nccl-debug")]
    if transport == "tcp":
        env.append(EnvVar("NCCL_IB_DISABLE", "1", "no IB/RoCE transport: IP sockets, the path the plan priced",
                          "nccl-ib-disable"))
        if (link_gbit_per_s or 0) >= FAST_SOCKET_GBIT:
            env += [EnvVar("NCCL_SOCKET_NTHREADS", str(SOCKET_THREADS),
                           "helper threads per connection: NCCL's value for generic 100G networks",
                           "nccl-socket-nthreads"),
                    EnvVar("NCCL_NSOCKS_PERTHREAD", str(SOCKETS_PER_THREAD),
                           f"sockets per helper thread (× threads = {SOCKET_THREADS * SOCKETS_PER_THREAD} ≤ 64)",
                           "nccl-nsocks-perthread")]
    elif transport in ("infiniband", "roce"):
        env.append(EnvVar("NCCL_IB_DISABLE", "0", "NCCL's IB verbs transport (RDMA), the path the plan priced",
                          "nccl-ib-disable"))
    return tuple(env)


ALLOC_DOC = "https://pytorch.org/docs/stable/notes/cuda.html"


def allocator_env(est: dict, device: str) -> tuple[EnvVar, ...]:
    """PYTORCH_CUDA_ALLOC_CONF where the plan's memory assumed expandable segments (training.expandable_segments,
    by default what the framework's own launcher sets — a scheduler export starts the framework without that
    launcher, so it sets the variable itself); nothing where it assumed PyTorch's default."""
    if device != "gpu" or est["scenario"]["training"].get("expandable_segments") is not True:
        return ()
    return (EnvVar("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                   "the caching allocator's expandable segments, as the plan's memory assumed (model/allocator.py)",
                   "optimizing-memory-usage-with-pytorch-cuda-alloc-conf", ALLOC_DOC),)


def site_note(transport: str | None, fabric: str) -> str:
    """What the site must fill in itself, for the fabric's transport."""
    common = (f"NCCL_SOCKET_IFNAME ({NCCL_DOC}#nccl-socket-ifname) if NCCL picks the wrong network interface for "
              "its bootstrap")
    if transport == "roce":
        return (f"{fabric} (RoCE): set {common}, NCCL_IB_HCA (#nccl-ib-hca) to the RoCE adapters, and, where the "
                "switches reserve a lossless class, NCCL_IB_TC (#nccl-ib-tc); NCCL ≥ 2.21 picks the RoCE v2 GID "
                "itself, older NCCL needs NCCL_IB_GID_INDEX (#nccl-ib-gid-index, from show_gids)")
    if transport == "infiniband":
        return f"{fabric} (InfiniBand): set {common} and NCCL_IB_HCA (#nccl-ib-hca) if not every adapter is for GPUs"
    if transport == "tcp":
        return f"{fabric} (TCP sockets): set {common}"
    return (f"{fabric}: the catalogue does not say how NCCL crosses it (fabrics.json transport); NCCL chooses (IB "
            f"verbs where it finds RDMA adapters, else sockets); set {common}")
