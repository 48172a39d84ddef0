"""The scenario file (YAML or JSON) and its command-line flags → validated spec values.

Every key is checked: unknown keys, wrong types and impossible values are a GpuplanError naming the key and the fix
(README "The scenario file"). A key whose value is null is the same as a key left out (a layout field left open, a
training or hardware field at its default)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuplan.bounds import MAX_TEXT, check_tree, is_path, load_json, load_yaml, read_regular
from gpuplan.catalog.frameworks import documented_defaults
from gpuplan.catalog.hardware import MAX_GPUS, make_hardware
from gpuplan.catalog.hw_readings import hardware_words, system_node
from gpuplan.errors import GpuplanError, shown
from gpuplan.io.documented import documented_training
from gpuplan.io.preference import pairs_as_sequences
from gpuplan.io.schema import (
    ECHO_HARDWARE_KEYS,
    HARDWARE_KEYS,
    KEY_ALIASES,
    LAYOUT_KEYS,
    TOP_KEYS,
    TRAINING_KEYS,
    own_keys,
    own_sections,
    unknown_key,
)
from gpuplan.io.shares import counted_gpu, nodes_as_gpus, probability
from gpuplan.io.shares import share as _share
from gpuplan.io.stores import calibration_factors, trace_activation_factor
from gpuplan.io.titan_keys import titan_batch_layout
from gpuplan.io.user_keys import batch_from_tokens, read_user_keys, same_batch, table_seq
from gpuplan.io.words import (
    batch_in_tokens,
    compile_word,
    cuda_graphs_word,
    era_for_layout,
    kernels_word,
    lora_target_names,
    read_lora_targets,
    read_words,
    sp_without_tp,
    stack_lora,
    stage_from_framework,
    switch_for_layout,
    switch_word,
)
from gpuplan.spec import (
    Hardware,
    Training,
    check_layout_fields,
)
from gpuplan.spec.corrections import Corrections
from gpuplan.spec.job import ADAPTERS, DEFAULT_SEQ_LEN
from gpuplan.spec.model import ModelSpec, check_lora_rank, with_positions
from gpuplan.spec.scenario import Scenario
from gpuplan.units import GiB, parse_bytes, parse_count, parse_money

INT_KEYS = {"gpus", "gpus_per_node", "seq_len", "global_batch", "steps", "lora_rank", "dp", "tp", "pp", "cp",
            "ep", "etp", "zero", "zero_group", "micro_batch", "virtual_stages", "recompute_every"}
TRAINING_NAMES = ("precision", "optimizer", "optimizer_impl", "method", "attention", "framework",
                  "fp8_recipe", "grad_dtype", "moe_dispatcher", "preference")  # string-valued keys
MAX_MICRO_BATCH = 2**16  # sequences per micro-batch on one GPU
MAX_VIRTUAL_STAGES = 2**10  # chunks per pipeline stage (never more than the layers either)
MIN_HOST_MEMORY = GiB  # CPU memory of one node: less than 1 GiB is a missing unit (2 → 2 bytes)
MAX_HOST_MEMORY = 2**50  # 1 PiB per node
# a scenario (or a list of 1,000) is small: bounds tighter than a config.json's, read (or refused) well under a second
MAX_SCENARIOS = 1_000  # scenarios in one list file, and entries of any list or mapping in a scenario
SCENARIO_BOUNDS = {"max_depth": 16, "max_nodes": 100_000, "max_items": MAX_SCENARIOS, "max_text": MAX_TEXT}


def _check_keys(section: dict, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(section, dict):
        raise GpuplanError(f"{where} must be a mapping of keys, got {_kind(section)}")
    for key in (k for k in section if k not in allowed):
        raise GpuplanError(unknown_key(key, allowed, where))


def _kind(value: Any) -> str:
    return {list: "a list", dict: "a mapping", bool: "true/false", str: "text", type(None): "null"}.get(
        type(value), type(value).__name__)


def _describe(value: Any) -> str:
    """``value`` for an error message: ``a list ['bf16']``, ``true``, ``5``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | dict):
        return f"{_kind(value)} {value!r}"
    return repr(value)


