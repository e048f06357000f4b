"""Lines loaded once a sweep or again and again: ``l2_sweep_share.py``'s lockstep sweep (all 132
SMs on a row at once) over tables of 16 to 1024 rows: one device call.

    PYTHONPATH=. python3 measurements/l2_sweep_reuse.py --out $OUT    # GPU: l2_sweep_reuse.json
    python measurements/l2_sweep_reuse.py --simulate measurements/h200/l2_sweep_reuse.json

Why: with every SM on a row at once, a table of 1024 rows of random lines costs the H200's
busiest group 0.45-0.48 cycles a request (``l2_sweep_share.json``), where the span's factor,
measured on a few hot lines that every SM loads again and again (the hammer sets: 0.64 at 16
groups of 2 lines), makes the simulator +88% to +101%. What parts the two cases: the lines a
group holds in use, and how often a line comes back. This probe keeps the kernel, the lockstep
(k = 132) and the span (a row's 32 lines over about 23 groups) and shrinks the table to 16, 64
and 256 rows (1024 is ``l2_sweep_share.json``'s), so a line comes back every 1, 4 or 16 rounds
and the lines in use fall from about 700 a group to about 11. Each row set is the first rows of
the same table; the group load a round is counted from its rows. ``rot`` and ``s0`` placements,
``l2_sweep_share.py``'s clock, launches and medians.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TABLES = (16, 64, 256, 1024)    # rows
K = 132


def group_load(groups, rows: int) -> dict:
    """Requests a round on each group: every warp's 16 loads a round over a table of ``rows``
    rows (every warp sweeps it, so each group gets ``CTAs x warps x 16 / rows`` times its
    requests over one sweep)."""
    from measurements import l2_sweep_share as sw
    from measurements.l2_group_rate import _count_groups

    per_sweep = _count_groups(sw.row_lines(range(rows)), groups)
    scale = sw.CTAS * sw.WARPS * sw.LOADS / rows
    return {"max": per_sweep["max"] * scale, "mean": per_sweep["mean"] * scale,
            "groups": per_sweep["groups"], "span": per_sweep["span"]}


def source(rows: int) -> str:
    """``l2_sweep_share.SOURCE`` over a table of ``rows`` rows (a power of two)."""
    from measurements import l2_sweep_share as sw

    if rows & (rows - 1) or not 16 <= rows <= sw.ROWS:
        raise ValueError(f"rows={rows}: a power of two from 16 to {sw.ROWS} expected")
    old = f"const unsigned ROWS = {sw.ROWS}u,"
    assert old in sw.SOURCE
    return sw.SOURCE.replace(old, f"const unsigned ROWS = {rows}u,")


def measure_tables(out: str, argv: list, record: str, tables, places: dict, source_of) -> dict:
    """The lockstep sweep (k = :data:`K`) on every table of ``tables`` rows and placement of
    ``places`` (``{name: (sector, word)}``), each table's CUDA from ``source_of(rows)``; the record
    ``record`` written under ``out``. Shared by this probe and ``l2_sector_merge.py``."""
    import json

    import cupy as cp
    import numpy as np

    from measurements import l2_sweep_share as sw
    from measurements.l2_slice_map import mapped_region

    reg = mapped_region(argv)
    prov, clocks, groups = reg["prov"], reg["clocks"], reg["groups"]
    buf, sink, pairs, wrong = reg["buf"], reg["sink"], reg["pairs"], reg["wrong"]
    span = cp.zeros(sw.CTAS, dtype=cp.int64)
    arrive = cp.zeros(1, dtype=cp.uint32)
    late = cp.zeros(1, dtype=cp.uint32)
    runs = {}
    for rows in tables:
        fn = cp.RawModule(code=source_of(rows), options=("-std=c++17",)).get_function("sweep")
        st = cp.asarray(sw.starts(K, rows=rows).reshape(-1).astype(np.int32))
        load = group_load(groups, rows)
        for place, (sector, word) in places.items():
            reps = []
            for _ in range(sw.LAUNCHES):
                arrive.fill(0)
                fn((sw.CTAS,), (32 * sw.WARPS,), (buf, st, np.int32(sw.ITERS), span, sink,
                                                  np.int32(sector), np.int32(word), arrive,
                                                  late))
                cp.cuda.Device().synchronize()
                reps.append((cp.asnumpy(span) / sw.ITERS).round(2).tolist())
            per = [float(np.median(r)) for r in reps]
            name = f"r{rows}_{place}"
            runs[name] = {"rows": rows, "k": K, "place": place, "sector": sector, "word": word,
                          "load": load, "cycles_per_round_per_cta": reps,
                          "cycles_per_round_per_sm": per}
            med = float(np.median(per))
            print(f"{name:10s} {med:8.1f} cycles a round; {med / (sw.LOADS * 32 * sw.WARPS):.3f} "
                  f"cycles a request per SM; {med / load['max']:.3f} a request of the busiest "
                  f"group ({load['max']:.0f})", flush=True)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "ctas": sw.CTAS, "warps": sw.WARPS,
           "iters": sw.ITERS, "launches": sw.LAUNCHES, "lines": sw.LINES, "mult": sw.MULT,
           "map_check": {"pairs": len(pairs), "wrong": wrong},
           "start_late": int(late.get()[0]), "runs": runs}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, record), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def measure(out: str, argv: list) -> dict:
    from measurements import l2_sweep_share as sw

    return measure_tables(out, argv, "l2_sweep_reuse.json", TABLES, sw.PLACES, source)


def simulate_into(path: str) -> dict:
    """Add the simulator's cycles a round to every run (``l2_sweep_share.simulate_into``, which
    reads each run's table size)."""
    from measurements import l2_sweep_share as sw

    return sw.simulate_into(path)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
