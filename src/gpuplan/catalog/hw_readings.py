"""How a scenario's hardware words were read, said under ``read as``: a system or cloud instance named for its GPU
(and its node, where a system holds other than the GPU's own: a DGX-2's 16), a network named other than by its
fabric id (catalog/hardware.py resolves them; these are the readings)."""

from __future__ import annotations

from gpuplan.catalog import without_remarks
from gpuplan.catalog.hardware import _SYSTEM_WORDS, _gpu_index, _key, _systems, get_gpu
from gpuplan.errors import GpuplanError
from gpuplan.spec import Hardware


def system_node(hw_raw: dict) -> dict:
    """``hardware`` with the GPUs per node of the system its gpu names (a DGX-2: 16) and its network (a p4d.24xlarge:
    efa-p4d) where it gives none; the reading is said with the system's (``system_words``)."""
    name = hw_raw.get("gpu")
    hit = _system_hit(name) if isinstance(name, str) else None
    if hit is None:
        return hw_raw
    node = {"gpus_per_node": hit[2]} if hit[2] is not None and "gpus_per_node" not in hw_raw else {}
    net = {"scale_out": hit[3]} if hit[3] is not None and "scale_out" not in hw_raw else {}
    return {**hw_raw, **node, **net}


def _system_hit(name: str) -> tuple[str, str, int | None, str | None, int | None] | None:
    """The systems.json entry a name gives, itself or before its remarks ('p4d.24xlarge (AWS)'): GPU id, source,
    GPUs per node where not the GPU's own, network between nodes (catalog/hardware.py ``_systems``)."""
    systems = _systems()
    hit = systems.get(_key(name))
    if hit is None and (core := without_remarks(name)) not in (name, ""):
        hit = systems.get(_key(core))
    return hit


def system_gpus(name: object) -> int | None:
    """The GPUs one system or cloud instance that a hardware.gpu names holds — its entry's node where it differs from
    the GPU's ('g5.12xlarge': 4, 'g5.xlarge': 1, 'DGX-2': 16), else its GPU's node ('p4d.24xlarge', 'DGX H100': 8) —;
    None for a GPU's own name or a name that is no system."""
    if not isinstance(name, str) or _gpu_index()[1].get(_key(name)):
        return None
    core = without_remarks(name) or name
    hit = _system_hit(name)
    if hit is None and not _SYSTEM_WORDS.search(core):
        return None
    if hit is not None and (hit[4] or hit[2]):
        return int(hit[4] or hit[2])
    try:
        return get_gpu(core).gpus_per_node
    except GpuplanError:
        return None


def system_words(name: object, gid: str) -> tuple[tuple[str, str, str, str], ...]:
    """A hardware.gpu that names a system or cloud instance ('p4d.24xlarge', 'DGX H100'), as the scenario's readings
    (field, given, GPU id ``gid``, why: the provider's page); none for a GPU's own name (``_system``)."""
    if not isinstance(name, str) or _gpu_index()[1].get(_key(name)):
        return ()
    hit = _system_hit(name)
    remarks = without_remarks(name) != " ".join(name.split())
    one = system_gpus(name)
    node = f"; {one} GPU{'s' if one != 1 else ''} per node" if one else ""
    if hit and hit[4]:  # a rack over several nodes (GB200 NVL72: 18 trays of 4)
        node = f"; {hit[4]} GPUs in one system"
    node += f"; its network between nodes {hit[3]} (unless hardware.scale_out is given)" if hit and hit[3] else ""
    unread = "; the remarks (in parentheses, after a comma) are not read" if remarks else ""
    why = (f"the GPU of that instance or system ({hit[1]}){node}{unread}" if hit is not None else
           "the GPU its name gives before the remarks (in parentheses, after a comma), which are not read" if remarks
           else "a DGX/HGX system or baseboard: its GPU" if _SYSTEM_WORDS.search(name) else None)
    return (("hardware.gpu", name, gid, why),) if why else ()


def fabric_words(given: dict, hw: Hardware) -> tuple[tuple[str, str, str, str], ...]:
    """A scale_up / scale_out given other than by its catalogue id ('100GbE', '8x 400Gb/s IB'), as the
    scenario's readings (field, given, fabric id, what the fabric is): the network shapes every collective, so
    the reading is said, never silent."""
    out = []
    for key, fab in (("scale_up", hw.scale_up), ("scale_out", hw.scale_out)):
        word = given.get(key)
        if not isinstance(word, str) or fab is None or _key(word) == _key(fab.id):
            continue  # the fabric's own id (an alias — '100GbE', 'ib-400g' — is said: what it stands for matters)
        what = (f"{fab.name}: {fab.links_per_node} × {fab.link_bytes_per_s * 8 / 1e9:,.0f} Gb/s per node"
                if fab.link_bytes_per_s and fab.links_per_node else
                f"{fab.name}: {fab.bytes_per_s_per_gpu / 1e9:,.0f} GB/s per GPU" if fab.bytes_per_s_per_gpu else
                fab.name)
        out.append((f"hardware.{key}", word, fab.id, what + " (`gpuplan fabrics` lists them)"))
    return tuple(out)


def hardware_words(given: dict, hw: Hardware) -> tuple[tuple[str, str, str, str], ...]:
    """The readings of a scenario's hardware section: its GPU's (``system_words``), the count of a system named
    without one (one of it: io/shares.py ``nodes_as_gpus``) and its networks'."""
    one = () if "gpus" in given or "nodes" in given or not system_gpus(given["gpu"]) else \
        (("hardware.gpus", "open", hw.gpus, f"one {given['gpu']}: the GPUs it holds (`gpuplan plan` searches the "
          "count, `gpuplan fit` the fewest; give hardware.gpus for another)"),)
    return system_words(given["gpu"], hw.gpu.id) + one + fabric_words(given, hw)
