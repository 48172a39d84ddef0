"""Named CLI invocations whose output is pinned by tests/test_snapshots.py.

``SCENARIOS``: name -> argv for ``gpuplan.cli.main``; each prints JSON, stored parsed as ``data/<name>.json``
and compared with tolerance 1e-9 on floats. ``TEXTS``: name -> argv whose plain-text output (``--help``,
``validate``) is stored as ``data/<name>.txt`` and compared exactly. Keep each one fast (well under 3 s).

Regenerate the stored files only when a change of behaviour is intended, and review the diff:
``PYTHONPATH=src python tests/snapshots/make.py``.
"""

from __future__ import annotations

import shlex
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
LIST_FILE = HERE / "inputs" / "list.yaml"  # a list of scenarios with one bad item

_8B = "--model llama-3.1-8b --gpu h100-sxm"
_70B = "--model llama-3.1-70b --gpu h100-sxm"

_COMMANDS = {
    # --- evaluate: one configuration (every layout feature) -----------------------------------------------------
    "evaluate_example": "evaluate --example",
    "evaluate_dense_zero0": "evaluate --model llama-3.2-3b --gpu h100-sxm --gpus 8 --zero 0 --seq-len 4096 "
                            "--global-batch 64 --micro-batch 1 --tp 1 --pp 1 --recompute full --tokens 100B "
                            "--dp-overlap false",
    "evaluate_dense_zero1_eager": f"evaluate {_8B} --gpus 8 --zero 1 --seq-len 4096 --global-batch 64 --micro-batch 1 "
                                  "--tp 1 --pp 1 --recompute selective --attention eager --dropout 0.1",
    "evaluate_dense_zero2_8bit": f"evaluate {_8B} --gpus 16 --zero 2 --seq-len 4096 --global-batch 128 "
                                 "--micro-batch 1 --recompute none --optimizer adamw-8bit --optimizer-impl foreach",
    "evaluate_dense_zero3": f"evaluate {_8B} --gpus 8 --zero 3 --seq-len 8192 --micro-batch 2 --tokens 1T "
                            "--recompute selective-op --zero3-gather module",
    "evaluate_hybrid_shard_offload_params": f"evaluate {_8B} --gpus 64 --zero 3 --zero-group 8 --global-batch 512 "
                                            "--tp 1 --pp 1 --offload params --recompute full --host-memory 2TiB",
    "evaluate_tp_sp_overlap_fp8": f"evaluate {_70B} --gpus 256 --tp 8 --sequence-parallel true --tp-overlap true "
                                  "--zero 3 --micro-batch 2 --seq-len 8192 --global-batch 512 --precision fp8 "
                                  "--recompute full --scale-out ib-ndr-400g --tokens 1T",
    "evaluate_pp_gpipe": f"evaluate {_70B} --gpus 64 --tp 8 --pp 8 --pp-schedule gpipe --zero 1 --micro-batch 1 "
                         "--global-batch 32 --seq-len 4096 --power-limit 600 --tokens 1T",
    "evaluate_pp_1f1b": f"evaluate {_70B} --gpus 64 --tp 8 --pp 4 --pp-schedule 1f1b --zero 1 --micro-batch 1 "
                        "--global-batch 256 --seq-len 4096 --price 2.5 --tokens 1T",
    "evaluate_pp_interleaved_cp": f"evaluate {_70B} --gpus 128 --tp 8 --pp 4 --cp 2 --zero 1 "
                                  "--pp-schedule interleaved --virtual-stages 5 --seq-len 32768 --global-batch 64 "
                                  "--recompute selective",
    "evaluate_pp_zero_bubble": f"evaluate {_70B} --gpus 32 --tp 4 --pp 8 --pp-schedule zero-bubble --zero 0 "
                               "--micro-batch 1 --global-batch 128 --seq-len 4096 --recompute full",
    "evaluate_moe_ep_offload_optimizer": "evaluate --model mixtral-8x7b --gpu h100-sxm --gpus 32 --tp 2 --pp 2 --ep 8 "
                                         "--zero 1 --global-batch 256 --recompute full --offload optimizer "
                                         "--tokens 500B",
    "evaluate_moe_mla_deepseek": "evaluate --model deepseek-v2-lite --gpu h100-sxm --gpus 16 --ep 8 --zero 2 --tp 1 "
                                 "--pp 1 --global-batch 128 --recompute selective",
    "evaluate_lora": f"evaluate {_8B} --gpus 1 --method lora --lora-rank 16 --seq-len 2048 --micro-batch 4 "
                     "--global-batch 32 --tokens 1B",
    "evaluate_qlora_a100": "evaluate --model llama-3.1-70b --gpu a100-80gb --gpus 1 --method qlora --lora-rank 64 "
                           "--seq-len 2048 --micro-batch 1 --global-batch 16 --recompute full",
    "evaluate_params_eth10g_multinode": "evaluate --model '{params: 7e9}' --gpu h100-sxm --gpus 128 "
                                        "--scale-out eth-10g --tokens 1.4T --zero 1 --tp 1 --pp 1 "
                                        "--global-batch 1024",
    "evaluate_list_file": f"evaluate {shlex.quote(str(LIST_FILE))}",
    # --- fit: smallest GPU count ----------------------------------------------------------------------------------
    "fit_70b_h100": f"fit {_70B}",
    "fit_8b_two_gpu_types": "fit --model llama-3.1-8b --gpu h100-sxm,h200 --seq-len 8192",
    "fit_qlora_70b_a100_40gb": "fit --model llama-3.1-70b --gpu a100-40gb --method qlora",
    # --- plan: search (one GPU type, at most 256 GPUs, to stay fast) ---------------------------------------------
    "plan_8b_1T": f"plan {_8B} --tokens 1T --max-gpus 256",
    "plan_70b_top3": f"plan {_70B} --tokens 2T --max-gpus 256 --top 3",
    "plan_7b_cost_deadline_eth": "plan --model '{params: 7e9}' --gpu h100-sxm --tokens 1.4T --scale-out eth-10g "
                                 "--max-gpus 256 --objective cost --deadline 200d",
    "plan_7b_deadline_missed": "plan --model '{params: 7e9}' --gpu h100-sxm --tokens 1.4T --scale-out eth-10g "
                               "--max-gpus 256 --objective cost --deadline 60d",
    # --- export: launch configs (fixed tp and pp: no planning, except the last) ----------------------------------
    # the example's split with FSDP2's ZeRO-2 (torchtitan has no optimizer-only sharding, the example's ZeRO-1)
    "export_torchtitan": f"export {_70B} --gpus 64 --tp 4 --pp 4 --zero 2 --seq-len 8192 --global-batch 512 "
                         "--recompute selective-op --to torchtitan",
    "export_deepspeed": f"export {_8B} --gpus 64 --tp 1 --pp 1 --zero 3 --zero-group 8 --offload params "
                        "--recompute full --global-batch 512 --to deepspeed",
    "export_accelerate": f"export {_70B} --gpus 64 --tp 4 --pp 1 --zero 3 --seq-len 8192 --global-batch 512 "
                         "--to accelerate",
    "export_megatron": "export --model mixtral-8x7b --gpu h100-sxm --gpus 32 --tp 2 --pp 2 --ep 8 --zero 1 "
                       "--global-batch 256 --recompute full --to megatron",
    "export_torchrun": "export --model llama-3.1-8b --gpu h200 --gpus 8 --tp 1 --pp 1 --zero 0 --micro-batch 2 "
                       "--seq-len 2048 --global-batch 64 --to torchrun",  # does not fit: a note says so
    "export_planned_megatron": f"export {_8B} --tokens 1T --max-gpus 64 --to megatron",
    # --- validation against published runs -----------------------------------------------------------------------
    "validate": "validate",
}

SCENARIOS: dict[str, list[str]] = {name: [*shlex.split(cmd), "--json"] for name, cmd in _COMMANDS.items()}

# subcommands whose --help text is pinned (plus the top-level `gpuplan --help`)
HELP_COMMANDS = ["evaluate", "fit", "plan", "trace", "export", "profile", "calibrate", "gpus", "models", "fabrics",
                 "serve", "validate"]

TEXTS: dict[str, list[str]] = {
    "help_gpuplan": ["--help"],
    **{f"help_{cmd}": [cmd, "--help"] for cmd in HELP_COMMANDS},
    "validate": ["validate"],
}

HELP_COLUMNS = "120"  # argparse wraps help text to $COLUMNS: fixed so the text is the same everywhere


def run(argv: list[str]) -> tuple[int, str, str]:
    """``gpuplan.cli.main(argv)`` in this process: (exit status, stdout, stderr). ``--help`` exits via SystemExit."""
    import contextlib
    import io

    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse's --help
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return rc, out.getvalue(), err.getvalue()

# exit statuses other than 0: a list with a failed item answers the others and exits 1 (cli._print)
EXPECTED_RC = {"evaluate_list_file": 1}
