"""Exact byte counts for each parallel layout and option."""

import pytest
from conftest import make, mem

from gpuplan.model.memory import stage_peak
from gpuplan.model.params import rank_params
from gpuplan.model.pipeline import chunk_sizes
from gpuplan.spec.scenario import complete_layout

L31_8B = 8_030_261_248


def test_hybrid_shard_shards_within_the_group_only():
    full = mem("llama-3.1-8b", gpus=64, layout={"zero": 3})
    hsdp = mem("llama-3.1-8b", gpus=64, layout={"zero": 3, "zero_group": 8})
    assert full["optimizer"] == pytest.approx(12 * L31_8B / 64)
    assert hsdp["optimizer"] == pytest.approx(12 * L31_8B / 8)
    assert hsdp["weights"] == pytest.approx(2 * L31_8B / 8)


def test_expert_parallel_splits_only_the_experts():
    sc = make("mixtral-8x7b", gpus=8)
    g = sc.model.params_by_group()
    experts = g["expert"]
    dense = sc.model.params - experts
    m = mem("mixtral-8x7b", gpus=8, layout={"ep": 8, "zero": 1})
    assert m["weights"] == pytest.approx(2 * (dense + experts / 8))
    # ZeRO-1: dense optimizer state over dp=8, experts over the expert-data-parallel group dp/ep = 1
    assert m["optimizer"] == pytest.approx(12 * (dense / 8 + experts / 8))


def test_tensor_parallel_divides_matrices_not_norms():
    sc = make("llama-3.1-8b")
    g = sc.model.params_by_group()
    rp = rank_params(sc.model, 4, 1, 1, 1, 0, None, 16)
    assert rp.dense == pytest.approx((sc.model.params - g["norm"]) / 4 + g["norm"])


def test_pipeline_stages_hold_embedding_first_and_head_last():
    sc = make("llama-3.1-8b", gpus=2)
    g = sc.model.params_by_group()
    first = rank_params(sc.model, 1, 1, 2, 1, 0, None, 16)
    last = rank_params(sc.model, 1, 1, 2, 1, 1, None, 16)
    per_layer = sc.model.layers[0].params_per_layer
    assert first.dense == g["embedding"] + 16 * per_layer
    assert last.dense == 16 * per_layer + g["head"] + 4096  # LM head + final norm


def test_uneven_pipeline_gives_first_and_last_stage_fewer_layers():
    # source: Dubey et al. 2024 (Llama 3), Sec. 3.3.2 — 126 layers on 16 stages, one layer fewer on
    # the first and the last stage.
    sizes = chunk_sizes(126, 16)
    assert sum(sizes) == 126 and sizes[0] == sizes[-1] == 7 and max(sizes) == 8
    assert chunk_sizes(32, 4) == [8, 8, 8, 8]


def test_1f1b_first_stage_keeps_pp_microbatches_last_keeps_one():
    sc = make("llama-3.1-8b", gpus=4, training={"global_batch": 64})
    lay = complete_layout(sc, pp=4)
    first = stage_peak(sc.model, sc.training, lay, 0)
    last = stage_peak(sc.model, sc.training, lay, 3)
    assert first.microbatches_in_flight == 4 and last.microbatches_in_flight == 1


def test_interleaved_first_stage_factor():
    # source: Korthikanti et al. 2022 Sec. 4.2.3: first stage holds L·(1 + (p−1)/(p·m)) layers' worth
    sc = make("llama-3.1-8b", gpus=4, training={"global_batch": 64})
    lay = complete_layout(sc, pp=4, virtual_stages=2)
    first = stage_peak(sc.model, sc.training, lay, 0)
    assert first.microbatches_in_flight == pytest.approx(4 + 3 / 2)


def test_context_parallel_halves_the_linear_activations():
    one = mem("llama-3.1-8b", gpus=2, training={"seq_len": 8192}, layout={"zero": 3, "recompute": "none"})
    cp2 = mem("llama-3.1-8b", gpus=2, training={"seq_len": 8192}, layout={"cp": 2, "zero": 3, "recompute": "none"})
    assert cp2["activations_per_microbatch"] == pytest.approx(one["activations_per_microbatch"] / 2)


def test_optimizer_offload_moves_master_and_moments_to_cpu():
    m = mem("llama-3.1-8b", gpus=8, layout={"zero": 2, "offload": "optimizer"})
    assert m["optimizer"] == 0
    assert m["cpu_offload"] == pytest.approx(12 * L31_8B / 8)


