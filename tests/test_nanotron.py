"""nanotron's profile (catalog/frameworks.json "nanotron", issue 26): its model states per parameter, the DDP
bucket copy in the parameters' dtype and the 16-bit .grad kept until each backward returns."""

import pytest
from conftest import make, mem

from gpuplan.catalog.frameworks import get_framework, refused_rules
from gpuplan.catalog.stacks import read_framework
from gpuplan.model.memory import stage_peak
from gpuplan.spec.scenario import complete_layout

L31_8B = 8_030_261_248


def test_nanotron_is_a_framework_of_its_own():
    assert read_framework("nanotron") == ("nanotron", None)
    assert get_framework("nanotron").memory["grad_dtype"].value == "fp32"


def test_zero1_keeps_the_fp32_gradient_buffer_whole_and_shards_master_and_adam():
    m = mem("llama-3.1-8b", gpus=8, training={"framework": "nanotron"}, layout={"dp": 8, "zero": 1})
    # nanotron (commit 0e0a27ea) src/nanotron/optim/gradient_accumulator.py FP32GradientAccumulator: bf16
    # parameters (2 B), an fp32 gradient buffer for every parameter "independently of ZeRO sharding" (4 B), fp32
    # master weights built from the ZeRO-1 slices (4 B / dp); optim/zero.py: AdamW states on the slices (8 B / dp)
    assert m["weights"] == pytest.approx(2 * L31_8B)
    assert m["gradients"] == pytest.approx(4 * L31_8B)
    assert m["optimizer"] == pytest.approx((4 + 8) * L31_8B / 8)
    assert m["model_state_bytes_per_param"] == pytest.approx(2 + 4 + 12 / 8)
    # no DDP under ZeRO-1 with fp32 accumulation (trainer.py init_model make_ddp): the generic 2 x 25 MB buckets
    assert m["detail"]["comm_buffers"] == pytest.approx(2 * 25 * 2**20)


def test_zero0_ddp_buckets_are_a_bf16_copy_of_every_gradient():
    m = mem("llama-3.1-8b", gpus=8, training={"framework": "nanotron"}, layout={"dp": 8, "zero": 0})
    # torch DDP (gradient_as_bucket_view False) around the bf16 parameters: 2 B per parameter, beside the
    # 4 B fp32 buffer (not another fp32-sized copy)
    assert m["detail"]["comm_buffers"] == pytest.approx(2 * L31_8B)
    assert m["model_state_bytes_per_param"] == pytest.approx(2 + 4 + 4 + 8)


def test_backward_ends_with_the_bf16_grads_of_the_stage_beside_the_fp32_buffer():
    sc = make("llama-3.1-70b", gpus=64, training={"framework": "nanotron", "seq_len": 4096},
              layout={"dp": 2, "tp": 8, "pp": 4, "zero": 1, "micro_batch": 1, "sequence_parallel": True})
    lay = complete_layout(sc)
    nano = stage_peak(sc.model, sc.training, lay, 0)
    st, act = nano.states, nano
    # FP32GradientAccumulator.backward: loss.backward() leaves every .grad (2 B per parameter of the stage),
    # freed only after it is added into the fp32 buffer; the other pp - 1 micro-batches still in flight
    assert nano.microbatches_in_flight == 4
    assert nano.gradients_held == pytest.approx(st.gradients + 2 * st.trainable_on_rank)
    assert act.activations == pytest.approx(3 * nano.activations_per_microbatch)
    # and the peak is that end of backward: weights, optimizer shard, both gradient sets, the others' activations
    assert nano.train_phase_peak


def test_nanotron_refuses_zero2_and_interleaved_pipelines():
    prof = get_framework("nanotron")
    assert [r.rule for r in refused_rules(prof, {"zero": 2, "pp": 1}, {})] == ["zero1-only"]
    assert [r.rule for r in refused_rules(prof, {"pp": 4, "pp_schedule": "interleaved"}, {})] == ["pipeline-engines"]
    assert refused_rules(prof, {"pp": 4, "pp_schedule": "gpipe"}, {}) == []  # AFAB
