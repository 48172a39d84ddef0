"""A model given as ``{params: N}`` with optional shape hints: a Llama-like shape derived from the count
(``from_params``), and the bounded reading of counts (``count``). catalog/models.py routes inline models here."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.families import MAX_HIDDEN, MAX_LAYERS, MAX_PARAMS, MAX_VOCAB
from gpuplan.catalog.models import _from_config
from gpuplan.errors import GpuplanError
from gpuplan.spec.model import ModelSpec
from gpuplan.units import fmt_count

# ---- {params: N} -------------------------------------------------------------------------------
_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_PARAM_KEYS = {"params", "name", "vocab", "vocab_size", "seq", "seq_len", "max_positions", "layers", "hidden",
               "heads", "kv_heads", "active_params", "experts", "top_k"}


# per key of {params: N}: an example for the error message, and the largest accepted value
_PARAM_LIMITS = {"params": ("7e9 or '7B'", MAX_PARAMS), "vocab": ("32000", MAX_VOCAB), "seq": ("4096", 2**24),
                 "layers": ("32", MAX_LAYERS), "hidden": ("4096", MAX_HIDDEN), "heads": ("32", MAX_HIDDEN),
                 "kv_heads": ("8", MAX_HIDDEN), "active_params": ("37e9 or '37B'", MAX_PARAMS),
                 "experts": ("256", 4096), "top_k": ("8", 64)}
# a mixture of experts given as {params: N, active_params: A}: the routed experts per token when top_k is not given —
# fine-grained MoEs (DeepSeek-V3 37B of 671B, Qwen3-235B-A22B, GLM-4.5, Kimi K2: a tenth or less active) route each
# token to 8 (their config.json num_experts_per_tok); coarse ones (Mixtral 8x7B 12.9B of 46.7B: top 2 of 8) to 2
MOE_TOP_K, COARSE_TOP_K, COARSE_SHARE = 8, 2, 0.25


def count(v: Any, key: str = "params") -> int:
    example, limit = _PARAM_LIMITS[key]
    x: float | None = None
    if isinstance(v, int | float) and not isinstance(v, bool):
        x = float(v)
    elif isinstance(v, str):
        mm = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*", v.lower())
        if mm:
            x = float(mm[1]) * _SUFFIX.get(mm[2], 1)
    if x is None or not math.isfinite(x) or x <= 0 or x != round(x):
        raise GpuplanError(f"{key} = {v!r} is not a positive whole number: give e.g. {key}: {example}")
    if x > limit:
        raise GpuplanError(f"{key} = {v!r} is more than the limit {limit:,} (far above any real model): "
                           f"give e.g. {key}: {example}")
    return int(round(x))


# a {params: N} model's layers/hidden hints must give a shape that holds N within this factor (a Llama-like block
# of width h holds 12·h² parameters: other block designs — wider MLPs, GQA, tied embeddings — stay well inside)
SHAPE_SLACK = 2.0


def from_params(m: Mapping[str, Any]) -> ModelSpec:
    """Llama-like shape for a bare parameter count.

    Rule (documented in ``assumed``): per block 12·h² parameters (attention 4h², SwiGLU MLP 3·h·8h/3),
    aspect ratio h ≈ 128·L (Llama-2-7B: 4096 = 128·32), untied embeddings of vocab V (32000 unless
    given). L = cbrt(N / (12·128²)) rounded to a multiple of 4 (to the integer below 8) unless
    ``layers`` is given; h solves 12·L·h² + 2·V·h = N, rounded to a multiple of 1024 (128 below
    1536) unless ``hidden`` is given; head_dim 128 (hidden / ``heads`` when given), as many KV heads as query
    heads (MHA; ``kv_heads`` when given: GQA/MQA);
    ffn = 8h/3 rounded to a multiple of 256; RMSNorm, RoPE, max positions = ``seq`` (default 4096).
    Examples: 7e9 → 32 layers × 4096; 70e9 → 72 × 9216. The parameter count stays the given N.
    """
    extra = sorted(set(m) - _PARAM_KEYS)
    from gpuplan.catalog.dims_model import has_dims

    if extra and has_dims(m):  # a paper's dimensions (ffn, experts, ...) beside its stated total
        return _dims_with_total(m)
    if extra:
        raise GpuplanError(f"unknown key(s) {', '.join(extra)} in {{params: N}} model: allowed are params, "
                           f"vocab, seq, layers, hidden, heads, kv_heads, name, and for a mixture of experts "
                           f"active_params, experts, top_k (or give model_type with Hugging Face config keys)")
    if "active_params" in m or "experts" in m or "top_k" in m:
        return _moe_from_params(m)
    n = count(m["params"])
    V = count(m.get("vocab", m.get("vocab_size", 32000)), "vocab")
    seq = count(m.get("seq", m.get("seq_len", m.get("max_positions", 4096))), "seq")
    if "layers" in m:
        L = count(m["layers"], "layers")
    elif "hidden" in m:  # the layers that hold n at the given width
        hh = count(m["hidden"], "hidden")
        L = max(1, round((n - 2 * V * hh) / (12 * hh * hh)))
    else:
        L_real = (n / (12 * 128**2)) ** (1 / 3)
        L = max(1, round(L_real)) if L_real < 8 else 4 * round(L_real / 4)
    if "hidden" in m:
        h = count(m["hidden"], "hidden")
    else:
        h_real = (-2 * V + math.sqrt(4 * V * V + 48 * L * n)) / (24 * L)
        step = 1024 if h_real >= 1536 else 128  # heads a multiple of 8 for large models (tp = 8)
        h = max(128, step * round(h_real / step))
    heads, kv = _heads(m, h)
    ffn = max(256, 256 * round(8 * h / 3 / 256))
    cfg = {"model_type": "llama", "hidden_size": h, "num_hidden_layers": L, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": ffn, "vocab_size": V,
           "max_position_embeddings": seq, "tie_word_embeddings": False}
    spec = _from_config(cfg, "{params: N} model", str(m.get("name") or f"custom-{fmt_count(n)}"),
                        check_size=False)  # the derived shape only approximates n (≤ MAX_PARAMS)
    if "layers" in m or "hidden" in m:
        _check_shape(m, spec.params_formula, n, L, h)
    gqa = f"{kv} key/value heads" if kv != heads else "no GQA"
    rule = (f"shape derived from params={n:,}: Llama-like, {L} layers, hidden {h}, {heads} heads × "
            f"head_dim {h // heads} ({gqa}), SwiGLU ffn {ffn}, vocab {V}, untied, {seq} positions "
            f"(rule: 12·L·h² + 2·V·h ≈ N with h ≈ 128·L); params is the given {n:,}, "
            f"the derived shape holds {spec.params_formula:,}")
    return dataclasses.replace(spec, params_override=n, params_source="given", assumed=(rule,))




def _dims_with_total(m: Mapping[str, Any]) -> ModelSpec:
    """The decoder the dimensions describe (catalog/dims_model.py), its parameter count the stated one — a paper's
    table gives both — when the two agree within ``SHAPE_SLACK``."""
    from gpuplan.catalog.dims_model import from_dims

    n = count(m["params"])
    spec = from_dims({k: v for k, v in m.items() if k != "params"})
    if not 1 / SHAPE_SLACK <= spec.params_formula / n <= SHAPE_SLACK:
        raise GpuplanError(f"model dimensions hold {spec.params_formula:.3g} parameters, not the {n:.3g} given: "
                           "the dimensions contradict the count — check them, or drop params")
    note = f"params {n:,} as given (the dimensions hold {spec.params_formula:,})"
    return dataclasses.replace(spec, params_override=n, params_source="given", assumed=(*spec.assumed, note))


def _moe_from_params(m: Mapping[str, Any]) -> ModelSpec:
    """A mixture of experts from its total and active counts: the attention and width of the Llama-like shape of
    the active count (``from_params``' rule), every block's MLP routed — top_k experts of width f per token
    (3·h·f each: SwiGLU), Mixtral's block. With the experts left open, f holds the active count and the experts
    (a multiple of 8, of 2 below 32, so that expert parallelism divides them) the total; with them given, f holds
    the total (the memory), the active count following. The counts are the derived shape's (both said, beside the
    given ones)."""
    if "active_params" not in m:
        raise GpuplanError("{params: N} model: experts/top_k describe a mixture of experts: give active_params too "
                           "(the parameters each token uses, e.g. active_params: 37B for DeepSeek-V3's 671B)")
    n, active = count(m["params"]), count(m["active_params"], "active_params")
    if not active < n:
        raise GpuplanError(f"{{params: N}} model: active_params {active:,} must be below params {n:,} (a mixture "
                           "of experts uses part of its parameters per token; a dense model: drop active_params)")
    dense = from_params({k: v for k, v in m.items() if k in _PARAM_KEYS - {"active_params", "experts", "top_k"}}
                        | {"params": active})
    L, h, V = dense.n_layers, dense.hidden, dense.vocab
    k = count(m.get("top_k", MOE_TOP_K if active <= COARSE_SHARE * n else COARSE_TOP_K), "top_k")
    attn = dense.params_formula - 2 * V * h - L * 3 * h * dense.ffn  # every block's attention and norms
    if "experts" in m:  # f holds the total
        experts = count(m["experts"], "experts")
        f = max(128, 128 * round(((n - 2 * V * h - attn) / (L * experts) - h) / (3 * h) / 128))
    else:  # f holds the active count, the experts the total
        f = max(128, 128 * round((active - 2 * V * h - attn) / (L * 3 * h * k) / 128))
        e = (n - 2 * V * h - attn) / (L * (3 * h * f + h))
        step = 8 if e >= 32 else 2  # expert parallelism divides them: a multiple of 8 (of 2 for a coarse MoE's few)
        experts = max(k, step * round(e / step))
    if experts < k:
        raise GpuplanError(f"{{params: N}} model: experts {experts} below top_k {k}: give experts ≥ top_k")
    cfg = {"model_type": "mixtral", "hidden_size": h, "num_hidden_layers": L,
           "num_attention_heads": dense.n_heads, "num_key_value_heads": dense.n_kv_heads, "intermediate_size": f,
           "num_local_experts": experts, "num_experts_per_tok": k, "vocab_size": V,
           "max_position_embeddings": dense.max_positions, "tie_word_embeddings": False}
    spec = _from_config(cfg, "{params: N} model", str(m.get("name") or f"custom-{fmt_count(n)}-moe"), check_size=False)
    kind = "a fine-grained MoE's, DeepSeek-V3's and Qwen3-MoE's" if k == MOE_TOP_K else "a coarse MoE's, Mixtral's"
    top = "" if "top_k" in m else f" (top_k {k}: {kind})"
    rule = (f"shape derived from params={n:,}, active_params={active:,}: Mixtral-like, {L} layers, hidden {h}, "
            f"{dense.n_heads} heads, every MLP routed: {experts} experts of SwiGLU width {f}, {k} per token{top}, "
            f"vocab {V}; it holds {spec.params:,} parameters, {spec.params_active:,} active")
    return dataclasses.replace(spec, assumed=(rule,))


def _heads(m: Mapping[str, Any], h: int) -> tuple[int, int]:
    """(query heads, key/value heads): head_dim 128 and multi-head attention unless ``heads``/``kv_heads`` say."""
    heads = max(1, h // 128) if h % 128 == 0 else 1
    if "heads" in m:
        heads = count(m["heads"], "heads")
        if h % heads:
            raise GpuplanError(f"{{params: N}} model: heads {heads} do not divide hidden {h}: give a head count "
                               "that divides the hidden size (head_dim = hidden / heads)")
    kv = heads
    if "kv_heads" in m:
        kv = count(m["kv_heads"], "kv_heads")
        if kv > heads or heads % kv:
            raise GpuplanError(f"{{params: N}} model: kv_heads {kv} must divide heads {heads} (grouped-query "
                               "attention shares each key/value head among heads / kv_heads query heads)")
    return heads, kv


def _check_shape(m: Mapping[str, Any], formula: int, n: int, L: int, h: int) -> None:
    """Given layers/hidden must give a shape within the limit that holds ``n`` within ``SHAPE_SLACK``."""
    if formula > MAX_PARAMS:
        raise GpuplanError(f"{{params: N}} model: layers {L} × hidden {h} give a shape of "
                           f"{formula:.3g} parameters, more than the limit {MAX_PARAMS:.0e}: "
                           "lower layers or hidden (or leave them out to derive them from params)")
    if not 1 / SHAPE_SLACK <= formula / n <= SHAPE_SLACK:
        given = " × ".join(f"{k} {m[k]}" for k in ("layers", "hidden") if k in m)
        raise GpuplanError(f"{{params: N}} model: {given} hold{'s' if len(given.split(' × ')) == 1 else ''} "
                           f"{formula:.3g} parameters in a Llama-like shape (layers {L}, hidden {h}), "
                           f"not the {n:.3g} given: the shape contradicts the count — drop layers/hidden, or give "
                           f"values whose shape holds params within a factor {SHAPE_SLACK:g}")


# a paper table's parameter count in billions: the count where nothing else describes the model; beside its dimensions a
# rounded label ("1.7B"), the dimensions count exactly
BILLIONS = ("params_b", "params_billion", "params_billions")


def in_billions(m: Mapping[str, Any], configured: bool) -> Mapping[str, Any]:
    """``m`` with a parameter count in billions ({params_b: 6.7}) read as params, where neither a config
    (``configured``: a model_type) nor dimensions describe the model; given beside params, one error."""
    from gpuplan.catalog.dims_model import has_dims

    billions = [k for k in BILLIONS if k in m]
    if not billions or configured or has_dims(m):
        return m
    key, b = billions[0], m[billions[0]]
    if "params" in m or len(billions) > 1:
        named = ", ".join(["params"] * ("params" in m) + billions)
        raise GpuplanError(f"inline model gives its parameter count twice ({named}): give it once")
    if isinstance(b, bool) or not isinstance(b, int | float) or not math.isfinite(b) or b <= 0:
        raise GpuplanError(f"{key} = {b!r} is not a positive number of billions: give e.g. {key}: 6.7")
    return {**{k: v for k, v in m.items() if k != key}, "params": round(b * 1e9)}
