"""A warp's h store followed by another store, or by a fence, in the exchange alone: the
kernel's Lamport exchange with no mat-vec (``lmech_x``) at batch 1, 2 and 4 (GPU, then the
simulator).

    PYTHONPATH=. python3 measurements/store_flush.py --out $OUT    # store_flush.json
    python measurements/store_flush.py --simulate measurements/h200/store_flush.json

Why: one clock stamp stored by lane 0 of every warp right after its h store, or right before
its first poll, makes the Lamport kernels 10-20% faster at batch 1 (``stamp_effect.json``);
stamps elsewhere in the step do not. If a lone store lingers in the SM before it leaves for L2
and a later store of the warp sends it on, the pollers of every other SM see h late in the
plain kernel, and the exchange alone must show it too.

The benchmark is :func:`kernels_ir.kernels.microbench.lamport_kernel.exchange` (132 CTAs x 256
threads, values checked) with ``after`` "" (the kernel), "store" (lane 0 of every warp stores
the round's value into a line of its own), "fence" (``__threadfence()``) or "delay" (dependent
FFMAs about as long as the fence, then lane 0 stores their result: the fence's wait without its
ordering). Cost per round: the slope of the medians between 16 and 64 rounds (11 repeats; the
simulator 4 and 8 rounds). ``store_flush_first.json`` is the first run, without "delay".
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (words, batch): one row a warp at batch 1 (1024 rows) and 2 (1024), two at batch 1 (2048),
# four at batch 1 (4096), one at batch 4 (the control: there the stamps changed little)
LAYOUTS = ((1024, 1), (2048, 1), (2048, 2), (4096, 1), (4096, 4))
AFTERS = ("", "store", "fence", "delay")
SIZES = (16, 64)
SIM_SIZES = (4, 8)


def builder(words: int, batch: int, after: str):
    """``rounds -> Microbench``: the Lamport exchange of ``words`` words at ``batch``."""
    from kernels_ir.kernels.microbench.lamport_kernel import exchange

    return lambda rounds: exchange(rounds=rounds, words=words, batch=batch, after=after)


def entries() -> list:
    """``(key, words, batch, after)``: ``x_<words>_b<batch>[_<after>]``."""
    return [(f"x_{w}_b{b}" + (f"_{a}" if a else ""), w, b, a)
            for w, b in LAYOUTS for a in AFTERS]


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "store_flush.json", [
        (key, "lmech_x", SIZES, {"words": w, "batch": b, "after": a}, builder(w, b, a))
        for key, w, b, a in entries()])


def simulate_into(path: str) -> None:
    """Add the simulator's cost per round (values checked) to the record at ``path``."""
    from measurements.probe import add_simulated_slopes

    add_simulated_slopes(path, entries(), builder, SIM_SIZES)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/store_flush.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
