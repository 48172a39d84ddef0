"""Turn any model reference into a ``ModelSpec``. A reference is one of:

1. a catalogue id, alias or Hugging Face repo name, case-insensitive (``llama-3.1-8b``, ``meta-llama/Llama-3.1-8B``;
   a checkpoint's variant suffixes and a paper's remarks dropped); a catalogue match wins over a same-named folder;
2. a path to a ``config.json`` or to a model folder holding one; its ``*.safetensors`` headers (never the weights)
   give the exact parameter count (``params_source="safetensors"``), else ``model.safetensors.index.json``'s
   ``metadata.total_size`` over the bytes per element of ``torch_dtype`` (``"safetensors-index"``);
3. an inline mapping of Hugging Face config keys with ``model_type`` (GPT-2 style ``n_layer``/``n_embd``/``n_head``
   without it are ``gpt2``; a config naming only its ``architectures`` class, by that class: ``model_type_of``);
4. ``{params: N}`` with optional hints ``vocab``, ``seq``, ``layers``, ``hidden``: a Llama-like shape is derived
   (``_from_params``) and ``params`` is taken as given.

The catalogue (``catalog/models``) holds real ``config.json`` files and an ``index.json`` with names, aliases and
published parameter counts, read lazily.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuplan.bounds import check_text, check_tree, is_path, load_json, read_regular
from gpuplan.catalog.families import BUILDERS, MAX_PARAMS, Cfg
from gpuplan.catalog.model_names import base_named_in, copy_of, sized_name, variant_of
from gpuplan.catalog.safetensors_files import MAX_DIM, MAX_DIMS, header, shard_names
from gpuplan.errors import GpuplanError, described, named, shown
from gpuplan.spec.model import ModelSpec

CATALOG = Path(__file__).parent / "models"
SUPPORTED = tuple(t for t in BUILDERS if not t.startswith("RefinedWeb"))

_LOOPED = ("it applies the same weights several times in one forward pass (a looped or shared-block model), while "
           "gpuplan costs each block once per its weights: its FLOPs and activations would come out a fraction of "
           "the real ones")
_ENCODER = "it is an encoder (masked-language) model: gpuplan plans decoder-only language-model training"
_SEQ2SEQ = "it is an encoder-decoder model: gpuplan plans decoder-only language-model training"
_RECURRENT = "its recurrent cell has no block kind in gpuplan's model (attention, Mamba, gated delta rule, convolution)"
# transformers model types refused with their reason rather than the list of supported ones
UNSUPPORTED_WHY = {
    **{mt: _LOOPED for mt in ("dory", "inkling2_loop", "inkling2_loop_text", "hrm_text", "zamba", "zamba2")},
    **{mt: _ENCODER for mt in ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "electra", "deberta", "deberta-v2",
                               "albert", "distilbert", "camembert", "modernbert", "megatron-bert", "roc_bert",
                               "rembert", "roformer", "big_bird", "ernie", "data2vec-text")},
    **{mt: _SEQ2SEQ for mt in ("t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "whisper", "blenderbot",
                               "blenderbot-small", "prophetnet", "plbart", "mvp", "led", "longt5",
                               "switch_transformers", "t5gemma", "t5gemma2", "bigbird_pegasus")},
    **{mt: _RECURRENT for mt in ("rwkv", "xlstm")},
}
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8,
                "float8_e4m3fn": 1, "float8_e5m2": 1}
# tensors in checkpoints that are buffers or quantization scales, not trainable parameters
_NOT_PARAMS = (".masked_bias", ".inv_freq", ".position_ids", "weight_scale_inv", ".weight_scale",
               ".input_scale", ".k_scale", ".v_scale")
_PACKED = (".qweight", ".qzeros", ".g_idx", ".scales", ".absmax", ".quant_map", ".quant_state")
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_TIED_HEADS = ("lm_head.weight", "embed_out.weight")


# ---- catalogue -------------------------------------------------------------------------------
def _read_json(path: Path, what: str = "file", quote: bool = True) -> Any:
    """A JSON file through the boundary (a regular file, bounded size, depth and numbers); with
    ``quote`` False (a file the user pointed at) its messages never quote the file's text; ``Infinity`` is a
    number, as transformers writes it into config.json (Mamba-2's ``time_step_limit: [0.0, Infinity]``)."""
    return load_json(read_regular(path, what), f"{what} {path}", quote=quote, constants=True)


@functools.cache
def _index() -> dict[str, dict[str, Any]]:
    return _read_json(CATALOG / "index.json", "model catalogue index")


def _loose(s: str) -> str:
    """A spelling without case and separators — except between two digits, where a separator keeps a version apart
    from a size ("Llama 2 7B" is "llama2-7b", as "llama-2-7b" is; "Llama 27B" is not, nor is "Llama 3 3B" LLaMA 33B)."""
    s = re.sub(r"(?<=\d)[\s_\-]+(?=\d)", "-", s.lower())
    return re.sub(r"(?<!\d)[\s_\-]+|[\s_\-]+(?!\d)", "", s)


@functools.cache
def _lookup() -> dict[str, str]:
    """Every accepted spelling (id, name, HF repo, aliases; exact and loose; a Hugging Face repo also without its
    organisation: "Qwen3-Next-80B-A3B-Instruct" as "Qwen/Qwen3-Next-80B-A3B-Instruct") → catalogue id."""
    table: dict[str, str] = {}
    for mid, row in _index().items():
        keys = [mid, row.get("name"), row.get("hf_repo"), *row.get("aliases", ())]
        keys += [k.split("/", 1)[1] for k in keys if k and "/" in k]
        for key in keys:
            if key:
                table.setdefault(key.lower(), mid)
                table.setdefault(_loose(key), mid)
    return table


def _find(s: str) -> str | None:
    """The catalogue id a spelling names (exact, then loose), else None."""
    return _lookup().get(s.lower()) or _lookup().get(_loose(s))


@functools.cache
def _from_catalog(mid: str) -> ModelSpec:
    cfg = _read_json(CATALOG / f"{mid}.json", f"catalogue config for '{mid}'")
    spec = _from_config(cfg, f"catalogue model '{mid}'", _index()[mid].get("name", mid))
    # a catalogue config is the model's own (its parameter count checked against the published one):
    # keys it leaves out take the transformers defaults by design, not by assumption; what the family's
    # costing leaves out (a vision tower apart, sparse attention timed dense) is still said
    return dataclasses.replace(spec, assumed=tuple(a for a in spec.assumed if "not given" not in a))


def _params_of(mid: str) -> int:
    return _from_catalog(mid).params


def list_models() -> list[dict[str, Any]]:
    """One row per catalogue model: id, name, model_type, params, params_active, published_params, hf_repo."""
    rows = []
    for mid, row in _index().items():
        s = _from_catalog(mid)
        rows.append({"id": mid, "name": row.get("name", mid), "model_type": s.model_type, "params": s.params,
                     "params_active": s.params_active, "published_params": row.get("published_params"),
                     "hf_repo": row.get("hf_repo"), "aliases": list(row.get("aliases", ()))})
    from gpuplan.catalog.user_models import user_model_rows  # the user catalogue's (catalog/user.py)

    return rows + user_model_rows()


def _base_of(ref: str) -> tuple[str, str] | None:
    """A fine-tune named after a catalogue model (model_names.base_named_in), over every name the catalogue knows."""
    return base_named_in(ref, [k for k in _lookup() if not k.isalnum()] + list(_index()), _find, _params_of)


def _unknown(ref: str) -> GpuplanError:
    table = _lookup()
    close = difflib.get_close_matches(ref.lower(), list(table), n=12, cutoff=0.5)
    ids = list(dict.fromkeys(table[k] for k in close))[:3]
    hint = f"did you mean {', '.join(ids)}? " if ids else ""
    return GpuplanError(f"unknown model {shown(ref)}: not a catalogue id, alias or existing path; {hint}"
                        f"`gpuplan models` lists the catalogue; or give a config.json path or {{params: N}}")


# ---- entry point -----------------------------------------------------------------------------
def load_model(ref: Any, *, name: str | None = None) -> ModelSpec:
    """Resolve a catalogue id/alias, a config.json path or folder, an inline mapping or ``{params: N}``."""
    if isinstance(ref, ModelSpec):
        spec = ref
    elif isinstance(ref, Mapping):
        check_tree(ref, "model", max_depth=16)
        spec = _from_mapping(ref)
    elif isinstance(ref, str | os.PathLike):
        s = check_text(os.fspath(ref), "model").strip()
        if not s:
            raise GpuplanError("empty model reference: give a catalogue id (e.g. llama-3.1-8b), a path "
                               "or {params: N}")
        mid = _find(s) if isinstance(ref, str) else None
        variant = variant_of(s, _find, _params_of) if isinstance(ref, str) and not mid else None
        p = Path(s).expanduser()
        from gpuplan.catalog.user_models import user_model

        if mid:
            spec = _from_catalog(mid)
        elif variant is not None:
            base = _from_catalog(variant[0])
            spec = dataclasses.replace(base, assumed=(*base.assumed, f"model {s!r} read as {variant[0]}: {variant[1]}"))
        elif isinstance(ref, str) and (user := user_model(s)) is not None:
            spec = user
        elif is_path(s):
            spec = _from_path(p)
        elif isinstance(ref, str) and (named_as := copy_of(s, _find, _params_of) or _base_of(s)
                                       or sized_name(s, _find, _params_of)) is not None:
            base, why = _from_catalog(named_as[0]), f"model {s!r} read as {named_as[0]}: {named_as[1]}"
            spec = dataclasses.replace(base, assumed=(*base.assumed, why))
        elif not isinstance(ref, str) or s.endswith(".json") or s.startswith(("/", ".", "~")) or (
                os.sep in s and not re.fullmatch(r"[\w.-]+/[\w.-]+", s) and not re.search(r"\s", s)):
            raise GpuplanError(f"model file not found: {shown(str(p))}: check the path (or use a catalogue id)")
        else:
            raise _unknown(s)
    else:
        raise GpuplanError(f"model must be a name, a path or a mapping, not {type(ref).__name__}: "
                           f"e.g. model: llama-3.1-8b")
    if name:
        spec = dataclasses.replace(spec, name=name)
    return spec


def _from_config(cfg: Any, source: str, name: str, assumed: tuple[str, ...] = (), check_size: bool = True,
                 quote: bool = True) -> ModelSpec:
    if not isinstance(cfg, Mapping):
        raise GpuplanError(f"{source}: a model config must be a JSON object of Hugging Face config keys")
    mt = cfg.get("model_type")
    if mt is None:
        mt = model_type_of(cfg.get("architectures"))
        if mt is None:
            raise GpuplanError(f"{source}: missing required key model_type: add it "
                               f"(one of {', '.join(SUPPORTED)})")
        cfg = {**cfg, "model_type": mt}
        assumed = (*assumed, f"no model_type: architectures {cfg['architectures'][0]} read as model_type {mt}")
    if not isinstance(mt, str):
        kind = {list: "a list", dict: "a mapping", bool: "true/false"}.get(type(mt), type(mt).__name__)
        got = f"{kind} {mt!r}" if quote or isinstance(mt, int | float) else kind
        raise GpuplanError(f"{source}: model_type must be a name such as llama, got {got}: "
                           f"give one of {', '.join(SUPPORTED)}")
    if mt not in BUILDERS and mt in UNSUPPORTED_WHY:
        raise GpuplanError(f"{source}: model_type '{mt}' is not supported: {UNSUPPORTED_WHY[mt]}; give {{params: N}} "
                           "for an estimate from the parameter count alone, e.g. {params: 7e9}")
    if mt not in BUILDERS:
        name = named(mt, 40)
        shown_mt = f"'{mt}'" if quote or name == mt else name
        raise GpuplanError(f"{source}: model_type {shown_mt} is not supported "
                           f"(supported: {', '.join(SUPPORTED)}); a plain Llama-shaped decoder (RMSNorm, RoPE, "
                           f"SwiGLU) reads as model_type: llama; else give {{params: N}}, e.g. {{params: 7e9}}")
    c = Cfg(cfg, source, str(mt), quote)
    c.assumed.extend(assumed)
    spec = BUILDERS[mt](c, name)
    if check_size:
        _check_size(spec.params_formula, source)
    return spec


_ARCH_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_FOLDED = {mt.replace("_", "").replace("-", "").lower(): mt for mt in SUPPORTED}


def model_type_of(architectures: Any) -> str | None:
    """The model_type of a config.json that names only its ``architectures`` (``["LlamaForCausalLM"]``): the class
    name less transformers' head suffix, compared with the supported types case- and underscore-blind
    (Qwen2MoeForCausalLM → qwen2_moe, GPTNeoXForCausalLM → gpt_neox); None when it names none of them."""
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        return None
    name = architectures[0]
    for suffix in _ARCH_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return _FOLDED.get(name[: -len(suffix)].lower())
    return None


def _check_size(n: int, source: str) -> None:
    if n > MAX_PARAMS:
        raise GpuplanError(f"{source}: the shapes give {n:.3g} parameters, more than the limit {MAX_PARAMS:.0e} "
                           f"(far above any real model): check hidden_size, num_hidden_layers and vocab_size")


_NAME_KEYS = ("name", "id", "hf_repo", "_name_or_path", "model_name", "name_or_path", "repo")  # a mapping naming one


def _from_mapping(m: Mapping[str, Any]) -> ModelSpec:
    name = str(m.get("name") or "")
    from gpuplan.catalog.params_model import in_billions

    m = in_billions(m, "model_type" in m or "n_embd" in m or model_type_of(m.get("architectures")) is not None)
    by_class = None if "model_type" in m else model_type_of(m.get("architectures"))  # _from_config reads it too
    if "model_type" in m or "n_embd" in m or by_class is not None:
        assumed: tuple[str, ...] = ()
        cfg = dict(m)
        if "model_type" not in cfg and by_class is None:
            cfg["model_type"] = "gpt2"
            assumed = ("no model_type: GPT-2 style keys (n_embd) read as model_type gpt2",)
        given = cfg.pop("params", None)
        spec = _from_config(cfg, "inline model", name or f"custom-{cfg.get('model_type') or by_class}", assumed)
        if given is not None:
            from gpuplan.catalog.params_model import count  # it builds on _from_config

            spec = dataclasses.replace(spec, params_override=count(given), params_source="given")
        return spec
    if "params" in m:
        from gpuplan.catalog.params_model import from_params

        return from_params(m)
    from gpuplan.catalog.dims_model import from_dims, has_dims

    if has_dims(m):  # a paper's table or a launch script: layers, hidden, heads (ffn, vocab, kv_heads)
        return from_dims(m)
    ref = next((m[k] for k in _NAME_KEYS if isinstance(m.get(k), str) and m[k].strip()), None)
    if ref is not None and set(m) <= set(_NAME_KEYS):  # only a name ({name: llama-2-70b}): the model it names
        spec = load_model(ref)
        return dataclasses.replace(spec, assumed=(*spec.assumed, f"model {{name: {ref!r}}}: the model it names"))
    raise GpuplanError("inline model has neither model_type nor params: add model_type (with Hugging Face "
                       "config keys) or give {params: N}")


# ---- config.json paths and safetensors ---------------------------------------------------------
def _from_path(p: Path) -> ModelSpec:
    cfg_path = p / "config.json" if p.is_dir() else p
    if p.is_dir() and not cfg_path.exists():
        raise GpuplanError(f"no config.json in folder {p}: point at a Hugging Face model folder "
                           f"or a config.json")
    folder = cfg_path.parent
    cfg = _read_json(cfg_path, "config file", quote=False)
    spec = _from_config(cfg, str(cfg_path), folder.name if cfg_path.name == "config.json" else cfg_path.stem,
                        quote=False)
    return _with_checkpoint(spec, folder, cfg)


_NOT_LANGUAGE = ("vision_tower.", "multi_modal_projector.")  # image-text checkpoints (Gemma 3): extra_params


def _is_extra(key: str, spec: ModelSpec) -> bool:
    if key.startswith(_NOT_LANGUAGE) or ".vision_tower." in key or ".multi_modal_projector." in key:
        return True
    mm = _LAYER_RE.search(key)
    return bool(mm and int(mm[1]) >= spec.n_layers)


def _with_checkpoint(spec: ModelSpec, folder: Path, cfg: Mapping[str, Any]) -> ModelSpec:
    index_path = folder / "model.safetensors.index.json"
    files = sorted(folder.glob("*.safetensors"))
    if len(files) > 1:  # Mistral repos ship consolidated.safetensors next to the HF shards
        files = [f for f in files if not f.name.startswith("consolidated")]
    index = _read_json(index_path, "safetensors index", quote=False) if index_path.exists() else None
    if index is not None:
        wmap = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(wmap, dict):
            raise GpuplanError(f"{index_path} has no weight_map: fix or remove the file")
        needed = sorted(set(shard_names(wmap, index_path)))
        files = [folder / f for f in needed] if all((folder / f).is_file() for f in needed) else []
    if not files and index is None:
        return spec
    notes = list(spec.assumed)
    got = _count_headers(spec, files, notes) if files else _count_index(spec, index_path, index, cfg, notes)
    if isinstance(got, str):  # the checkpoint cannot give the count: why
        return dataclasses.replace(spec, assumed=(*notes, got))
    total, extra, source = got
    _check_size(total, str(folder))
    if total <= 0:  # no tensors, or an index total_size that leaves nothing after the tied head
        raise GpuplanError(f"{folder}: the checkpoint gives {total:,} parameters ({source}): a model has some; "
                           "fix or remove the safetensors files, or describe the model as {params: N}")
    if total != spec.params_formula:
        notes.append(f"checkpoint has {total:,} parameters, the config formula {spec.params_formula:,} "
                     f"({total - spec.params_formula:+,})")
    return dataclasses.replace(spec, params_override=total, params_source=source, extra_params=extra,
                               assumed=tuple(notes))


def _count_headers(spec: ModelSpec, files: list[Path], notes: list[str]) -> tuple[int, int, str] | str:
    """(parameters, extra parameters, source) from the safetensors headers, or why they cannot be used."""
    entries: list[tuple[str, list[int], Path]] = []
    for f in files:
        for key, info in header(f).items():
            shape = info.get("shape") if isinstance(info, dict) else None
            if key == "__metadata__":
                continue
            if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
                    and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_DIM for x in shape)):
                raise GpuplanError(f"{f}: tensor {named(key, 200)} has no valid shape in the header "
                                   f"({described(shape)}: "
                                   f"at most {MAX_DIMS} dimensions, whole numbers from 0 to {MAX_DIM:,}): "
                                   "replace the file")
            entries.append((key, shape, f))
    if any(k.endswith(_PACKED) for k, _, _ in entries):
        return "the safetensors hold packed quantized weights: parameter count from the config formula"
    has_embed = any(re.search(r"embed|wte|word_embeddings", k) for k, _, _ in entries)
    total = extra = skipped = 0
    for key, shape, _ in entries:
        n = math.prod(shape)
        if (key.endswith(_NOT_PARAMS) or (key.endswith(".bias") and len(shape) == 4)
                or (spec.tied_embeddings and has_embed and key.endswith(_TIED_HEADS))):
            skipped += n
        elif _is_extra(key, spec):
            extra += n
        else:
            total += n
    notes.append(f"parameter count read from the headers of {len(files)} safetensors file(s)")
    if skipped:
        notes.append(f"{skipped:,} stored elements skipped (buffers, quantization scales "
                     f"or a tied head copy)")
    return total, extra, "safetensors"