def test_pure_bf16_and_fp32_and_8bit_adam_bytes_per_param():
    # bf16-pure: 2 + 2 + 2·2 (bf16 moments); fp32: 4 + 4 + 8; 8-bit Adam (Dettmers et al. 2022):
    # 2 + 2 + 4 (master) + 2·(1 + 4/2048) beside 16-bit weights (DeepSpeed), 4 + 4 + 2·(1 + 4/2048) under
    # PyTorch AMP (the generic stack on one GPU: the fp32 weights are the master)
    n = 1e9
    pure = mem({"params": n}, training={"precision": "bf16-pure"})
    assert pure["weights"] + pure["gradients"] + pure["optimizer"] == pytest.approx(8 * n)
    fp32 = mem({"params": n}, training={"precision": "fp32"})
    assert fp32["weights"] + fp32["gradients"] + fp32["optimizer"] == pytest.approx(16 * n)
    a8 = mem({"params": n}, training={"optimizer": "adamw-8bit", "framework": "deepspeed"})
    assert a8["optimizer"] == pytest.approx(n * (4 + 2 * (1 + 4 / 2048)))
    amp = mem({"params": n}, training={"optimizer": "adamw-8bit"})
    assert (amp["weights"], amp["optimizer"]) == pytest.approx((4 * n, n * 2 * (1 + 4 / 2048)))
    # bitsandbytes Lion8bit (optim/lion.py: Optimizer1State, optim_bits=8, block-wise): Lion's one moment in
    # 1 B plus a 4 B absmax per 2048-block, beside the fp32 master (HF Trainer optim lion_8bit)
    l8 = mem({"params": n}, training={"optimizer": "lion_8bit", "framework": "deepspeed"})
    assert l8["optimizer"] == pytest.approx(n * (4 + 1 + 4 / 2048))


def test_foreach_adamw_step_temporary_can_set_the_peak():
    fused = mem("llama-2-7b", gpu="mi325x", training={"seq_len": 512})
    foreach = mem("llama-2-7b", gpu="mi325x", training={"seq_len": 512, "optimizer_impl": "foreach"})
    assert foreach["peak_phase"] == "optimizer step"
    assert foreach["detail"]["optimizer_step"] == pytest.approx(4 * 6_738_415_616)
    assert foreach["total"] > fused["total"]


def test_offload_is_checked_against_the_nodes_host_memory():
    # 70B with ZeRO-3 parameter offload (DeepSpeed ZeRO-Infinity: fp16/bf16 gradients, 16 B/param of
    # model state) on 2 L40S: every byte of model state moves to the host.
    ds = {"framework": "deepspeed"}
    fits = mem("llama-3.1-70b", gpu="l40s", gpus=2, training=ds,
               layout={"zero": 3, "offload": "params", "recompute": "full"})
    assert fits["cpu_offload_per_node"] == pytest.approx(2 * fits["cpu_offload"])
    assert fits["cpu_offload_per_node"] == pytest.approx(16 * 70_553_706_496, rel=1e-6)
    small_host = mem("llama-3.1-70b", gpu="l40s", gpus=2, hardware={"host_memory": "512GiB"}, training=ds,
                     layout={"zero": 3, "offload": "params", "recompute": "full"})
    assert not small_host["fits"] and small_host["total"] <= small_host["capacity"]
    big_host = mem("llama-3.1-70b", gpu="l40s", gpus=2, hardware={"host_memory": "2TiB"}, training=ds,
                   layout={"zero": 3, "offload": "params", "recompute": "full"})
    assert big_host["fits"]


def test_interleaved_without_virtual_stages_is_two_chunks_for_memory_and_time():
    # one documented default (spec/layout.py INTERLEAVED_DEFAULT_CHUNKS): memory's in-flight count
    # (Korthikanti et al. 2022 Sec. 4.2.3: p − stage + (p − 1)/v) and time's bubble ((p − 1)/v) use v = 2
    sc = make("llama-3.1-8b", gpus=4, training={"global_batch": 64})
    lay = complete_layout(sc, pp=4, pp_schedule="interleaved")
    assert lay.virtual_stages == 2
    assert stage_peak(sc.model, sc.training, lay, 0).microbatches_in_flight == pytest.approx(4 + 3 / 2)


