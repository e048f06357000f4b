"""What a warp's gather costs in L1TEX: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/gather.py --out $OUT       # GPU: gather.json (+ ncu CSV)
    python measurements/gather.py --simulate measurements/h100/gather.json

The CSR baseline's column gathers are warp loads whose lanes touch up to 32 different 128-byte
lines, one sector each. The simulator's L1 has no throughput limit, and the CSR kernels are
under-predicted at large hidden sizes; NVIDIA describes the L1TEX tag stage as resolving "4 sets x
4 sectors per cycle" (more lines: more wavefronts, one per cycle). This record measures the cost
instead of assuming it:

- ``gather_l1_k``, k = 1..32: full occupancy (2 CTAs x 1024 threads per SM), 4 independent chases
  per thread, every warp load over k distinct lines of a 16 KiB table (L1 hits), one sector per
  line. Cost per warp load per SM = per_op x SM count.
- ``gather_l1_8_s4`` (8 lines x 4 sectors), ``gather_l1_32_w4`` (16 bytes a lane, 32 lines),
  ``gather_l1_8_s4_w4``: whether the cost counts lines, sectors or bytes.
- ``gather_l2_k``, k = 1, 8, 32: the same with relaxed (L1-bypassing) loads over 1 MiB: the L2
  side of one-sector requests.

Then an Nsight Compute pass (``--worker``) launches each benchmark once and records the L1TEX
request, sector, tag-stage and data-stage wavefront counters (``regex:`` metric families, so a
renamed counter still shows up) and the L2 request and sector counts.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import PerSMProbe  # noqa: E402

NAMES = ([f"gather_l1_{k}" for k in (1, 2, 4, 8, 16, 32)] +
         ["gather_l1_8_s4", "gather_l1_32_w4", "gather_l1_8_s4_w4"] +
         [f"gather_l2_{k}" for k in (1, 8, 32)])
SIZES = (16, 64)         # rounds on the GPU (slope of the medians)
SIM_SIZES = (2, 4)       # rounds in the simulator (the full grid: 264 x 1024 threads)
NCU_ROUNDS = 16
METRICS = ("gpu__time_duration.sum", "sm__cycles_active.avg",
           "smsp__inst_executed_op_global_ld.sum",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
           "regex:l1tex__data_pipe_lsu_wavefronts.*",
           "regex:l1tex__t_set_accesses.*", "regex:l1tex__t_set_conflicts.*",
           "regex:l1tex__data_bank.*",
           "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")


PROBE = PerSMProbe(script=__file__, record="gather", names=NAMES, sizes=SIZES,
                   sim_sizes=SIM_SIZES, ncu_rounds=NCU_ROUNDS, metrics=METRICS,
                   kernel_regex="regex:mb_gather", format_version=2)
measure, worker, simulate_into = PROBE.measure, PROBE.worker, PROBE.simulate_into


def main(argv: list | None = None) -> int:
    return PROBE.main(argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
