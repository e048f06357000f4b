"""The partial last group's re-read in the exchange alone: the kernel's Lamport exchange with no
mat-vec (``lmech_x``), its last staging group partly past the end of the slot, a chunk past the
end re-reading the lane's chunk 0 or reading the lane's chunk of the previous group; waiting, and
with every slot written before the launch (GPU, then the simulator).

    PYTHONPATH=. python3 measurements/exchange_reread.py --out $OUT    # exchange_reread.json
    python measurements/exchange_reread.py --simulate measurements/h200/exchange_reread.json

Why: in the kernels (``exchange_groups_partial.json``) the re-read took 3-24% of the GPU's
waiting step and nothing with every slot written, while the simulator charged it in both. This
says whether the exchange alone (polls, shared stores, the owners' h stores, no rows) shows the
same, on the GPU and in the simulator.

The benchmark is :func:`kernels_ir.kernels.microbench.lamport_kernel.exchange` (132 CTAs x 256
threads, batch 4, values checked) with its ``fallback``. Cost per round: the slope of the
medians between 16 and 64 rounds (11 repeats; the simulator 4 and 8 rounds).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# words of the slot: a last group of 1024 (5120, 9216) or 2048 (6144) words
WORDS = (5120, 6144, 9216)
FALLBACKS = ("chunk0", "previous")
SIZES = (16, 64)
SIM_SIZES = (4, 8)


def builder(words: int, present: bool, fallback: str):
    """``rounds -> Microbench``: the Lamport exchange of ``words`` words (``present``: every
    slot written before the launch) with ``fallback``."""
    from kernels_ir.kernels.microbench.lamport_kernel import exchange

    return lambda rounds: exchange(rounds=rounds, words=words, present=present,
                                   fallback=fallback)


def entries() -> list:
    """``(key, words, present, fallback)``: ``x_<words>_<fallback>`` (waiting) and
    ``xp_<words>_<fallback>`` (every slot written)."""
    return [(f"{'xp' if present else 'x'}_{w}_{fb}", w, present, fb)
            for w in WORDS for present in (False, True) for fb in FALLBACKS]


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "exchange_reread.json", [
        (key, "lmech_x", SIZES, {"words": w, "present": p, "fallback": fb}, builder(w, p, fb))
        for key, w, p, fb in entries()])


def simulate_into(path: str) -> None:
    """Add the simulator's cost per round (values checked) to the record at ``path``."""
    from measurements.probe import add_simulated_slopes

    add_simulated_slopes(path, entries(), builder, SIM_SIZES)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main
    return probe_main(argv, __doc__, "measurements/exchange_reread.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
