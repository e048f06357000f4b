"""The SM pipes' latencies (FFMA, IMAD, shuffle, tanh / exp / sigmoid, CTA barrier): one device
call, or the simulator.

    PYTHONPATH=. python3 measurements/pipes.py --out $OUT      # GPU (writes pipes.json)
    python measurements/pipes.py --simulate measurements/h100/pipes.json

Why: inside the Lamport kernel (``h100/lamport_trace.json``) the mat-vec part of a step (after
the staging barrier, up to the warp's h stores) takes 15-100% longer on the GPU than in the
simulator, and the staging barrier 75-140 ns longer, while the simulator's latencies of these
pipes were carried over from other GPUs (type I in ``gpusim/specs/h100.toml``). Each
benchmark here is one warp (one CTA for the barrier) following a dependent chain of one
instruction kind (:mod:`kernels_ir.kernels.microbench.pipes`), so its cost per link is that
instruction's latency. The IR's ``tanh`` / ``exp`` / ``sigmoid`` are single operations to the
simulator and software sequences in the CUDA the backend emits (``tanhf``, ``expf``,
``1 / (1 + expf(-x))``): their chains give what the simulator's ``sfu`` latency must stand for.
Cost per link = slope of the medians between 200 and 2000 rounds of 32 links (11 repeats;
at 8 and 40 rounds the launches were too short: the slope was lost in the launch jitter).

``gpusim.calibrate`` merges this record over ``microbench.json`` (the fits it makes from it are
listed in its docstring). ``--simulate FILE`` adds the same benchmarks simulated with the h100
spec to FILE.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NAMES = ("ffma_latency", "imad_latency", "shfl_latency", "tanh_latency", "exp_latency",
         "sigmoid_latency", "bar_latency")
SIZES, SIM_SIZES = (200, 2000), (2, 4)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "pipes.json",
                               [(name, name, SIZES, {}) for name in NAMES])


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_microbenches

    simulate_microbenches(path, [(name, name, SIM_SIZES, {}) for name in NAMES])


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/pipes.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