def _section(raw: dict, name: str, allowed: tuple[str, ...]) -> dict:
    """``raw[name]`` checked as a mapping of known keys — a framework's spelling of one (``KEY_ALIASES``:
    tensor_model_parallel_size) read as it —; null values dropped (a null is not given)."""
    section = raw.get(name)
    if section is None:
        return {}
    if isinstance(section, dict):
        section = own_keys(section, KEY_ALIASES.get(name, {}), f"{name}.{{}}")
    _check_keys(section, allowed, name)
    return {k: v for k, v in section.items() if v is not None}


def _name_value(value: Any, key: str) -> str:
    """A value that names a choice (``bf16``, ``selective``): text, compared in lower case."""
    if not isinstance(value, str):
        raise GpuplanError(f"{key} must be a name, got {_describe(value)}")
    return value.strip().lower()


MAX_WHOLE = 2**53  # beyond this a float no longer holds every whole number (and no GPU count or length is)


def _int(value: Any, key: str) -> int:
    num = parse_count(value, key)
    if abs(num) >= MAX_WHOLE:
        raise GpuplanError(f"{key} = {value!r} is too large: give a realistic size")
    if num != int(num):
        raise GpuplanError(f"{key} must be a whole number, got {value!r}")
    return int(num)


def _bool(value: Any, key: str) -> bool:
    on = switch_word(value)
    if on is None:
        raise GpuplanError(f"{key} must be true or false, got {value!r}")
    return on


def _decode(p: Path, data: bytes) -> str:
    """The file's text: UTF-8 (a UTF-8 byte-order mark is dropped), else one clear error."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16/32 byte-order marks
        raise GpuplanError(f"scenario file {str(p)!r} is UTF-16 or UTF-32 text: save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise GpuplanError(f"scenario file {str(p)!r} is not UTF-8 text (byte {err.start} cannot be read): "
                           "give a YAML or JSON file saved as UTF-8") from None
    if "\x00" in text:
        raise GpuplanError(f"scenario file {str(p)!r} holds NUL bytes (binary or UTF-16 data): "
                           "give a YAML or JSON file saved as UTF-8")
    return text


def read_file(path: str | Path) -> Any:
    p = Path(path)
    if is_path(str(p)) and p.is_dir():
        raise GpuplanError(f"scenario file {shown(str(p))} is a folder: give the path to a .yaml or .json file")
    if not is_path(str(p)):
        raise GpuplanError(f"scenario file {shown(str(p))} not found: give the path to a .yaml or .json file"
                           + ("" if p.suffix else ", or a model id the catalogue knows (`gpuplan models`)"))
    text = _decode(p, read_regular(p, "scenario file"))
    is_json = p.suffix.lower() == ".json"
    # the file's shape here; each scenario's values when it is read, so a bad value fails its item only
    load = load_json if is_json else load_yaml
    raw = load(text, str(p), values=False, **SCENARIO_BOUNDS)
    if isinstance(raw, list) and not raw:
        raise GpuplanError(f"scenario file {shown(str(p))} holds no scenarios (an empty list): "
                           "give a scenario mapping, or a list of them")
    if isinstance(raw, dict) and raw and not set(raw) & set(TOP_KEYS):  # not a scenario: its contents unquoted
        raise GpuplanError(f"scenario file {shown(str(p))} is not a gpuplan scenario (none of its keys is "
                           f"{', '.join(TOP_KEYS)}): give a scenario file")
    return raw


def merge_flags(raw: dict, flags: dict[str, Any]) -> dict:
    """Flags (``{"hardware.gpu": "h100", ...}``) override the file's values."""
    if not isinstance(raw, dict):
        raise GpuplanError(f"a scenario must be a mapping with keys model, hardware, training, layout, "
                           f"got {type(raw).__name__}")
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in flags.items():
        if value is None:
            continue
        if "." in dotted:
            sec, key = dotted.split(".", 1)
            if out.get(sec) is None:  # a null section is an empty one
                out[sec] = {}
            section = out[sec]
            if not isinstance(section, dict):
                raise GpuplanError(f"{sec} must be a mapping in the scenario file")
            section[key] = value
        else:
            out[dotted] = value
    return out


