"""Image-text wrappers whose language model is a decoder gpuplan reads: the decoder comes from
``text_config`` (keys it does not give take the transformers default of its config class, each recorded in
``assumed``); the vision tower and projector are counted exactly but apart, in ``extra_params``, because a
text step does not run them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.catalog.builder_parts import MAX_PARAMS, Cfg
from gpuplan.errors import GpuplanError

# Gemma3TextConfig defaults (transformers): the text_config of google/gemma-3-4b-pt gives only what differs
GEMMA3_TEXT = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}
# SiglipVisionConfig defaults (transformers): hidden, MLP, layers, channels, image and patch size
_SIGLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
           "image_size": 224, "patch_size": 16}
# Llama4TextConfig defaults (transformers 5.24): the shape keys, Llama 4 Scout's
LLAMA4_TEXT = {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
               "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
               "num_local_experts": 16, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
               "tie_word_embeddings": False}
# Llama4VisionConfig defaults (transformers 5.24)
_LLAMA4_VISION = {"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3,
                  "image_size": 448, "patch_size": 14, "vision_output_dim": 7680, "projector_input_dim": 4096,
                  "projector_output_dim": 4096}


# Qwen2_5_VLTextConfig defaults (transformers 5.24: the 72B shape); the decoder is Qwen2's
QWEN25VL_TEXT = {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                 "num_attention_heads": 64, "num_key_value_heads": 8}
# Qwen2_5_VLVisionConfig defaults (transformers 5.24)
_QWEN25VL_VISION = {"depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "in_channels": 3, "patch_size": 14,
                    "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584}
# Qwen2VLVisionConfig defaults (transformers 5.24): hidden_size is the merger's output, the text width
_QWEN2VL_VISION = {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "mlp_ratio": 4, "in_channels": 3,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
# Qwen3VLTextConfig defaults (transformers 5.24); the decoder is Qwen3's (q/k RMSNorms over head_dim)
QWEN3VL_TEXT = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128}
# Qwen3VLVisionConfig defaults (transformers 5.24)
_QWEN3VL_VISION = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "in_channels": 3, "patch_size": 16,
                   "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
                   "num_position_embeddings": 2304}
# PixtralVisionConfig defaults (transformers 5.24)
_PIXTRAL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_channels": 3,
            "patch_size": 16}
# LlavaConfig defaults (transformers 5.24): text_config LlamaConfig's shape, vision_config CLIP ViT-L/14 at 336 px
LLAVA_TEXT = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32}
# CLIPVisionConfig defaults (transformers 5.24): what a given vision_config leaves out
_CLIP = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3, "image_size": 224,
         "patch_size": 32}
_CLIP_L336 = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_channels": 3,
              "image_size": 336, "patch_size": 14}
# LlavaOnevisionConfig defaults (transformers 5.24): a Qwen2 decoder (Qwen2Config's shape), SigLIP so400m at 384 px
ONEVISION_TEXT = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32}
_SIGLIP_SO400M_384 = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 26, "num_channels": 3,
                      "image_size": 384, "patch_size": 14, "vision_use_head": False}
# PaliGemmaConfig defaults (transformers 5.24): a Gemma-2B-shaped decoder, SigLIP so400m at 224 px without its head
PALIGEMMA_TEXT = {"vocab_size": 257152, "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
                  "num_attention_heads": 8, "num_key_value_heads": 1}
_SIGLIP_SO400M_224 = {"hidden_size": 1152, "intermediate_size": 4096, "num_hidden_layers": 27, "num_channels": 3,
                      "image_size": 224, "patch_size": 14, "vision_use_head": False}
# Idefics3VisionConfig / SmolVLMVisionConfig defaults (transformers 5.24): SigLIP's blocks, no pooling head
_IDEFICS3_VISION = {"hidden_size": 1152, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
                    "image_size": 224, "patch_size": 32}
# MllamaTextConfig defaults (transformers 5.24: Llama 3.2 11B Vision's decoder) and MllamaVisionConfig's
MLLAMA_TEXT = {"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 40,
               "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": False,
               "max_position_embeddings": 131072}
MLLAMA_CROSS_LAYERS = (3, 8, 13, 18, 23, 28, 33, 38)
_MLLAMA_VISION = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_global_layers": 8,
                  "num_channels": 3, "image_size": 448, "patch_size": 14, "max_num_tiles": 4,
                  "vision_output_dim": 7680}
_MLLAMA_ASPECT_RATIOS = 8  # supported_aspect_ratios' default: 1x1 ... 4x1
# InternVLVisionConfig defaults (transformers 5.24): InternViT-300M at 448 px
_INTERNVIT = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_channels": 3,
              "image_size": 448, "patch_size": 14}
_WRAPPER_KEYS = ("text_config", "vision_config", "model_type", "architectures")


def text_config(c: Cfg, text_type: str, defaults: Mapping[str, Any], flat: bool = False,
                overrides: Mapping[str, Any] | None = None) -> Cfg:
    """The language model's config: ``text_config`` read as ``text_type``, the wrapper's notes carried over;
    ``flat``: the released file may give the text keys at its top level (Qwen2.5-VL's config.json), which
    transformers moves into text_config; ``overrides``: the wrapper's keys that win over text_config's."""
    text = c.raw("text_config", default={})
    if not isinstance(text, Mapping):
        raise GpuplanError(f"{c.source}: text_config must be a mapping of the language model's config keys")
    if flat:
        text = {**{k: v for k, v in c.d.items() if k not in _WRAPPER_KEYS}, **text}
    filled = {k: v for k, v in defaults.items() if text.get(k) is None}
    t = Cfg({**text, **filled, **(overrides or {}), "model_type": text_type}, f"{c.source} text_config", text_type,
            c.quote)
    t.assumed += c.assumed + [f"text_config.{k} not given: using the transformers default {v}"
                              for k, v in filled.items()]
    return t


def vision_note(t: Cfg, model_type: str, vision: int) -> None:
    t.assumed.append(f"model_type {model_type} (image-text): the language model is costed on text; the vision tower "
                     f"and projector ({vision:,} parameters) are counted apart (extra_params) and held frozen: their "
                     "16-bit weights on the first pipeline stage, without gradients, optimizer state, FLOPs or "
                     "activations (an image fine-tune adds those)")


def _vision_cfg(c: Cfg, defaults: Mapping[str, Any], kind: str) -> Cfg:
    raw = c.raw("vision_config", default={})
    if not isinstance(raw, Mapping):
        raise GpuplanError(f"{c.source}: vision_config must be a mapping of the vision tower's config keys")
    return Cfg({**defaults, **{k: x for k, x in raw.items() if x is not None}}, f"{c.source} vision_config", kind,
               c.quote)


def _tower_cfg(c: Cfg, absent: Mapping[str, Any], given: Mapping[str, Any], kind: str) -> Cfg:
    """The vision config: the wrapper class's own default tower when vision_config is absent; else what it gives,
    the vision config class's defaults (``given``) for the keys it leaves out."""
    return _vision_cfg(c, absent if c.raw("vision_config") is None else given, kind)


def _checked(c: Cfg, total: int) -> int:
    if total > MAX_PARAMS:
        raise GpuplanError(f"{c.source}: vision_config gives {total:.3g} parameters, more than the limit "
                           f"{MAX_PARAMS:.0e} (far above any real model): check its sizes")
    return total


def _encoder_layer(h: int, f: int) -> int:
    """A pre-norm ViT block: two LayerNorms, biased q/k/v/out (heads × head_dim = hidden), biased fc1/fc2."""
    return 2 * 2 * h + 4 * (h * h + h) + (h * f + f) + (f * h + h)


def _siglip_tower(v: Cfg, head: bool | None = None) -> int:
    """SigLIP vision tower (patch embedding with bias, learned positions, pre-norm blocks, post LayerNorm; the
    attention-pooling head when ``head``, else when vision_use_head, absent meaning present)."""
    h, f, L = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    p, side = v.int("patch_size"), v.int("image_size") // v.int("patch_size")
    tower = v.int("num_channels") * p * p * h + h + side * side * h + L * _encoder_layer(h, f) + 2 * h
    if v.flag("vision_use_head", default=True) if head is None else head:  # probe, MultiheadAttention, LN, MLP
        tower += h + 4 * h * h + 4 * h + 2 * h + (h * f + f) + (f * h + h)
    return tower


def siglip_params(c: Cfg, text_hidden: int) -> int:
    """The SigLIP vision tower and the Gemma 3 projector (mm_input_projection_weight, mm_soft_emb_norm)."""
    v = _vision_cfg(c, _SIGLIP, "siglip")
    h, tower = v.int("hidden_size"), _siglip_tower(v)
    return _checked(c, tower + h * text_hidden + h)


def llama4_vision_params(c: Cfg, text_hidden: int) -> int:
    """Llama4VisionModel (transformers 5.24 modeling_llama4): the unfold-convolution patch projection (no bias),
    class token, positions for every patch and the class token, pre and post LayerNorm, pre-norm blocks; the
    pixel-shuffle adapter's two bias-free matrices (intermediate_size → projector_input_dim,
    projector_output_dim²); and the multi-modal projector (vision_output_dim → text hidden, no bias)."""
    v = _vision_cfg(c, _LLAMA4_VISION, "llama4_vision")
    h, f, L = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    p, side = v.int("patch_size"), v.int("image_size") // v.int("patch_size")
    tower = v.int("num_channels") * p * p * h + h + (side * side + 1) * h + 2 * 2 * h + L * _encoder_layer(h, f)
    adapter = f * v.int("projector_input_dim") + v.int("projector_output_dim") ** 2
    return _checked(c, tower + adapter + v.int("vision_output_dim") * text_hidden)


def qwen25_vl_vision_params(c: Cfg) -> int:
    """Qwen2.5-VL's vision transformer (transformers 5.24 modeling_qwen2_5_vl): the bias-free Conv3d patch embedding
    over temporal_patch_size × patch_size² pixels of in_channels, depth blocks of two RMSNorms, a fused biased qkv and
    biased projection, a biased SwiGLU MLP; the patch merger (an RMSNorm, then spatial_merge_size² patches through two
    biased linears to out_hidden_size, the text hidden size)."""
    v = _vision_cfg(c, _QWEN25VL_VISION, "qwen2_5_vl_vision")
    h, f, depth = v.int("hidden_size"), v.int("intermediate_size"), v.int("depth")
    p, t, m2 = v.int("patch_size"), v.int("temporal_patch_size"), v.int("spatial_merge_size") ** 2
    block = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * (h * f + f) + (f * h + h)
    merger = h + (h * m2 * h * m2 + h * m2) + (h * m2 * v.int("out_hidden_size") + v.int("out_hidden_size"))
    return _checked(c, v.int("in_channels", "in_chans") * t * p * p * h + depth * block + merger)


def qwen2_vl_vision_params(c: Cfg) -> int:
    """Qwen2-VL's vision transformer (transformers 5.24 modeling_qwen2_vl): the bias-free Conv3d patch embedding,
    depth pre-norm blocks of embed_dim (two LayerNorms, a fused biased qkv and biased projection, a biased two-matrix
    QuickGELU MLP of mlp_ratio x embed_dim); the patch merger (a LayerNorm, then spatial_merge_size² patches through
    two biased linears to hidden_size, the text width)."""
    v = _vision_cfg(c, _QWEN2VL_VISION, "qwen2_vl_vision")
    h, depth, out = v.int("embed_dim"), v.int("depth"), v.int("hidden_size")
    ratio = v.number("mlp_ratio", default=4)
    assert ratio is not None
    p, t, hm = v.int("patch_size"), v.int("temporal_patch_size"), h * v.int("spatial_merge_size") ** 2
    merger = 2 * h + (hm * hm + hm) + (hm * out + out)
    return _checked(c, v.int("in_channels", "in_chans") * t * p * p * h + depth * _encoder_layer(h, int(ratio * h))
                    + merger)


def qwen3_vl_vision_params(c: Cfg, deepstack_mergers: bool = True) -> int:
    """Qwen3-VL's vision transformer (transformers 5.24 modeling_qwen3_vl): the biased Conv3d patch embedding, learned
    positions (num_position_embeddings), depth blocks of two LayerNorms, a fused biased qkv and biased projection, a
    biased two-matrix MLP; the patch merger (a LayerNorm over the hidden size, two biased linears from
    spatial_merge_size² patches to out_hidden_size) and one DeepStack merger per deepstack_visual_indexes entry (the
    same, its LayerNorm over the merged patches); Qwen3.5's tower (modeling_qwen3_5 Qwen3_5VisionModel) is the same
    without the DeepStack mergers."""
    v = _vision_cfg(c, _QWEN3VL_VISION, "qwen3_vl_vision")
    h, f, depth = v.int("hidden_size"), v.int("intermediate_size"), v.int("depth")
    p, t, hm = v.int("patch_size"), v.int("temporal_patch_size"), h * v.int("spatial_merge_size") ** 2
    out = v.int("out_hidden_size")
    deepstack = v.raw("deepstack_visual_indexes", default=[8, 16, 24]) if deepstack_mergers else []
    if not isinstance(deepstack, list | tuple):
        raise GpuplanError(f"{c.source}: vision_config.deepstack_visual_indexes must be a list of block indices")
    mlp = (hm * hm + hm) + (hm * out + out)
    embed = v.int("in_channels") * t * p * p * h + h + v.int("num_position_embeddings") * h
    return _checked(c, embed + depth * _encoder_layer(h, f) + (2 * h + mlp) + len(deepstack) * (2 * hm + mlp))


def pixtral_params(c: Cfg, text_hidden: int) -> int:
    """Mistral 3's Pixtral vision encoder (transformers 5.24 modeling_pixtral): the bias-free patch convolution, a
    pre-RMSNorm, blocks of two RMSNorms, bias-free q/k/v/o and SwiGLU; and its multi-modal projector
    (modeling_mistral3): an RMSNorm, the bias-free patch merger of spatial_merge_size² patches, then two linears to
    the text hidden size (with multimodal_projector_bias), the first over every vision_feature_layer's features."""
    v = _vision_cfg(c, _PIXTRAL, "pixtral")
    h, f, L, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers"), v.int("patch_size")
    layers = c.raw("vision_feature_layer", default=-1)
    n_feat = len(layers) if isinstance(layers, list) else 1
    bias = c.flag("multimodal_projector_bias", default=False)
    m2 = c.int("spatial_merge_size", default=2) ** 2
    tower = v.int("num_channels") * p * p * h + h + L * (2 * h + 4 * h * h + 3 * h * f)
    linear_1 = (h * n_feat + bias) * text_hidden
    linear_2 = (text_hidden + bias) * text_hidden
    projector = h + h * m2 * h + linear_1 + linear_2
    return _checked(c, tower + projector)


def _llava_projector(c: Cfg, vision_hidden: int, text_hidden: int, feature_layer: int) -> int:
    """LLaVA's projector (modeling_llava): two linears to the text width, biased where multimodal_projector_bias
    (default true), the first over every vision_feature_layer's features."""
    layers = c.raw("vision_feature_layer", default=feature_layer)
    n_feat = len(layers) if isinstance(layers, list) else 1
    bias = c.flag("multimodal_projector_bias", default=True)
    return (vision_hidden * n_feat + bias) * text_hidden + (text_hidden + bias) * text_hidden


def onevision_vision_params(c: Cfg, text_hidden: int) -> int:
    """LLaVA-OneVision (modeling_llava_onevision): the SigLIP tower, LLaVA's projector and the image_newline
    vector."""
    v = _tower_cfg(c, _SIGLIP_SO400M_384, _SIGLIP, "siglip_vision_model")
    projector = _llava_projector(c, v.int("hidden_size"), text_hidden, -1)
    return _checked(c, _siglip_tower(v) + projector + text_hidden)


def paligemma_vision_params(c: Cfg) -> int:
    """PaliGemma (modeling_paligemma): the SigLIP tower and one biased linear to projection_dim (default 2048)."""
    v = _tower_cfg(c, _SIGLIP_SO400M_224, _SIGLIP, "siglip_vision_model")
    return _checked(c, _siglip_tower(v) + (v.int("hidden_size") + 1) * c.int("projection_dim", default=2048))


def idefics3_vision_params(c: Cfg, text_hidden: int) -> int:
    """Idefics3 and SmolVLM (modeling_idefics3, modeling_smolvlm): a SigLIP tower without the pooling head and the
    connector's bias-free projection of scale_factor² pixel-shuffled patches (default 2) to the text width."""
    v = _vision_cfg(c, _IDEFICS3_VISION, "idefics3_vision")
    connector = v.int("hidden_size") * c.int("scale_factor", default=2) ** 2 * text_hidden
    return _checked(c, _siglip_tower(v, head=False) + connector)


def llava_vision_params(c: Cfg, text_hidden: int) -> int:
    """LLaVA's CLIP vision transformer (transformers 5.24 modeling_clip: a class embedding, the bias-free patch
    convolution, learned positions for the patches and the class token, pre- and post-LayerNorms, pre-norm blocks)
    and its projector (modeling_llava: two linears to the text width, biased where multimodal_projector_bias, default
    true, the first over every vision_feature_layer's features: ``_llava_projector``); LLaVA-NeXT adds its
    image_newline vector."""
    v = _tower_cfg(c, _CLIP_L336, _CLIP, "clip_vision_model")
    h, f, L, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers"), v.int("patch_size")
    side = v.int("image_size") // p
    tower = h + v.int("num_channels") * p * p * h + (side * side + 1) * h + L * _encoder_layer(h, f) + 4 * h
    projector = _llava_projector(c, h, text_hidden, -2)
    return _checked(c, tower + projector + (text_hidden if c.mt == "llava_next" else 0))


def mllama_vision_params(c: Cfg, text_hidden: int) -> int:
    """Llama 3.2 Vision's tower (transformers 5.24 modeling_mllama MllamaVisionModel): class embedding, bias-free
    patch convolution, the gated position embedding with its per-aspect-ratio tile embedding, gated pre- and
    post-tile embeddings, two LayerNorms, num_hidden_layers local blocks (bias-free attention, biased MLP, two
    LayerNorms) and num_global_layers gated ones (two gates each); and the projector, one biased linear from
    vision_output_dim to the text width."""
    v = _vision_cfg(c, _MLLAMA_VISION, "mllama_vision_model")
    h, f, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    patches = (v.int("image_size") // p) ** 2 + 1
    ratios = v.raw("supported_aspect_ratios")
    rows = (len(ratios) if isinstance(ratios, list) else _MLLAMA_ASPECT_RATIOS) + 1  # max_aspect_ratio_id + 1
    tiles = v.int("max_num_tiles")
    block = 4 * h * h + (h * f + f) + (f * h + h) + 4 * h
    tower = (h + v.int("num_channels") * p * p * h + 1 + patches * h + rows * tiles * patches * h
             + 2 * (1 + rows * tiles * h) + 4 * h + v.int("num_hidden_layers") * block
             + v.int("num_global_layers", minimum=0) * (block + 2))
    return _checked(c, tower + (v.int("vision_output_dim") + 1) * text_hidden)


def _side(v: Cfg, key: str) -> int:
    """An image or patch size given as one number or as [height, width] (InternVL's)."""
    value = v.raw(key)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(x, int) and x > 0 for x in value):
        return value[0]
    return v.int(key)


def internvl_vision_params(c: Cfg, text_hidden: int) -> int:
    """InternVL (transformers 5.24 modeling_internvl): InternViT (class token, biased patch convolution, learned
    positions; blocks of two layer-scale vectors, q/k/v — biased with attention_bias, q/k RMSNorms with
    use_qk_norm —, a biased output projection, a biased MLP and two norms, LayerNorm or RMSNorm by norm_type; no final
    norm under mean pooling) and the projector: a LayerNorm over the pixel-shuffled features (1/downsample_ratio² ×
    hidden), then two biased linears to the text width."""
    v = _vision_cfg(c, _INTERNVIT, "internvl_vision")
    h, f, L = v.int("hidden_size"), v.int("intermediate_size"), v.int("num_hidden_layers")
    p, side = _side(v, "patch_size"), _side(v, "image_size")
    norm = 2 * h if v.raw("norm_type", default="layer_norm") == "layer_norm" else h
    block = (2 * h + 3 * h * h + (3 * h if v.flag("attention_bias", default=False) else 0) + h * h + h
             + (h * f + f) + (f * h + h) + 2 * norm + (2 * h if v.flag("use_qk_norm", default=False) else 0))
    tower = h + ((side // p) ** 2 + 1) * h + v.int("num_channels") * p * p * h + h + L * block
    if not v.flag("use_mean_pooling", default=True):
        tower += norm
    ratio = c.number("downsample_ratio", default=0.5)
    merged = int(round(h / ratio / ratio))
    projector = 2 * merged + (merged + 1) * text_hidden + (text_hidden + 1) * text_hidden
    return _checked(c, tower + projector)
