"""The loss under torch.compile (``training.compile``): compiled with the model — torchtitan's compile.components
default ["model", "loss"], a Hugging Face model's loss inside its forward — Inductor never materialises the fp32
logits: the loss holds the 16-bit logits and writes a 16-bit gradient, 4 B per logit, where the eager loss holds
12 (fp32 log-softmax output, incoming and outgoing fp32 gradients). ``compile: model`` compiles the model only
(torchtitan's train.py until early 2025 left ``torch.compile(loss_fn)`` commented out)."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.catalog.models import load_model
from gpuplan.errors import GpuplanError
from gpuplan.io.words import compile_word
from gpuplan.model.software import software

# the Trainy H200 row's layout (torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md)
RUN = dict(model="llama-3.1-8b", gpu="h200", gpus=32, seq_len=8192, global_batch=64, precision="fp8",
           framework="torchtitan", dp=32, zero=3, micro_batch=2, recompute="selective-op")
# Llama 3.1 8B's vocabulary 128,256; one rank's logits: micro-batch 2 × 8,192 tokens
LOGITS = 2 * 8192 * 128256


def _detail(compile_: object) -> dict:
    return gpuplan.evaluate(**RUN, compile=compile_).to_json()["memory"]["detail"]


def test_the_compiled_loss_holds_4_bytes_per_logit():
    assert _detail(True)["logits"] == 4 * LOGITS  # 8,405,385,216 B
    assert _detail("model")["logits"] == 12 * LOGITS  # 25,216,155,648 B: the eager loss over fp32 logits
    assert _detail(False)["logits"] == 12 * LOGITS


def test_the_loss_traffic_follows_the_same_switch():
    m = load_model("llama-3.1-8b")
    assert software("torchtitan", True, m).loss_per_logit == 6.0  # read the logits, write their gradient
    assert software("torchtitan", True, m, compile_loss=False).loss_per_logit == 24.0
    assert software("torchtitan", False, m).loss_per_logit == 24.0
    # a chunked loss stays chunked compiled (torchtune compiles each chunk's upcast and loss): every chunk's bf16
    # logits and one chunk's bf16 gradient, 2 + 2/8 B; eager, every chunk's fp32 log-softmax and the first chunk's
    # two fp32 gradients, 4 + 8/8 B (test_eager_chunks_keep_every_chunks_fp32_log_softmax)
    assert software("torchtune", True, m).logits_memory == 2.25
    assert software("torchtune", True, m).loss_per_logit == 6.0
    assert software("torchtune", False, m).logits_memory == 5.0
    assert software("torchtune", True, m, compile_loss=False).logits_memory == 5.0
    assert software("torchtune", False, m).loss_per_logit == 24.0


def test_eager_chunks_keep_every_chunks_fp32_log_softmax():
    """The measurement behind torchtune's eager 5 B: CEWithChunkedOutputLoss upcasts and takes the loss of one chunk
    at a time, but autograd keeps each chunk's fp32 log-softmax output (saved by log_softmax and, the same storage,
    by nll_loss) until backward — all 8 chunks, 4 B per logit — and nothing of the bf16 logits."""
    torch = pytest.importorskip("torch")
    rows, vocab, chunks = 64, 1000, 8
    saved: list = []

    def pack(t):
        saved.append(t)
        return t

    logits = torch.randn(2, rows, vocab, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (2, rows))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        total = sum(torch.nn.functional.cross_entropy(c.reshape(-1, vocab).float(), t.reshape(-1), reduction="sum")
                    for c, t in zip(logits.tensor_split(chunks, dim=1), labels.tensor_split(chunks, dim=1),
                                    strict=True))
    big = {t.untyped_storage().data_ptr(): t for t in saved if t.is_floating_point() and t.dim() == 2}
    assert [t.dtype for t in big.values()] == [torch.float32] * chunks
    assert sum(t.numel() * t.element_size() for t in big.values()) == 4 * 2 * rows * vocab
    total.backward()
    assert logits.grad is not None and logits.grad.dtype == torch.bfloat16


def test_one_reading_of_a_switch():
    from gpuplan.io.words import switch_word

    # files write a switch as YAML booleans or as words, in any case and spacing
    assert [switch_word(v) for v in (True, " Yes", "ON", "false", "off", "No")] == [True, True, True, False, False,
                                                                                    False]
    assert [switch_word(v) for v in ("model", 1, None, "liger")] == [None, None, None, None]
    assert gpuplan.evaluate(**RUN, compile="ON").to_json()["scenario"]["training"]["compile"] is True


def test_the_scenario_words():
    assert compile_word(True) == (True, True)
    assert compile_word("model") == (True, False)
    assert compile_word(" Model ") == (True, False)
    assert compile_word("off") == (False, False)
    with pytest.raises(GpuplanError, match="training.compile must be true .* model .* or false"):
        compile_word("loss")
    with pytest.raises(GpuplanError, match="training.compile must be"):
        compile_word(3)


def test_the_answer_echoes_what_was_compiled():
    assert gpuplan.evaluate(**RUN, compile="model").to_json()["scenario"]["training"]["compile"] == "model"
    assert gpuplan.evaluate(**RUN, compile=True).to_json()["scenario"]["training"]["compile"] is True


def test_inductor_keeps_the_16_bit_logits_not_the_fp32_upcast():
    """The measurement behind 4 B: torchtitan's loss, ``cross_entropy(pred.flatten(0, 1).float(), ...)``, through
    Inductor's decompositions and its min-cut partitioner (what torch.compile runs), saves for backward the bf16
    logits and two fp32 numbers per row (max and log-sum-exp) — no tensor of the logits' size in fp32."""
    torch = pytest.importorskip("torch")
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    rows, vocab = 2 * 64, 1000
    saved: list = []

    def forward(gm, _):
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        saved.extend(o.meta["val"] for o in out if "val" in o.meta)
        return make_boxed_func(gm.forward)

    def loss(pred, labels):
        return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    f = aot_function(loss, fw_compiler=forward, bw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                     partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table())
    pred = torch.randn(2, 64, vocab, dtype=torch.bfloat16, requires_grad=True)
    f(pred, torch.randint(0, vocab, (2, 64))).backward()
    kept = [t for t in saved[1:] if t.is_floating_point()]  # saved[0]: the loss itself
    full = [t for t in kept if t.numel() == rows * vocab]
    assert [t.dtype for t in full] == [torch.bfloat16]  # the logits as they came: 2 B each
    assert sum(t.numel() * t.element_size() for t in kept if t.numel() != rows * vocab) <= 2 * 4 * rows + 8
    assert pred.grad is not None and pred.grad.dtype == torch.bfloat16
