"""Is one sector served cheaply because many SMs ask for the same sector, or because each SM's
requests stay in one sector? ``l2_sweep_reuse.py``'s lockstep sweep with the sector chosen per SM
or per warp: one device call (GPU only).

    PYTHONPATH=. python3 measurements/l2_sector_merge.py --out $OUT   # GPU: l2_sector_merge.json

Why: every SM loading sector 0 of lines it loads again and again costs the H200's busiest group
0.29-0.31 cycles a request (16 or 64 rows, ``l2_sweep_reuse.json``), under every rate the spec
has; rotating the sectors with the load and the warp costs 0.47-0.57. In that rotation all SMs
still ask for the same sector of a line at the same moment (the same warp and load reach the same
row), but each warp's stream moves between sectors. Two placements part the causes, on the same
lines (``l2_sweep_share.py``'s table, every SM starting on a row together):

- ``cta``: sector ``CTA mod 4`` for every load of the CTA: each SM's stream stays in one sector,
  but four sectors of a line are asked for at once;
- ``warp``: sector ``warp mod 4``: each warp's stream in one sector, each SM's in four;
- ``s0`` and ``rot`` again beside them (``l2_sweep_reuse.json``'s placements, word 0 and lane mod
  8 as there).

Tables of 16, 64 and 1024 rows. Each CTA's ``clock64`` span a round, 5 launches, the median over
the CTAs. The simulator has no sector-dependent service, so the record has no simulated values.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TABLES = (16, 64, 1024)
# name: (sector argument, word): 0-3 fixed, 4 rotating with load and warp, 5 CTA mod 4, 6 warp
PLACES = {"s0": (0, 0), "rot": (4, 1), "cta": (5, 0), "warp": (6, 0)}
OLD = "(sector < 4 ? sector : ((s + w) & 3))"
NEW = ("(sector < 4 ? sector : sector == 5 ? (int)(blockIdx.x & 3) : sector == 6 ? (w & 3) "
       ": ((s + w) & 3))")


def source(rows: int) -> str:
    """``l2_sweep_reuse.source(rows)`` with the per-CTA (5) and per-warp (6) sectors."""
    from measurements.l2_sweep_reuse import source as reuse_source

    src = reuse_source(rows)
    assert OLD in src
    return src.replace(OLD, NEW)


def measure(out: str, argv: list) -> dict:
    from measurements.l2_sweep_reuse import measure_tables

    return measure_tables(out, argv, "l2_sector_merge.json", TABLES, PLACES, source)


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main

    return gpu_probe_main(argv, __doc__, measure, "l2_sector_merge.json")


if __name__ == "__main__":
    sys.exit(main())
