"""What every family builder in ``families`` uses: typed, validated reads of a Hugging Face
``config.json`` mapping (``Cfg``, with the size limits a model description must stay under), the
weight-list helpers (``lin``, ``nrm``, ``emb``, ``gated``, ``groups``) and the ``tie``/``spec`` steps.

Every default ``Cfg`` falls back to is recorded in ``assumed`` (→ ``ModelSpec.assumed``), so nothing is
assumed silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gpuplan.errors import GpuplanError, described, shown
from gpuplan.spec.model import LayerGroup, ModelSpec, Weight

_MISSING = object()
# Upper bounds of a model description: far above any real model, low enough that a typo or a
# runaway value (num_hidden_layers: 1e7, hidden_size: 2**40) is an error instead of a hang.
MAX_PARAMS = 10**15     # parameters (the largest published models: ~2e12)
MAX_LAYERS = 10_000     # blocks (the deepest trained transformers: DeepNet's 1,000)
MAX_HIDDEN = 2**20      # hidden size (the widest: ~25k)
MAX_VOCAB = 2**24       # vocabulary (the largest: ~262k)
MAX_CONFIG_INT = 2**31 - 1  # any other size in a config.json
_MAXIMA = {"num_hidden_layers": MAX_LAYERS, "n_layer": MAX_LAYERS, "n_layers": MAX_LAYERS,
           "hidden_size": MAX_HIDDEN, "n_embd": MAX_HIDDEN, "n_embed": MAX_HIDDEN, "d_model": MAX_HIDDEN,
           "vocab_size": MAX_VOCAB}


class Cfg:
    """Typed, validated reads from a config mapping; every error is one line naming the source."""

    def __init__(self, data: Mapping[str, Any], source: str, model_type: str, quote: bool = True):
        self.d, self.source, self.mt, self.quote = data, source, model_type, quote
        self.assumed: list[str] = []

    def shown(self, v: Any) -> str:
        """A value for a message: quoted when the user typed it, described when a file holds it."""
        return shown(v) if self.quote else described(v)

    def raw(self, *keys: str, default: Any = None) -> Any:
        for k in keys:
            if self.d.get(k) is not None:
                return self.d[k]
        return default

    def require(self, *specs: str | tuple[str, ...]) -> None:
        missing = ["/".join(s) if isinstance(s, tuple) else s for s in specs
                   if self.raw(*((s,) if isinstance(s, str) else s)) is None]
        if missing:
            raise GpuplanError(f"{self.source}: missing required key(s) {', '.join(missing)} for "
                               f"model_type '{self.mt}': add them (see the model's config.json)")

    def int(self, *keys: str, default: Any = _MISSING, minimum: int = 1, note: bool = True) -> int:
        v = self.raw(*keys)
        if v is None:
            if default is _MISSING:
                self.require(keys)
            if note and default is not None:
                self.assumed.append(f"{keys[0]} not given: using the transformers default {default}")
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or int(v) != v:
            raise GpuplanError(f"{self.source}: {keys[0]} = {self.shown(v)} is not a whole number: give an integer")
        if v < minimum:
            raise GpuplanError(f"{self.source}: {keys[0]} = {v} must be at least {minimum}: fix the value")
        key = next(k for k in keys if self.d.get(k) is not None)
        limit = _MAXIMA.get(key, MAX_CONFIG_INT)
        if v > limit:
            raise GpuplanError(f"{self.source}: {key} = {v:,.0f} is more than the limit {limit:,} "
                               f"(far above any real model): fix the value")
        return int(v)

    def flag(self, *keys: str, default: bool) -> bool:
        v = self.raw(*keys)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise GpuplanError(f"{self.source}: {keys[0]} = {self.shown(v)} must be true or false")
        return v

    def number(self, *keys: str, default: float | None) -> float | None:
        """A positive finite number (RoPE base, norm epsilon, rotary share), or ``default`` when absent."""
        v = self.raw(*keys)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise GpuplanError(f"{self.source}: {keys[0]} = {self.shown(v)} must be a positive number: fix the value")
        return float(v)

    def head_dim(self, hidden: int, heads: int, default: int | None = None) -> int:
        if self.raw("head_dim") is not None:
            return self.int("head_dim")
        if default is not None:
            self.assumed.append(f"head_dim not given: using the transformers default {default}")
            return default
        if hidden % heads:
            raise GpuplanError(f"{self.source}: hidden size {hidden} is not divisible by {heads} attention "
                               f"heads: fix the sizes or give head_dim explicitly")
        return hidden // heads

    def kv_heads(self, heads: int, *keys: str, default: int | None = None) -> int:
        """Key/value heads: as given, else ``default`` (recorded in assumed), else as many as query heads."""
        kv = self.int(*keys, default=heads if default is None else default, note=default is not None)
        if heads % kv:
            raise GpuplanError(f"{self.source}: {heads} attention heads are not a multiple of {kv} "
                               f"key/value heads: fix {keys[0]}")
        return kv


# ---- weight helpers ----------------------------------------------------------------------------
def lin(name: str, out: int, inp: int, group: str, bias: bool = False, count: int = 1) -> list[Weight]:
    ws = [Weight(name=name, shape=(out, inp), group=group, count=count)]  # type: ignore[arg-type]
    if bias:
        ws.append(Weight(name=name, shape=(out,), group=group,  # type: ignore[arg-type]
                         count=count, bias=True))
    return ws


def nrm(name: str, size: int, bias: bool = False) -> list[Weight]:
    ws = [Weight(name=name, shape=(size,), group="norm")]
    if bias:
        ws.append(Weight(name=name, shape=(size,), group="norm", bias=True))
    return ws


def emb(name: str, rows: int, dim: int, group: str = "embedding") -> list[Weight]:
    return [Weight(name=name, shape=(rows, dim), group=group)]  # type: ignore[arg-type]


def gated(prefix: str, h: int, ffn: int, group: str, bias: bool = False, count: int = 1,
          names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> list[Weight]:
    g, u, d = names
    return (lin(f"{prefix}.{g}", ffn, h, group, bias, count)
            + lin(f"{prefix}.{u}", ffn, h, group, bias, count)
            + lin(f"{prefix}.{d}", h, ffn, group, bias, count))


def groups(layers: list[tuple[list[Weight], bool]], mixers: list[tuple[str, bool]] | None = None
           ) -> tuple[LayerGroup, ...]:
    """Run-length encode consecutive identical blocks into LayerGroups (keeps layer order); ``mixers``: each
    block's (token mixer, has an MLP) for a hybrid model (LayerGroup.mixer, .mlp), else attention and an MLP."""
    out: list[LayerGroup] = []
    for i, (ws, moe) in enumerate(layers):
        t = tuple(ws)
        mixer, mlp = mixers[i] if mixers is not None else ("attention", True)
        last = out[-1] if out else None
        if last is not None and last.weights == t and last.kind == (moe, mixer, mlp):
            out[-1] = LayerGroup(count=last.count + 1, weights=t, moe=moe, mixer=last.mixer, mlp=mlp)
        else:
            out.append(LayerGroup(count=1, weights=t, moe=moe, mixer=mixer, mlp=mlp))  # type: ignore[arg-type]
    return tuple(out)


