"""How the H200's L2 serves random one-sector gathers over many lines, by lines per warp load and
by warps per SM: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/l2_gather_sweep.py --out $OUT   # GPU: l2_gather_sweep.json
    python measurements/l2_gather_sweep.py --simulate measurements/h200/l2_gather_sweep.json

Why: the simulator prices the H200's L1-bypassing gathers over 32 lines (``gather_l2_32``) at
58.8 cycles a warp load per SM where the GPU takes 36.2-36.9 (``h200/gather.json``,
``h200/csr_mech.json``), and its batch-8 CSR step is latency-bound on those L2 queues. Which of
its terms over-prices them (the per-SM request cost, the contention groups' rate, the span of a
warp load over the groups) is not told by three points. The sweep is ``gather_l2_k``
(:func:`kernels_ir.kernels.microbench.gathers.gather`, ``path="l2"``: relaxed loads over 1 MiB,
4 chases a thread, one sector a lane) built here with the builder's own arguments, so no
benchmark is added to the IR's registry:

- lines per warp load k = 1, 2, 4, 8, 16, 32 at full occupancy (264 CTAs x 1024 threads);
- k = 32 with 32, 16, 8 and 4 warps an SM (132 CTAs of 1024 / 512 / 256 / 128 threads).

Cost per warp load per SM = per_op x SM count x clock (op = one warp load of the whole grid).
``--simulate`` adds the simulator's cycles at 2 and 4 rounds.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import per_op_probe  # noqa: E402

SIZES = (16, 64)       # rounds on the GPU (slope of the medians)
SIM_SIZES = (2, 4)     # rounds in the simulator
ENTRIES = ([(f"l2g_k{k}", {"k": k}) for k in (1, 2, 4, 8, 16, 32)]
           + [(f"l2g_k32_w{w}", {"k": 32, "ctas": 132, "threads": 32 * w})
              for w in (32, 16, 8, 4)])


def builder(key: str, kw: dict):
    """``rounds -> Microbench`` of entry ``key`` (its :data:`ENTRIES` arguments)."""
    from kernels_ir.kernels.microbench.gathers import gather

    return lambda rounds: gather(rounds=rounds, path="l2", **kw)


measure, simulated_cycles, simulate_into = per_op_probe("l2_gather_sweep.json", ENTRIES, builder,
                                                        SIZES, SIM_SIZES)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
