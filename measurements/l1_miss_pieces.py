"""What a load that misses L1 costs the L1TEX data stage: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/l1_miss_pieces.py --out $OUT   # GPU: l1_miss_pieces.json
    python measurements/l1_miss_pieces.py --simulate measurements/h200/l1_miss_pieces.json

The data stage serves a load that hits L1 in the bank rule's wavefronts (shared memory's rule at
the load's width; ``measurements/h200/csr_mech.json``). A load whose sectors miss passes it in
more: the H200's ``cmech_miss_rand_32`` took 15.2 data-pipe wavefronts a request where the rule
gives 3, ``cmech_miss_rand_32_w4`` 21.3 where it gives 10. This probe varies what a missed
request holds, one factor at a time, everything else as ``cmech_miss_rand_32`` (plain loads over a
1 MiB table: L1 misses, L2 hits; 4 independent chases a thread; the op is one warp load of the
whole grid):

- the lines a warp load touches, ``k`` = 1, 2, 4, 8, 16, 32 (lane ``l`` on line ``l % k``);
- where the lanes of a line read (:func:`kernels_ir.kernels.microbench.csr_gathers.lane_words`):
  ``same`` (every lane word 0: one sector a line, one bank), ``spread`` (lane ``l`` word
  ``l x width``: every lane its own bank, a line's lanes over its sectors), ``rand`` (a fixed
  random word or 16-byte chunk a lane);
- the width: 32-bit loads (``cmech_miss_<pattern>_<k>_p``, 264 CTAs x 1024 threads) and 128-bit
  ones with every word used (``..._w4_p``, 132 CTAs x 1024 threads: their registers allow one
  CTA an SM);
- the warps an SM holds: ``cmech_miss_rand_32_lo`` and ``cmech_miss_rand_32_w4_lo``, 4 warps.

``cmech_miss_rand_32_p`` is ``cmech_miss_rand_32`` of ``csr_mech.py`` under another name: the
repeat. Each is timed at two sizes (slope of the medians, 11 repeats, raw times kept); cost per
warp load per SM = per_op x SM count x clock. An Nsight Compute pass then launches each once and
records, per request: data-pipe wavefronts, sectors, L1 hits, sectors back from L2 (the
crossbar), LSU writeback cycles, tag-stage output wavefronts and L2 sectors.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import PerSMProbe  # noqa: E402

KS = (1, 2, 4, 8, 16, 32)
NAMES = ([f"cmech_miss_{p}_{k}{w}_p" for w in ("", "_w4") for p in ("same", "spread", "rand")
          for k in KS] + ["cmech_miss_rand_32_lo", "cmech_miss_rand_32_w4_lo"])
SIZES = (16, 64)         # rounds on the GPU (slope of the medians)
SIM_SIZES = (2, 4)       # rounds in the simulator
NCU_ROUNDS = 16
METRICS = ("gpu__time_duration.sum", "sm__cycles_active.avg",
           "smsp__inst_executed_op_global_ld.sum",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
           "l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_lgds.sum",
           "l1tex__data_pipe_lsu_wavefronts.sum",
           "l1tex__m_xbar2l1tex_read_sectors.sum",
           "l1tex__lsu_writeback_active_mem_lgds.sum",
           "l1tex__t_set_accesses_pipe_lsu_mem_global_op_ld.sum",
           "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")

PROBE = PerSMProbe(script=__file__, record="l1_miss_pieces", names=NAMES, sizes=SIZES,
                   sim_sizes=SIM_SIZES, ncu_rounds=NCU_ROUNDS, metrics=METRICS,
                   kernel_regex="regex:mb_cmech_miss", format_version=1)
measure, worker, simulate_into = PROBE.measure, PROBE.worker, PROBE.simulate_into


def main(argv: list | None = None) -> int:
    return PROBE.main(argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