def moe_layers(c: Cfg, L: int, first: int) -> list[bool]:
    """Which of the ``L`` layers route (MoE): mlp_layer_types ("dense" / "sparse") where the config lists it, else
    all from the ``first``-th layer on (the config classes' default)."""
    listed = c.raw("mlp_layer_types")
    if listed is None:
        return [i >= first for i in range(L)]
    if not isinstance(listed, list) or len(listed) != L or any(t not in ("dense", "sparse") for t in listed):
        raise GpuplanError(f"{c.source}: mlp_layer_types must list dense or sparse for each of the {L} layers: "
                           "fix the list")
    return [t == "sparse" for t in listed]


def tie(c: Cfg, default: bool) -> bool:
    v = c.raw("tie_word_embeddings")
    if v is None:
        c.assumed.append(f"tie_word_embeddings not given: using the {c.mt} default {str(default).lower()}")
        return default
    return c.flag("tie_word_embeddings", default=default)


_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon")
_ACT_KEYS = ("hidden_act", "hidden_activation", "activation_function")


def _rope_scaling(c: Cfg) -> tuple[tuple[str, Any], ...]:
    """The config's ``rope_scaling`` mapping as sorted (key, value) pairs (lists as tuples); () when absent."""
    rs = c.raw("rope_scaling")
    if rs is None:
        return ()
    if not isinstance(rs, Mapping):
        raise GpuplanError(f"{c.source}: rope_scaling must be a mapping (e.g. {{rope_type: llama3, factor: 8}}) "
                           f"or null, got {c.shown(rs)}")
    return tuple(sorted((str(k), tuple(v) if isinstance(v, list) else v) for k, v in rs.items()))


