"""A network as papers and cluster pages describe it — "200 Gb/s HDR InfiniBand", "8x 400Gb/s IB", "RoCE 400G",
"Spectrum-X", "100GbE", a product ("Quantum-2", "AWS EFA v2") — read as the catalogue fabric it names."""

from __future__ import annotations

import re

# networks named by product rather than technology and rate: NVIDIA Quantum switches by InfiniBand generation
# (Quantum QM8700: HDR 200 Gb/s; Quantum-2 QM9700: NDR 400; Quantum-X800: XDR 800 — NVIDIA's switch datasheets);
# AWS Elastic Fabric Adapter by instance generation (EFA v1 on p4d: 4 x 100 Gb/s per node; v2 on p5 and v3 on p5en:
# 3,200 Gb/s per node — AWS instance type pages); Intel/Cornelis Omni-Path 100 Gb/s
_NAMED_NETWORKS = (
    (r"quantum[\s-]*x800", "ib-xdr-800g"), (r"quantum[\s-]*2", "ib-ndr-400g"), (r"\bquantum\b", "ib-hdr-200g"),
    (r"\befa[\s-]*v?1\b|\bp4d|\befa\b.*(?<!\d)400\s*g", "efa-p4d"),
    (r"\befa\b|\befav[23]\b|elastic fabric adapter", "efa-p5"),
    (r"omni[\s-]*path|\bopa\b", "opa-100g"),
)


# the reference networks of the GPU generations before Hopper (DGX-1: EDR; DGX A100: HDR): beside them an unqualified
# "EFA" is the EFA of AWS's instances of that generation (p4d), not p5's
_PRE_HOPPER_NETWORKS = ("ib-edr-100g", "ib-hdr-200g")


def _named_network(t: str) -> str | None:
    """The fabric a product name says (``_NAMED_NETWORKS``), or None."""
    return next((fid for pattern, fid in _NAMED_NETWORKS if re.search(pattern, t)), None)
# a network as papers describe it: InfiniBand by generation (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s per port) or
# rate, RoCE and Ethernet by rate (Spectrum-X: 400 Gb/s RoCE); NVIDIA Quantum InfiniBand and Spectrum-X datasheets
_IB_GENERATIONS = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800}


def network_words(text: str, default: str | None = None) -> str | None:
    """The fabric a description names ("200 Gb/s HDR InfiniBand", "8x 400Gb/s IB", "RoCE 400G", "Spectrum-X",
    "100GbE"), or None. A rate per port, when given, decides; else the InfiniBand generation; InfiniBand with neither
    (no figure at all) is the GPU's own default network when that is InfiniBand (``default``)."""
    t = text.lower()
    if re.fullmatch(r"\s*pci[\s-]*e(?:xpress)?(?:[\s-]*switch)?\s*", t) and default and default.startswith("pcie"):
        return default  # "PCIe" with no generation: the card's own (a PCIe card's scale-up is its slot)
    up = _nvlink_words(t, default)
    if up is not None:
        return up
    named = _named_network(t)
    if named == "efa-p5" and default in _PRE_HOPPER_NETWORKS and not re.search(r"v[23]|3,?200|p5", t):
        named = "efa-p4d"  # EFA unqualified beside an A100 (V100): AWS's instances of that generation, p4d/p4de's
    if named is not None:
        return named
    rates = re.findall(r"(?<![\d.])(\d{2,3})(?!\d)\s*(?:g\b|gb/s|gbps|gbit|gbe|gb\b|g(?=[\s-]))", t + " ")
    rates += re.findall(r"\b(?:edr|hdr|ndr|xdr)[\s-]?(\d{2,3})\b", t)  # HDR100: an HDR port split to 100 Gb/s
    # a bare figure beside the technology ("InfiniBand 200", "RoCE 400") is its rate per port in Gb/s
    rates += re.findall(r"(?<![\d.])(10|25|100|200|400|800)(?![\d.])", t)
    rate = int(rates[0]) if rates else None
    gen = next((v for k, v in _IB_GENERATIONS.items() if re.search(rf"\b{k}", t)), None)
    if re.search(r"infiniband|\bib\b", t) or gen is not None:
        r = rate or gen
        if r is None:
            return default if default and default.startswith("ib-") and not re.search(r"\d", t) else None
        return _IB_BY_RATE.get(r)
    if "spectrum-x" in t:
        return {400: "roce-400g"}.get(rate or 400)
    if "roce" in t:
        return {100: "roce-100g", 200: "roce-200g", 400: "roce-400g"}.get(rate or 0)
    if "ethernet" in t or re.search(r"\d\s*gbe\b", t):
        return {10: "eth-10g", 25: "eth-25g", 100: "eth-100g", 400: "eth-400g"}.get(rate or 0)
    if "rdma" in t and rate:  # RDMA of a stated rate, its kind (InfiniBand or RoCE) not: the GPU's own network
        return default if default and default.endswith(f"-{rate}g") else _IB_BY_RATE.get(rate)  # else InfiniBand's
    if rate and default and default.endswith(f"-{rate}g") and re.fullmatch(r"[\d\s.,]*(?:gb/s|gbps|gbit|gb|g)"
                                                                           r"(?:[\s/]*per[\s-]*gpu)?\s*", t):
        return default  # a bare rate ("400 Gb/s per GPU", a node's "3.2 Tbps" over its 8 GPUs): the GPU's own network
    return None


