"""The architecture of a model as gpuplan sees it: every weight tensor with its shape.

A ``ModelSpec`` is built from a Hugging Face ``config.json`` (see ``models.py``). Everything
downstream — parameter counts, memory, FLOPs, LoRA adapters, Adafactor's factored states —
is derived from the list of weights, so one description serves all of them.

Shapes follow ``nn.Linear`` convention: ``(out_features, in_features)``; biases and norm
weights are 1-D. ``count`` is how many copies a layer holds (e.g. the routed experts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpuplan.spec._value import ValueHashed, seal

WeightGroup = Literal[
    "embedding",      # token embedding (vocab-parallel under TP)
    "position",       # learned absolute positions (replicated)
    "attention",      # q/k/v/o and MLA projections (TP-split)
    "mlp",            # dense MLP (TP-split)
    "expert",         # routed experts (EP-split, then TP-split)
    "shared_expert",  # always-active experts of DeepSeek/Qwen MoE (TP-split)
    "router",         # MoE gate (replicated)
    "norm",           # layer/RMS norm weights and biases, attention q/k norms (replicated)
    "head",           # untied LM head (vocab-parallel under TP)
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Weight:
    """One parameter tensor of a layer (or of the embedding/head)."""

    name: str
    shape: tuple[int, ...]
    group: WeightGroup
    count: int = 1
    bias: bool = False  # True for a bias vector (never a LoRA target, never factored)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) * self.count

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2 and not self.bias


LORA_GROUPS = {"attention", "mlp", "expert", "shared_expert"}  # the blocks' linear layers
BLOCK_MATRIX_GROUPS = frozenset(LORA_GROUPS | {"router"})  # the blocks' weight matrices, the MoE router's too


# PEFT's "all-linear" (every linear layer of the blocks), as training.lora_targets holds it: Llama's seven projections
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# the frameworks' own words for a block's linears (``lora_targets``): (weight groups, row-parallel or not — None: both)
_ATTN, _MLP = ("attention",), ("mlp", "shared_expert", "expert")
TARGET_WORDS: dict[str, tuple[tuple[str, ...], bool | None]] = {
    # Megatron-Core / NeMo 2 / Megatron-Bridge LoRA target_modules
    "linear_qkv": (_ATTN, False), "linear_proj": (_ATTN, True), "linear_fc1": (_MLP, False), "linear_fc2": (_MLP, True),
    # NeMo 1 lora_tuning.target_modules
    "attention_qkv": (_ATTN, False), "attention_dense": (_ATTN, True), "mlp_fc1": (_MLP, False),
    "mlp_fc2": (_MLP, True), "attention": (_ATTN, None), "mlp": (_MLP, None),
    # torchtune lora_attn_modules; its FeedForward's w1 (gate), w3 (up), w2 (down) where the model has no such leaf
    "output_proj": (_ATTN, True), "w1": (_MLP, False), "w3": (_MLP, False), "w2": (_MLP, True),
    # Llama's names on a model that fuses or names its linears otherwise (Phi-3 qkv_proj, Falcon query_key_value)
    "q_proj": (_ATTN, False), "k_proj": (_ATTN, False), "v_proj": (_ATTN, False), "o_proj": (_ATTN, True),
    "gate_proj": (_MLP, False), "up_proj": (_MLP, False), "down_proj": (_MLP, True),
}
# a marker that ends training.lora_targets where the stack adapts no routed expert (frameworks.json memory.lora_experts
# false: PEFT, whose modules cannot reach transformers 5's fused expert parameters)
NO_EXPERTS = "!experts"
ROW_PARALLEL_LEAVES = frozenset({"o_proj", "down_proj", "out_proj", "dense", "c_proj", "fc2", "dense_4h_to_h", "w2",
                                 "wo", "proj", "fc_out"})  # the linears whose input a tensor-parallel split divides


def local_shape(w: Weight, tp: int) -> tuple[float, float]:
    """(d_in, d_out) of a linear on one tensor-parallel rank: a row-parallel one splits its input, the others their
    output."""
    o, i = w.shape
    return (i / tp, o) if w.name.rsplit(".", 1)[-1] in ROW_PARALLEL_LEAVES else (i, o / tp)


def is_lora_target(w: Weight, targets: tuple[str, ...]) -> bool:
    """Whether PEFT puts an adapter on ``w`` for ``target_modules = targets``: the model's own leaf names
    (``resolve_lora_targets``), or ``ALL_LINEAR`` — PEFT's "all-linear", every linear of the blocks —, the routed
    experts' only where ``targets`` does not end in ``NO_EXPERTS``."""
    if not w.is_matrix or w.group not in LORA_GROUPS:
        return False
    if targets[-1:] == (NO_EXPERTS,):  # the stack adapts no routed expert
        if w.group == "expert":
            return False
        targets = targets[:-1]
    return targets == ALL_LINEAR or w.name.rsplit(".", 1)[-1] in targets


