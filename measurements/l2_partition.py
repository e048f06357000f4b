"""The split L2 (near / far partition): one device call, or the simulator.

    PYTHONPATH=. python3 measurements/l2_partition.py --out $OUT      # GPU (writes the JSON)
    python measurements/l2_partition.py --simulate measurements/h100/l2_partition.json

Times, at two sizes each (cost per op = slope of the medians, as in the campaign):

- ``l2_latency`` (the campaign's one-sector pointer chase: the mean of near and far) and
  ``l2_latency_wide_k`` for k = 1..32 (k chains in one warp: each load waits for the slowest of
  k random lines; 8 MiB of lines, so no line is read twice). A split L2 shows as a rise from the
  mean at k = 1 to the far latency by k = 4..8; a per-line cost at the SM as a further slope.
- ``l2_latency_wide_8_revisit``: the same over 64 lines read again and again (would a line of
  the far partition, once read, be served nearer the next time?).
- ``l2_latency_block_k``, k = 1, 4, 8, 16, 32: one aligned block of k 128-byte lines per hop
  (how finely the partitions interleave; a Lamport poll group is one 512-byte block per load).
- ``store_visibility`` three times (three allocations: one flag, one draw of the address hash)
  and ``store_visibility_8`` (eight flags in turn: the average).
- ``flag_round_trip``, ``flag_round_trip_same_sm``, ``poll_storm``, ``grid_barrier``: the
  calibration's held-out and fitted references, re-timed in the same call.

``gpusim.calibrate`` merges this record over ``microbench.json`` (``l2_far_extra_cycles`` from
``l2_latency_wide_8``, ``l2_store_visibility_cycles`` from ``store_visibility_8``).
``--simulate FILE`` adds the same benchmarks simulated with the h100 spec to FILE.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WIDE_LINES = 65536   # 8 MiB: 2048 hops per chain never revisit a line, even with 32 chains
# key -> (microbenchmark, sizes, builder arguments on the GPU, arguments for the simulator)
ENTRIES = {
    "l2_latency": ("l2_latency", (32, 128), {}, {"lines": 1024}),
    **{f"l2_latency_wide_{k}": (f"l2_latency_wide_{k}", (32, 128), {"lines": WIDE_LINES},
                                {"lines": 4096}) for k in (1, 2, 4, 8, 16, 32)},
    "l2_latency_wide_8_revisit": ("l2_latency_wide_8", (32, 128), {"lines": 64}, {"lines": 64}),
    **{f"l2_latency_block_{k}": (f"l2_latency_block_{k}", (32, 128), {"blocks": 4096},
                                 {"blocks": 256}) for k in (1, 4, 8, 16, 32)},
    **{f"store_visibility{s}": ("store_visibility", (500, 2000), {}, {}) for s in
       ("", "_b", "_c")},
    "store_visibility_8": ("store_visibility_8", (64, 256), {}, {}),
    "flag_round_trip": ("flag_round_trip", (500, 2000), {}, {}),
    "flag_round_trip_same_sm": ("flag_round_trip_same_sm", (500, 2000), {}, {}),
    "poll_storm": ("poll_storm", (100, 400), {}, {}),
    "grid_barrier": ("grid_barrier", (100, 400), {}, {}),
}
SIM_SIZES = {"store_visibility": (4, 8), "store_visibility_8": (2, 4), "flag_round_trip": (4, 8),
             "flag_round_trip_same_sm": (4, 8), "poll_storm": (2, 4), "grid_barrier": (4, 8)}


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "l2_partition.json",
                               [(key, name, sizes, kw)
                                for key, (name, sizes, kw, _) in ENTRIES.items()])


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_microbenches

    simulate_microbenches(path, [(key, name, SIM_SIZES.get(name, (4, 16)), skw)
                                 for key, (name, _, _, skw) in ENTRIES.items()])


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/l2_partition.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
