"""The staging's shared stores and the CTA barrier after them: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/stage_bar.py --out $OUT      # GPU (writes stage_bar.json)
    python measurements/stage_bar.py --simulate measurements/h100/stage_bar.json

Why: inside the Lamport kernel (``h100/lamport_trace.json``) the staging barrier (a warp's poll
exit to the end of its CTA barrier) takes 110-180 ns on the GPU and 30-50 ns in the simulator,
with the slots pre-written (no waiting) as well as normally; a lone 256-thread barrier costs
29 cycles on both (``pipes.json``). Between a warp's poll exit and the barrier the kernel issues
its staging stores: per thread one ``STS.128`` per chunk (4 wavefronts a warp, 32 a CTA).
Each benchmark here (:func:`kernels_ir.kernels.microbench.pipes.stage_bar`) is one CTA of 8
warps repeating a link of ``chunks`` such stores, the barrier, and (``_ld``) a shared load whose
value the next link's stores need: a link's growth with ``chunks`` is what the stores add to the
barrier (``_ld`` absent) and to the first load after it. Cost per link = slope of the medians
between 200 and 2000 rounds of 8 links (11 repeats).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (key, builder arguments): stores 0, 1, 2, 4 and 8 chunks; barrier alone or with the load
ENTRIES = [("stage_bar_c0", {"chunks": 0, "load": False})] + \
    [(f"stage_bar_c{c}" + ("_ld" if ld else ""), {"chunks": c, "load": ld})
     for c in (1, 2, 4, 8) for ld in (False, True)]
SIZES, SIM_SIZES = (200, 2000), (2, 4)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "stage_bar.json",
                               [(key, "stage_bar", SIZES, kw) for key, kw in ENTRIES])


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_microbenches

    simulate_microbenches(path, [(key, "stage_bar", SIM_SIZES, kw) for key, kw in ENTRIES])


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/stage_bar.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