# Llama-3.2-1B's shapes with 8 layers (tied): vocab × hidden = 128,256 × 2,048, 2 B gradients
SMALL_1B = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
            "tie_word_embeddings": True}
EMB_GRAD = 128256 * 2048 * 2


@pytest.mark.parametrize(("gpus", "layout", "made"), [
    (4, {"zero": 1}, 3 * EMB_GRAD),  # tied, one stage: the head's gradient, the embedding's, their sum
    (8, {"zero": 2}, 3 * EMB_GRAD),
    (4, {"pp": 4}, EMB_GRAD),        # first stage: the embedding's, beside 3 micro-batches still in flight
])
def test_gradients_persist_so_the_embeddings_backward_can_set_the_peak(gpus, layout, made):
    # measured with gpuplan trace (tests/trace/test_trace_pipeline_zero.py): the allocated peak is
    # the end of a micro-batch's backward, where embedding_dense_backward's V×h gradient is made before it
    # is added to the kept one
    def first_stage(seq_len):
        sc = make(SMALL_1B, gpus=gpus, training={"seq_len": seq_len, "global_batch": 16}, layout=layout)
        return stage_peak(sc.model, sc.training, complete_layout(sc), 0)

    p = first_stage(512)
    assert p.gradients_held - p.states.gradients == pytest.approx(made)
    assert p.train_phase_peak
    # the micro-batch ending its backward holds nothing any more; the others in flight keep theirs
    assert p.activations == pytest.approx(p.activations_per_microbatch * (p.microbatches_in_flight - 1))
    # long sequences: the start of backward (every activation and the loss buffers) stays the peak
    long = first_stage(8192)
    assert long.gradients_held == long.states.gradients


def test_deepspeed_zero3_gathers_modules_under_its_live_limit_not_whole_blocks():
    # source: DeepSpeed deepspeed/runtime/zero/config.py defaults — stage3_max_live_parameters 1e9,
    # stage3_prefetch_bucket_size 5e7, reduce_bucket_size 5e8 (frameworks.json deepspeed memory.zero3_buffers).
    # Megatron-LM 2021 Table 2's 530B (h 20480, MLP 81920): the largest module is one MLP matrix,
    # 20480 × 81920 = 1,677,721,600 elements, above the live limit, so it is what is gathered.
    model = {"model_type": "gpt2", "n_layer": 105, "n_embd": 20480, "n_head": 128, "n_inner": 81920,
             "vocab_size": 51200, "n_positions": 2048}
    kw = dict(gpu="a100-80gb-sxm", gpus=640, layout={"zero": 3, "micro_batch": 1, "recompute": "full"})
    ds = mem(model, training={"framework": "deepspeed", "precision": "fp16"}, **kw)
    matrix = 20480 * 81920
    expected = (matrix + 5e7) * 2 + 5e8 * 2  # gathered fp16 module + prefetch, the fp16 reduce bucket
    assert ds["detail"]["comm_buffers"] == pytest.approx(expected, rel=1e-9)
    # FSDP gathers a whole block and its prefetched neighbour: several times more for this model
    fsdp = mem(model, training={"framework": "pytorch-fsdp", "precision": "fp16"}, **kw)
    assert fsdp["detail"]["comm_buffers"] > 5 * ds["detail"]["comm_buffers"]


def test_the_near_capacity_note_names_only_the_savers_the_run_could_use():
    # a peak within 15 % over the capacity may still run with savers gpuplan does not model (spec/defaults.py): fp8
    # activation caching in an fp8 run, norm/MLA-up-projection recompute in an MLA model, a pipeline's per-stage
    # tuning — a plain bf16 data-parallel run has none of them, so it gets no such note
    from gpuplan.api import evaluate as api_evaluate
    from gpuplan.spec.defaults import unmodelled_savers

    assert unmodelled_savers("bf16", False, 1) == ()
    assert unmodelled_savers("fp8", True, 8) == ("fp8_activations", "mla_recompute", "pipeline_tuning")
    piped = api_evaluate(model="llama-3.1-70b", gpu="h100-sxm", gpus=64, tp=8, pp=8, pp_schedule="gpipe", zero=1,
                         micro_batch=1, global_batch=32, seq_len=4096, power_limit=600).to_json()
    (note,) = [n for n in piped["notes"] if n.startswith("within 15% over the capacity")]
    assert "per-stage memory tuning of the pipeline" in note and "fp8" not in note and "MLA" not in note