_IB_BY_RATE = {100: "ib-edr-100g", 200: "ib-hdr-200g", 400: "ib-ndr-400g", 800: "ib-xdr-800g"}
_ORDINALS = {"second": 2, "third": 3, "fourth": 4, "fifth": 5, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5}


def _nvlink_words(t: str, default: str | None) -> str | None:
    """The NVLink generation a node's description names ("NVLink3 + NVSwitch (DGX A100)", "4th-generation NVLink"):
    the GPU's own fabric where it is that generation (A800's and H800's cut links, NVL72), else the generation's;
    "NVLink" / "NVSwitch" without one: the GPU's own where that is NVLink; else None."""
    if ("nvlink" not in t and "nvswitch" not in t) or _OTHER_FABRIC.search(t):
        return None  # a description that names another fabric too (or none: "no NVLink") is not an NVLink one
    m = re.search(r"nvlink[\s-]*(?:gen(?:eration)?[\s-]*)?([2-5])(?:\.0)?\b(?![\s-]*(?:gpu|way|x\b))", t) or \
        re.search(r"\b(second|third|fourth|fifth|[2-5](?:nd|rd|th))[\s-]*gen(?:eration)?[\s-]*nvlink", t)
    own = default if default and default.startswith("nvlink") else None
    if m is None:
        return own
    gen = _ORDINALS.get(m.group(1)) or int(m.group(1))
    return own if own and own.startswith(f"nvlink{gen}") else f"nvlink{gen}"


# what makes a description more than an NVLink one: a network between nodes, PCIe, a bridge between two cards, the
# chip-to-chip link, the multi-node NVLink Switch System, an NVL rack, or NVLink's absence
_OTHER_FABRIC = re.compile(r"infiniband|\bib\b|roce|ethernet|gbe\b|efa\b|slingshot|rdma|\b[hnex]dr\b|pcie|bridge|"
                           r"c2c|switch system|\bnvl\s*\d|no nvlink|without nvlink|non-nvlink|\d\s*gb/?s")


_PER_NODE = re.compile(r"(\d+(?:\.\d+)?)\s*(t|g)(?:b/s|bps|bit/s|b)?\s*(?:per|/|a)\s*(?:node|server|host)",
                       re.IGNORECASE)


# a rate above any one port's (InfiniBand XDR and 800GbE: 800 Gb/s) is a node's NICs together ("3.2 Tbps
# InfiniBand", Azure ND H100 v5 and AWS p5: 8 x 400 Gb/s per VM)
_AGGREGATE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(t|g)(?:b/s|bps|bit/s|b)?\b", re.IGNORECASE)
MAX_PORT_GBPS = 800


def _gbps(m: re.Match[str]) -> float:
    """A matched figure and its unit (t or g) in Gb/s."""
    return float(m.group(1)) * (1000 if m.group(2).lower() == "t" else 1)


def per_gpu_rate(text: str, per_node: int) -> str:
    """A network rate given per node ("1600 Gbps per node (RoCE)", "3.2 Tb/s per node", or a figure no one port
    reaches: "3.2 Tbps InfiniBand") as the rate per GPU the fabrics are catalogued by: the node's NICs are shared by
    its ``per_node`` GPUs (8 x 200 Gb/s: 200 each)."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,600 Gbps
    m = _PER_NODE.search(text)
    if m is None:
        m = next((a for a in _AGGREGATE.finditer(text) if _gbps(a) > MAX_PORT_GBPS), None)
    if m is None or per_node < 1:
        return text
    rate = _gbps(m) / per_node
    return text[:m.start()] + f"{rate:g} Gb/s per GPU" + text[m.end():]
