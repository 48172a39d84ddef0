"""A tensor-parallel group wider than the scale-up domain is answered (its collectives timed over the network) and
said: every block's activations then cross InfiniBand twice a layer each way."""

from __future__ import annotations

import pytest

import gpuplan
from gpuplan.model.estimate import Note

RUN = dict(model="llama-3.1-70b", seq_len=4096, recompute="full", zero=1, tokens=1e9)


@pytest.mark.parametrize(("gpu", "gpus", "tp", "said"), [
    ("h100-sxm", 64, 16, True),    # 8-GPU NVLink nodes: tp 16 spans two
    ("h100-sxm", 64, 8, False),
    ("gb200", 64, 16, False),      # an NVL72 rack is one 72-GPU NVLink domain over 4-GPU trays
])
def test_tp_past_the_nvlink_domain_is_said(gpu, gpus, tp, said):
    est = gpuplan.evaluate(**RUN, gpu=gpu, gpus=gpus, tp=tp, global_batch=gpus // tp * 4)
    assert (Note.TP_OVER_NETWORK in est.notes) is said
    if said:
        assert any("tp 16 spans 2 scale-up domains of 8 GPUs" in n for n in est.to_json()["notes"])


def test_tp_over_the_network_costs_time():
    # the same 64 GPUs: tp 16 over two nodes against tp 8 inside one, everything else equal
    wide, node = (gpuplan.evaluate(**RUN, gpu="h100-sxm", gpus=64, tp=tp, dp=64 // tp, global_batch=64)
                  for tp in (16, 8))
    assert wide.time.step.comm_exposed_s > node.time.step.comm_exposed_s