def parse_scenario(raw: Any, base_dir: Path | None = None) -> Scenario:
    """One scenario mapping → Scenario (model loaded, hardware resolved, job validated)."""
    from gpuplan.catalog.models import load_model

    if not isinstance(raw, dict):
        raise GpuplanError("a scenario must be a mapping with keys model, hardware, training, layout")
    check_tree(raw, "scenario", **SCENARIO_BOUNDS)  # the boundary: files, flags and the API all pass here
    raw = own_sections(raw)
    _check_keys(raw, TOP_KEYS, "scenario")
    raw, user_reads = read_user_keys(raw)
    if raw.get("model") is None:
        raise GpuplanError("scenario has no model: add `model: llama-3.1-8b` (or --model NAME)")
    model_ref = raw["model"]
    if isinstance(model_ref, str) and model_ref.lstrip().startswith("{"):  # inline mapping given as a flag
        try:
            model_ref = load_yaml(model_ref, "model", **SCENARIO_BOUNDS)
        except GpuplanError as err:
            raise GpuplanError(f"model looks like a mapping but does not parse ({err}): write it as "
                               "{params: 7e9} or {model_type: llama, ...}") from None
    if isinstance(model_ref, str) and base_dir is not None and is_path(str(base_dir / model_ref)):
        model_ref = str(base_dir / model_ref)
    hw_raw = system_node(counted_gpu(_section(raw, "hardware", HARDWARE_KEYS + ECHO_HARDWARE_KEYS)))
    tr_raw, seq_read = table_seq(model_ref, _section(raw, "training", TRAINING_KEYS))
    tr_raw, batch_read = batch_in_tokens(tr_raw)
    model = load_model(_with_positions(model_ref, tr_raw))
    hw_raw, hardware = nodes_as_gpus(hw_raw, _hardware(hw_raw))
    corrections = _corrections(hw_raw, tr_raw, hardware.gpu.id, model.model_type)
    tr_raw, lay_raw, titan = titan_batch_layout(raw, tr_raw, _section(raw, "layout", LAYOUT_KEYS), hardware.gpus)
    training, words = _training(tr_raw, model, hardware.gpu.id if hardware.gpu.lacks_bf16 else None, lay_raw)
    model = with_positions(model, training.seq_len)
    training, layout, pairs = pairs_as_sequences(tr_raw, training, _layout(lay_raw))
    node = min(hardware.gpus_per_node, hardware.gpus)  # the GPUs a node holds of this job
    words += stage_from_framework(tr_raw.get("framework"), layout, node) + sp_without_tp(layout) + pairs
    if "_sharding_word" in raw:  # a layout's HYBRID_SHARD: sharded inside the node (io/user_keys.py)
        key, word = raw["_sharding_word"]
        words += stage_from_framework(word, layout, node, key)
    training, later = era_for_layout(tr_raw, training, layout, hardware.gpu.architecture)
    training, compiled = switch_for_layout(tr_raw, training, layout)
    training, attends = documented_training(tr_raw, training, hardware.gpu.architecture, model, layout, hw_raw)
    words += later + compiled + attends + user_reads + seq_read + batch_read + titan + hardware_words(hw_raw, hardware)
    name = _name(raw.get("name"))
    given = frozenset(f"{sec}.{k}" for sec, part in (("hardware", hw_raw), ("training", tr_raw)) for k in part
                      if k not in ECHO_HARDWARE_KEYS) | frozenset(f"layout.{k}" for k in layout)
    if "training.global_batch_tokens" in given:
        given |= {"training.global_batch"}
    given |= {w[0] for w in words if w[0] in ("training.fp8_recipe", "training.lora_rank")}  # named by a word
    gpu_ref = hw_raw["gpu"] if isinstance(hw_raw["gpu"], dict) else _inline_mapping(hw_raw["gpu"], "hardware.gpu", "")
    return Scenario(name=name, model=model, hardware=hardware,
                    training=training, layout=layout, model_ref=model_ref, corrections=corrections, given=given,
                    gpu_ref=gpu_ref if isinstance(gpu_ref, dict) else None, read_as=words)


def _with_positions(model_ref: Any, tr_raw: dict) -> Any:
    """A model given by its dimensions without a sequence length has the positions the run trains at."""
    from gpuplan.catalog.dims_model import SYNONYMS, has_dims

    if not isinstance(model_ref, dict) or "model_type" in model_ref or "params" in model_ref or not has_dims(model_ref):
        return model_ref
    seq = tr_raw.get("seq_len", Training().seq_len)
    if any(k in model_ref for k in SYNONYMS["seq"]) or not isinstance(seq, int) or isinstance(seq, bool):
        return model_ref  # a seq_len not yet read stays the training section's to check
    return {**model_ref, "seq_len": seq}


