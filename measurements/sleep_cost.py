"""What ``__nanosleep(ns)`` keeps a warp waiting (``kernels_ir.kernels.microbench.control``,
:func:`sleep_latency`): one warp alone, and eight warps on every SM. One device call, or the
simulator.

    PYTHONPATH=. python3 measurements/sleep_cost.py --out $OUT     # GPU (sleep_cost.json)
    python measurements/sleep_cost.py --simulate measurements/h200/sleep_cost.json

Why: the Lamport kernels can close each step with a ``__nanosleep`` (``step_wait``,
``kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_WAIT_NS``); CUDA documents the wait as
approximate (between 0 and twice the argument), so what the GPU keeps is measured before the
simulator prices it as ``ns`` nanoseconds (``gpusim.specs.rules.sleep_cycles``). Each
benchmark's cost per iteration = slope of the medians between 200 and 2000 iterations (11
repeats); ``seq`` (the loop and its IMAD alone) is what an iteration costs without the wait.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WAITS = (0, 50, 100, 200, 400, 800)
ENTRIES = (("seq", {}),) + tuple((f"sleep{ns}", {"ns": ns}) for ns in WAITS) + tuple(
    (f"sleep{ns}_w8_c132", {"ns": ns, "warps": 8, "ctas": 132}) for ns in (50, 200, 400))
SIZES, SIM_SIZES = (200, 2000), (16, 32)


def _builder(key: str, kw: dict):
    from kernels_ir.kernels.microbench.control import seq_count, sleep_latency

    if key == "seq":
        return lambda rounds: seq_count(rounds)
    return lambda rounds: sleep_latency(rounds, **kw)


def _probe():
    from measurements.probe import per_op_probe

    return per_op_probe("sleep_cost.json", ENTRIES, _builder, SIZES, SIM_SIZES)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    measure, _, simulate_into = _probe()
    return probe_main(argv, __doc__, "measurements/sleep_cost.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
