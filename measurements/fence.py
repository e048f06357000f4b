"""What a ``__threadfence()`` costs and what it waits for: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/fence.py --out $OUT      # GPU (writes fence.json)
    python measurements/fence.py --simulate measurements/h100/fence.json

Why: the persistent barrier kernels are 5-20% slower in the simulator than on the H100 at every
size (barrier family +10% on the out-of-sample draws s9 and s10), and the simulated barrier
kernel's step is 600-800 ns longer than the Lamport kernel's where the GPU's is 300-600 ns. The
grid barrier's fence is one number in the spec (``fence_latency_cycles``), fitted to the
``grid_barrier`` microbenchmark, which stores nothing before it; the simulator adds it after
the warp's stores have been acknowledged. In the kernel the fence follows the h stores. These
benchmarks (:func:`kernels_ir.kernels.microbench.atomics.fence_cost`) time a fence alone, after
one or eight stores of its warp, before an atomic arrive, after every warp's stores and a CTA
barrier (the kernel's order), on one CTA and on all 132 at once, and the grid barrier itself,
with and without its fence, on 132 CTAs and on one.
Cost per round = slope of the medians between 200 and 2000 rounds (11 repeats).

``--simulate FILE`` adds the same benchmarks simulated with the h100 spec to FILE.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels_ir.kernels.microbench.registry import FENCE_BENCHES  # noqa: E402

NAMES = tuple(FENCE_BENCHES) + ("grid_barrier",)
SIZES, SIM_SIZES = (200, 2000), (8, 16)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "fence.json",
                               [(name, name, SIZES, {}) for name in NAMES])


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_microbenches

    simulate_microbenches(path, [(name, name, (4, 8) if name.startswith("grid_barrier")
                                  else SIM_SIZES, {}) for name in NAMES])


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/fence.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
