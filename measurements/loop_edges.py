"""What a loop's own control costs a warp (``kernels_ir.kernels.microbench.control``): a spin
loop whose test is a register compare (with and without a vote, the Lamport poll's form) and a
rolled counted loop of one dependent IMAD. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/loop_edges.py --out $OUT     # GPU (loop_edges.json)
    python measurements/loop_edges.py --simulate measurements/h200/loop_edges.json

Why: in the SASS (nvcc 13, sm_90) a compare whose predicate a branch reads carries a stall count
of 13, a ``VOTE`` a branch reads 13, a branch 5; the spin loops the generator writes add two
guard tests (the spin limit, the error poll every 1024 iterations), each a compare and a
branch. The engine had no cost for a loop's edge. Each benchmark's cost per iteration = slope
of the medians between 200 and 2000 iterations (11 repeats); the simulator's between 16 and
32.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENTRIES = (("spin", {}), ("spin_vote", {"vote": True}), ("seq", {}))
SIZES, SIM_SIZES = (200, 2000), (16, 32)


def _builder(key: str, kw: dict):
    from kernels_ir.kernels.microbench.control import seq_count, spin_count

    if key == "seq":
        return lambda rounds: seq_count(rounds)
    return lambda rounds: spin_count(rounds, **kw)


def _probe():
    from measurements.probe import per_op_probe

    return per_op_probe("loop_edges.json", ENTRIES, _builder, SIZES, SIM_SIZES)


def simulated_cycles(spec, key: str, kw: dict) -> float:
    """The simulator's cycles an iteration: the slope between 16 and 32 iterations, values
    checked."""
    return _probe()[1](spec, key, kw)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    measure, _, simulate_into = _probe()
    return probe_main(argv, __doc__, "measurements/loop_edges.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