def resolve_lora_targets(model: ModelSpec, names: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """``training.lora_targets`` — leaf names, as PEFT matches a module by the last part of its path (io/words.py
    ``lora_target_names``) — as ``model``'s own linear leaf names, or ``ALL_LINEAR`` ("all-linear", or Llama's seven
    names on a model that has them all):
    a name the model's blocks hold is taken as it is; a framework's word for a kind of linear (Megatron-Core's
    linear_qkv/linear_proj/linear_fc1/linear_fc2, NeMo 1's attention_qkv/…/mlp_fc2, torchtune's output_proj and
    w1/w2/w3, or Llama's q_proj … down_proj on a model that fuses or names them otherwise) is read as the model's
    linears of that kind, said in the returned note; a name that is neither is an error naming the model's own."""
    from gpuplan.errors import GpuplanError

    if tuple(names) == ALL_LINEAR:
        return ALL_LINEAR, None
    # (leaf, group) of the blocks' linears in order: a leaf may name two kinds (GPT-2's c_proj: attention and MLP)
    pairs = dict.fromkeys((w.name.rsplit(".", 1)[-1], w.group) for lg in model.kinds for w in lg.weights
                          if w.is_matrix and w.group in LORA_GROUPS)
    leaves = list(dict.fromkeys(leaf for leaf, _ in pairs))
    if set(names) >= set(ALL_LINEAR) and all(leaf in leaves for leaf in ALL_LINEAR):
        return ALL_LINEAR, None
    out: list[str] = []
    read: list[str] = []
    for n in names:
        if n in leaves:
            out.append(n)
            continue
        groups, row = TARGET_WORDS.get(n, ((), None))
        match = [leaf for leaf in leaves if any((leaf, g) in pairs for g in groups)
                 and (row is None or (leaf in ROW_PARALLEL_LEAVES) == row)]
        if not match:
            raise GpuplanError(f"training.lora_targets: {n!r} names no linear layer of {model.name}, whose blocks' "
                               f"linears are {', '.join(leaves)}: name those, or all-linear")
        out += match
        read.append(f"{n} as {'/'.join(match)}")
    keep = tuple(dict.fromkeys(out))
    return keep, (f"{', '.join(read)} ({model.name}'s own linears)" if read else None)


# What mixes tokens in a block: softmax attention; a Mamba-2 state-space mixer (Dao & Gu 2024, arXiv:2405.21060);
# a gated delta-rule linear attention (Yang et al. 2024, arXiv:2412.06464: Qwen3-Next); attention and Mamba-2 side by
# side on the same input, their outputs summed (Falcon-H1); a gated short convolution (LFM2: B·x through a depthwise
# causal convolution, times C); none (an MLP-only block, Nemotron-H's "-" and "E" layers); Mamba-1's selective
# scan (Gu & Dao 2023, arXiv:2312.00752: Mamba, Falcon Mamba, Jamba)
Mixer = Literal["attention", "mamba2", "gdn", "attention+mamba2", "conv", "none", "mamba1"]
SSM_MIXERS = ("mamba2", "gdn", "attention+mamba2", "mamba1")


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerGroup:
    """``count`` identical transformer blocks (e.g. DeepSeek-V3: 3 dense + 58 MoE). A hybrid model's blocks
    differ in their token mixer and in whether they have an MLP (Nemotron-H: each block is one or the other)."""

    count: int
    weights: tuple[Weight, ...]
    moe: bool = False
    mixer: Mixer = "attention"
    mlp: bool = True  # an MLP (dense or MoE) sublayer

    @property
    def params_per_layer(self) -> int:
        return sum(w.numel for w in self.weights)

    @property
    def kind(self) -> tuple[bool, str, bool]:
        """What sets a block's time and activations besides its shapes: blocks of one kind are costed alike."""
        return (self.moe, self.mixer, self.mlp)

    @property
    def attends(self) -> bool:
        """The block runs softmax attention (alone or beside a recurrent mixer)."""
        return self.mixer in ("attention", "attention+mamba2")

    @property
    def scan(self) -> str | None:
        """The recurrent mixer's kind (model/ssm.py: mamba2, gdn), None when the block has none."""
        return "mamba2" if self.mixer == "attention+mamba2" else self.mixer if self.mixer in SSM_MIXERS else None

    @property
    def sublayers(self) -> int:
        """Residual branches of the block (a mixer, an MLP): each ends in one reduction of tensor parallelism (side-by-
        side mixers add their row-parallel outputs before it)."""
        return (self.mixer != "none") + self.mlp


@dataclass(frozen=True, slots=True, kw_only=True)
class SsmDims:
    """The recurrent mixer's sizes (one value per model). Mamba-2: ``heads`` x ``head_dim`` (P) values,
    ``groups`` sharing B and C of ``state`` (N) each; a gated delta-rule layer: ``heads`` value heads of
    ``head_dim``, ``groups`` query/key heads of ``state`` (its key head size: the state is state x head_dim
    per value head). ``chunk``: the length of the chunked (state-space-dual / WY) algorithm's blocks."""

    heads: int
    head_dim: int
    groups: int
    state: int
    conv_kernel: int
    chunk: int

    @property
    def inner(self) -> int:
        """Value width of the mixer (Mamba-2's d_inner; the gated delta rule's value_dim)."""
        return self.heads * self.head_dim


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ModelSpec(ValueHashed):
    """Shapes and weights of a decoder-only transformer (encoder-decoder is out of scope).

    Compared and hashed by content, the hash computed once (spec/_value.py): the planner's caches
    key on specs millions of times, and an equal spec read again must hit them."""

    name: str
    model_type: str
    n_layers: int
    hidden: int             # h
    n_heads: int            # a
    n_kv_heads: int         # key/value heads (GQA/MQA); == n_heads for MHA
    head_dim: int           # d (query/key head size; MLA: qk_nope + qk_rope)
    v_head_dim: int         # value head size (== head_dim except MLA)
    ffn: int                # dense MLP intermediate size (0 if every layer is MoE)
    vocab: int              # V
    max_positions: int
    gated_mlp: bool         # SwiGLU/GeGLU: 3 matrices; else 2 (GeLU MLP)
    norm: Literal["rmsnorm", "layernorm"]
    tied_embeddings: bool
    embedding: tuple[Weight, ...]
    layers: tuple[LayerGroup, ...]
    head: tuple[Weight, ...]  # final norm (+ LM head when untied)
    # Mixture of experts (0 when dense)
    n_experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0             # intermediate size of one routed expert
    # group-limited routing (DeepSeek-V2/V3 ``n_group`` / ``topk_group``): the experts in ``route_groups`` equal groups
    # of consecutive experts, a token's top-k taken inside its best ``route_topk_groups`` of them (0: no limit)
    route_groups: int = 0
    route_topk_groups: int = 0
    shared_ffn: int = 0          # total intermediate size of the shared expert(s)
    # Multi-head latent attention (DeepSeek-V2/V3); 0 when absent
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    # What a framework's launch config must state to build the same network (export/); shapes are above.
    # position: rope | learned | alibi | none; rope_theta: the RoPE base; rope_scaling: the config's
    # rope_scaling mapping as sorted (key, value) pairs, () when absent; rotary_percent: share of the head
    # dimension rotated (GPT-NeoX 0.25); activation: the MLP's (gated: SwiGLU = silu, GeGLU = gelu*);
    # parallel_block: attention and MLP read the same input (GPT-J/NeoX, Falcon, Cohere); post_norms: extra
    # norms after attention and MLP (Gemma 2/3, OLMo 2); norm_eps: None when the config does not say;
    # norm_zero_centered: LayerNorm1P, the weight stored as w - 1 (Nemotron; Megatron --apply-layernorm-1p);
    # sliding_window: keys a windowed layer attends to (0: none) and window_layers: per layer, True where
    # the layer attends within the window (Mistral, Gemma 2/3, StarCoder2, Cohere 2; empty: none)
    position: Literal["rope", "learned", "alibi", "none"] = "rope"
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] = ()
    rotary_percent: float = 1.0
    activation: str = "silu"
    parallel_block: bool = False
    post_norms: bool = False
    norm_eps: float | None = None
    norm_zero_centered: bool = False
    sliding_window: int = 0
    window_layers: tuple[bool, ...] = ()
    # Gemma 2's logit soft-capping, cap·tanh(x/cap) (0: none): attn_softcap on the attention scores (transformers'
    # eager_attention_forward; FlashAttention-2 applies it inside the kernel), final_softcap on the LM head's logits
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    # Extra modules not used in the main training step (DeepSeek-V3's multi-token-prediction layer)
    extra_params: int = 0
    # Of those, the ones loaded with the model and held frozen: an image-text model's vision tower and projector
    # (their 16-bit weights on the first pipeline stage; no gradients, optimizer state, FLOPs or activations)
    frozen_params: int = 0
    # A hybrid model's recurrent mixer (LayerGroup.mixer mamba2 / gdn); None when every mixer is attention
    ssm: SsmDims | None = None
    # Where the exact count came from: "formula" | "safetensors" | "safetensors-index" | "given"
    params_source: str = "formula"
    params_override: int | None = None  # exact total from safetensors headers or {params: N}
    assumed: tuple[str, ...] = field(default=())  # shape assumptions (e.g. for {params: N})
    _formula: int = field(init=False, default=0, repr=False, compare=False)  # cached sum over the weight list
    _by_group: tuple[tuple[str, int], ...] = field(init=False, default=(), repr=False, compare=False)
    # one block of each kind, in the order they first appear (LayerGroup.kind): what time and activations key on
    kinds: tuple[LayerGroup, ...] = field(init=False, default=(), repr=False, compare=False)
    attention_layers: int = field(init=False, default=0, repr=False, compare=False)  # blocks whose mixer is attention
    _hash: tuple = field(init=False, default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.window_layers and (len(self.window_layers) != self.n_layers or self.sliding_window < 1):
            raise ValueError(f"window_layers has {len(self.window_layers)} entries for {self.n_layers} layers "
                             f"(sliding_window {self.sliding_window}): give one per layer and a window of at least 1")
        object.__setattr__(self, "_formula", self._sum(set(WeightGroup.__args__)))  # type: ignore[attr-defined]
        object.__setattr__(self, "_by_group", tuple((g, self._sum({g})) for g in WeightGroup.__args__))  # type: ignore[attr-defined]
        kinds: dict[tuple[bool, str, bool], LayerGroup] = {}
        for lg in self.layers:
            kinds.setdefault(lg.kind, lg)
        object.__setattr__(self, "kinds", tuple(kinds.values()))
        object.__setattr__(self, "attention_layers", sum(lg.count for lg in self.layers if lg.attends))
        if any(lg.mixer in SSM_MIXERS for lg in self.layers) and self.ssm is None:
            raise ValueError("a block with a recurrent mixer needs the model's SsmDims (ModelSpec.ssm)")
        seal(self)

    def kind_index(self, lg: LayerGroup) -> int:
        """Which of ``kinds`` the block ``lg`` is."""
        key = lg.kind
        return next(i for i, k in enumerate(self.kinds) if k.kind == key)

    @property
    def hybrid(self) -> bool:
        """Some block mixes tokens without softmax attention (Mamba-2, gated delta rule) or has no mixer."""
        return self.attention_layers != self.n_layers

    # ---- parameter counts -------------------------------------------------------------
    def _sum(self, groups: set[str], active: bool = False) -> int:
        total = 0
        for w in self.embedding + self.head:
            if w.group in groups:
                total += w.numel
        for lg in self.layers:
            for w in lg.weights:
                if w.group in groups:
                    n = w.numel
                    if active and w.group == "expert" and self.n_experts:
                        n = n // w.count * self.top_k
                    total += lg.count * n
        return total

    def params_by_group(self) -> dict[str, int]:
        return dict(self._by_group)

    @property
    def params_formula(self) -> int:
        return self._formula

    @property
    def params(self) -> int:
        """Total parameters of the training graph (excludes ``extra_params``)."""
        return self.params_override if self.params_override is not None else self.params_formula

    @property
    def params_active(self) -> int:
        """Parameters touched per token (routed experts: top_k of n_experts)."""
        return self.params - (self.params_formula - self._sum(set(WeightGroup.__args__), active=True))  # type: ignore[attr-defined]

    @property
    def moe(self) -> bool:
        return self.n_experts > 0

    @property
    def windowed_layers(self) -> int:
        """How many layers attend within ``sliding_window`` (the rest attend to the whole sequence)."""
        return sum(self.window_layers)


def check_lora_rank(training: Any, model: ModelSpec) -> None:
    """A LoRA rank above a targeted matrix's smaller side adds more parameters than the matrix holds."""
    from gpuplan.errors import GpuplanError

    dims = [min(w.shape) for lg in model.layers for w in lg.weights if is_lora_target(w, training.lora_targets)]
    smallest = min(dims) if dims else model.hidden
    if training.lora_rank > smallest:
        raise GpuplanError(f"training.lora_rank = {training.lora_rank} is more than {smallest}, the smallest "
                           f"dimension of the matrices it adapts in {model.name}: use a rank of at most "
                           f"{smallest} (usually 8 to 64)")


def with_positions(model: ModelSpec, seq_len: int) -> ModelSpec:
    """``model`` as a run at ``seq_len`` tokens trains it: a learned position table holds one row per position, so a
    sequence past its ``max_positions`` needs a table that long — llm-foundry sizes it to the run's ``max_seq_len``
    (its NumParams grows with the sequence), and a Hugging Face GPT-2 indexes past ``n_positions`` only with a longer
    ``wpe`` —; the table grows and ``assumed`` says by how much. RoPE, ALiBi and position-free models are unchanged
    (``Note.BEYOND_POSITIONS`` words theirs)."""
    if model.position != "learned" or seq_len <= model.max_positions:
        return model
    grow = seq_len - model.max_positions
    emb = tuple(replace(w, shape=(w.shape[0] + grow, *w.shape[1:])) if w.group == "position" else w
                for w in model.embedding)
    added = sum(w.numel for w in emb) - sum(w.numel for w in model.embedding)
    if not added:
        return model
    note = (f"{model.name}'s learned position table holds {model.max_positions:,} positions: a {seq_len:,}-token "
            f"sequence needs {seq_len:,}, so it is grown to that (+{added:,} parameters), as a run at that length "
            "must")
    return replace(model, embedding=emb, max_positions=seq_len, assumed=(*model.assumed, note),
                   params_override=None if model.params_override is None else model.params_override + added)