# transformers' Gemma2Config defaults (attn_logit_softcapping=50.0, final_logit_softcapping=30.0): a key left out of
# a config.json takes them; other config classes default to none (Gemma 3: None)
_SOFTCAP_DEFAULTS = {"gemma2": (50.0, 30.0)}


def _architecture(c: Cfg, kw: dict[str, Any]) -> None:
    """What the config says beyond the shapes (ModelSpec.position ... norm_eps): read once for every family;
    a family passes what its config class fixes (position, parallel_block, its default activation)."""
    if kw.get("position", "rope") == "rope":
        kw["rope_theta"] = c.number("rope_theta", "rotary_emb_base", default=10000.0)
        kw["rope_scaling"] = _rope_scaling(c)
        kw["rotary_percent"] = c.number("partial_rotary_factor", "rotary_pct", default=kw.get("rotary_percent", 1.0))
    act = c.raw(*_ACT_KEYS)
    if act is not None:
        if not isinstance(act, str):
            raise GpuplanError(f"{c.source}: {_ACT_KEYS[0]} = {c.shown(act)} must be an activation name such as silu")
        kw["activation"] = act
    kw["norm_eps"] = c.number(*_EPS_KEYS, default=None)
    attn_cap, final_cap = _SOFTCAP_DEFAULTS.get(c.mt, (None, None))
    for key, name, default in (("attn_logit_softcapping", "attn_softcap", attn_cap),
                               ("final_logit_softcapping", "final_softcap", final_cap)):
        cap = c.number(key, default=None if key in c.d else default)  # null: none
        if cap:
            kw[name] = cap


def windows(c: Cfg, L: int, default: int | None, every: int | None = None,
            full_below: int | None = None, full_every: int | None = None) -> dict[str, Any]:
    """Sliding-window attention as the config gives it: ``sliding_window`` (a key absent takes the family's
    transformers default ``default``; null means none) and which layers use it — ``layer_types`` when the
    config lists them ("sliding_attention"), else every layer but each ``every``-th (Gemma 2: 2, Gemma 3:
    ``sliding_window_pattern`` 6, Cohere 2: 4; the transformers rule ``(i + 1) % every != 0``), else full on each
    ``full_every``-th from the first, else the
    layers from ``max_window_layers`` on (Qwen 2/3 with use_sliding_window: ``full_below`` the default), else all."""
    if "sliding_window" in c.d and c.d["sliding_window"] is None:
        return {}
    w = c.int("sliding_window", default=default)
    if w is None:
        return {}
    types = c.raw("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != L or not all(isinstance(t, str) for t in types):
            raise GpuplanError(f"{c.source}: layer_types must list one attention type per layer ({L}), e.g. "
                               "sliding_attention or full_attention")
        pattern = tuple(t == "sliding_attention" for t in types)
    elif every is not None:
        n = c.int("sliding_window_pattern", default=every)
        pattern = tuple((i + 1) % n != 0 for i in range(L))
    elif full_every is not None:  # full attention on layers 0, n, 2n, ... (Granite SWA's config class)
        pattern = tuple(i % full_every != 0 for i in range(L))
    elif full_below is not None:
        first = c.int("max_window_layers", default=full_below, minimum=0)
        pattern = tuple(i >= first for i in range(L))
    else:
        pattern = (True,) * L
    return {"sliding_window": w, "window_layers": pattern} if any(pattern) else {}


def spec(c: Cfg, name: str, **kw: Any) -> ModelSpec:
    kw.setdefault("v_head_dim", kw["head_dim"])
    _architecture(c, kw)
    experts, top_k = kw.get("n_experts", 0), kw.get("top_k", 0)
    if experts and top_k > experts:
        raise GpuplanError(f"{c.source}: num_experts_per_tok = {top_k} is more than the {experts} experts "
                           f"(a token is routed to at most all of them): give at most {experts}")
    return ModelSpec(name=name, model_type=c.mt, assumed=tuple(c.assumed), **kw)