def _name(value: Any) -> str | None:
    """The scenario's label: text (a number is written as text), never a list or mapping made text."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise GpuplanError(f"name must be text (a label for the scenario), got {_kind(value)}")
    return str(value)


def _hardware(hw_raw: dict) -> Hardware:
    if "gpu" not in hw_raw:
        raise GpuplanError("scenario has no hardware.gpu: add `hardware: {gpu: h100-sxm}` (or --gpu NAME); "
                           "`gpuplan gpus` lists the catalogue")
    hardware = make_hardware(
        _inline_mapping(hw_raw["gpu"], "hardware.gpu", "{base: a10g, bf16_dense_tflops: 125}"),
        gpus=_int(hw_raw.get("gpus", 1), "hardware.gpus"),
        gpus_per_node=_int(hw_raw["gpus_per_node"], "hardware.gpus_per_node") if "gpus_per_node" in hw_raw else None,
        scale_up=hw_raw.get("scale_up"), scale_out=hw_raw.get("scale_out"),
        price_per_gpu_hour=parse_money(hw_raw["price_per_gpu_hour"], "hardware.price_per_gpu_hour")
        if "price_per_gpu_hour" in hw_raw else None,
        power_limit_w=parse_count(hw_raw["power_limit_w"], "hardware.power_limit_w")
        if "power_limit_w" in hw_raw else None,
    )
    if "host_memory" in hw_raw:
        hardware = replace(hardware, host_memory_bytes=_host_memory(hw_raw["host_memory"]))
    return hardware


def _corrections(hw_raw: dict, tr_raw: dict, gpu: str, model_type: str) -> Corrections:
    """The calibration a scenario asks for: ``hardware.calibration`` (factors `gpuplan calibrate`
    fitted on the user's own runs of ``gpu``) and ``training.trace_calibration`` (the activation
    ratio `gpuplan trace --calibrate` stored for the architecture)."""
    memory = float(parse_count(hw_raw.get("memory_factor", 1.0), "hardware.memory_factor"))
    compute = float(parse_count(hw_raw.get("compute_factor", 1.0), "hardware.compute_factor"))
    for key, value in (("memory_factor", memory), ("compute_factor", compute)):
        if not 0.1 <= value <= 10:
            raise GpuplanError(f"hardware.{key} = {value} is a calibration factor (1 = none): give a value "
                               "between 0.1 and 10, or use hardware.calibration")
    factors = calibration_factors(hw_raw.get("calibration"), gpu)
    if factors is not None:
        memory, compute = factors
    activations = trace_activation_factor(tr_raw.get("trace_calibration"), model_type)
    return Corrections(memory=memory, compute=compute, gpu=gpu,
                       activations=1.0 if activations is None else activations)


def _inline_mapping(value: Any, key: str, example: str) -> Any:
    """A mapping given as flag text (``--gpu '{base: a10g, bf16_dense_tflops: 125}'``) → the mapping."""
    if not (isinstance(value, str) and value.lstrip().startswith("{")):
        return value
    try:
        parsed = load_yaml(value, key, **SCENARIO_BOUNDS)
    except GpuplanError as err:
        raise GpuplanError(f"{key} looks like a mapping but does not parse ({err}): write it as {example}") from None
    if not isinstance(parsed, dict):
        raise GpuplanError(f"{key} {shown(value)} is not a mapping: write it as {example}")
    return parsed


def _host_memory(value: Any) -> float:
    """CPU memory of one node. A bare number is bytes, so one below 1 GiB is a missing unit."""
    key = "hardware.host_memory"
    host = parse_bytes(value, key)
    bare = not isinstance(value, str) or not any(ch.isalpha() for ch in value)
    if not host > 0:
        raise GpuplanError(f"{key} must be positive, e.g. 2TiB per node, got {value!r}")
    if host < MIN_HOST_MEMORY:
        if bare:
            raise GpuplanError(f"{key} = {value!r} has no unit (a bare number is bytes): write e.g. 2TiB per node")
        raise GpuplanError(f"{key} = {value!r} is less than 1 GiB: give the CPU memory of one node, e.g. 2TiB")
    if host > MAX_HOST_MEMORY:
        raise GpuplanError(f"{key} = {value!r} is more than 1 PiB per node: give the CPU memory of one node, "
                           "e.g. 2TiB")
    return host


def _training(tr_raw: dict, model: ModelSpec, no_bf16: str | None = None, layout: dict | None = None
              ) -> tuple[Training, tuple[tuple[str, str, Any, str], ...]]:
    kw: dict[str, Any] = {}
    for key, value in tr_raw.items():
        if key in INT_KEYS:
            kw[key] = _int(value, f"training.{key}")
        elif key == "tokens":
            kw[key] = parse_count(value, "training.tokens")
        elif key in ("dropout", "lora_dropout"):
            kw[key] = probability(value, f"training.{key}")
        elif key == "headroom":
            kw[key] = _share(value, "training.headroom")
        elif key == "lora_targets":
            kw[key] = lora_target_names(value)
        elif key == "trace_calibration":  # the activation ratio: see _corrections
            continue
        elif key in ("optimizer_in_backward", "activation_offloading", "expandable_segments", "tf32", "dora"):
            kw[key] = _bool(value, f"training.{key}")
        elif key == "compile":
            kw[key], kw["compile_loss"] = compile_word(value)
        elif key == "cuda_graphs":
            kw[key] = cuda_graphs_word(value)
        elif key == "kernels":
            kw[key] = kernels_word(value)
        elif key in TRAINING_NAMES:
            kw[key] = _name_value(value, f"training.{key}")
    if "tokens" in kw and "steps" in kw:
        raise GpuplanError("give training.tokens or training.steps, not both: steps × global batch × "
                           "seq_len is the tokens")
    words = read_words(kw, no_bf16, layout or {})
    if "seq_len" not in kw and model.position == "learned" and 0 < model.max_positions < DEFAULT_SEQ_LEN:
        kw["seq_len"] = model.max_positions  # the table's length, as its published runs trained (spec/defaults.py)
    seq_len = kw.get("seq_len", DEFAULT_SEQ_LEN)
    Training(seq_len=seq_len)  # seq_len is checked before global_batch_tokens divides by it
    if "global_batch_tokens" in tr_raw and "global_batch" in tr_raw:
        same_batch(kw["global_batch"], tr_raw["global_batch_tokens"], seq_len)
    elif "global_batch_tokens" in tr_raw:
        kw["global_batch"], reading = batch_from_tokens(tr_raw["global_batch_tokens"], seq_len)
        words += (reading,) if reading else ()
    if kw.get("method") in ADAPTERS:  # the named stack's own adapters where the run names none
        words += stack_lora(kw, tr_raw.get("framework"), model)
    if "lora_targets" in kw or kw.get("method") in ADAPTERS:  # the model's own linears
        kw["lora_targets"], reading = read_lora_targets(kw.get("lora_targets"), model, kw.get("framework", "generic"),
                                                        kw.get("method"))
        words += reading
    training = Training(**kw)
    training = documented_defaults(training)  # an open fp8 recipe, gradient dtype: the framework's documented
    if training.method != "full":
        check_lora_rank(training, model)
    return training, words


def _layout(lay_raw: dict) -> dict[str, Any]:
    layout: dict[str, Any] = {}
    for key, value in lay_raw.items():
        where = f"layout.{key}"
        if key in INT_KEYS:
            layout[key] = _int(value, where)
            limit = {"micro_batch": MAX_MICRO_BATCH, "virtual_stages": MAX_VIRTUAL_STAGES, "zero": 3}.get(key, MAX_GPUS)
            if key != "zero" and layout[key] > limit:
                raise GpuplanError(f"{where} = {layout[key]:,} is more than the limit {limit:,}: "
                                   + ("give sequences per GPU per micro-step, e.g. 1" if key == "micro_batch"
                                      else "give a degree that divides the GPU count"))
        elif key in ("sequence_parallel", "dp_overlap", "tp_overlap", "ep_overlap"):
            layout[key] = _bool(value, where)
        else:  # a name; recompute_modules a tuple of names (io/config_keys.py recompute_modules)
            layout[key] = tuple(value) if key == "recompute_modules" else _name_value(value, where)
    check_layout_fields(layout)
    return layout