def _count_index(spec: ModelSpec, index_path: Path, index: Any, cfg: Mapping[str, Any],
                 notes: list[str]) -> tuple[int, int, str] | str:
    """(parameters, extra parameters, source) from the index's total_size, or why it cannot be used."""
    wmap = index["weight_map"]
    q = cfg.get("quantization_config")
    meta = index.get("metadata") if isinstance(index, dict) else None
    size = meta.get("total_size") if isinstance(meta, dict) else None
    bpe = _DTYPE_BYTES.get(str(cfg.get("torch_dtype", "")).replace("torch.", ""))
    why = ("the checkpoint is quantized" if q else "torch_dtype is missing or unknown" if not bpe
           else "metadata.total_size is missing" if not isinstance(size, int) or isinstance(size, bool)
           else "total_size is not a whole number of elements" if size % bpe else "")
    if any(k.endswith(_NOT_PARAMS) or ".attn.bias" in k or "attention.bias" in k for k in wmap):
        why = why or "the index lists non-parameter buffers"
    if why:
        return f"{index_path.name} not used ({why}): parameter count from the config formula"
    if size < 0:
        return f"{index_path.name} not used (metadata.total_size is negative): parameter count from the formula"
    total, extra = size // bpe, 0
    if any(_is_extra(k, spec) for k in wmap):
        total, extra = total - spec.extra_params, spec.extra_params
    if spec.tied_embeddings and any(k.endswith(_TIED_HEADS) for k in wmap):
        total -= spec.vocab * spec.hidden
    notes.append(f"parameter count = {index_path.name} total_size / {bpe} bytes "
                 f"({cfg.get('torch_dtype')})")
    return total, extra, "safetensors-index"
