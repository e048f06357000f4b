"""What the CSR baseline's gathers cost in L1TEX, one factor at a time: one device call, or the
simulator.

    PYTHONPATH=. python3 measurements/csr_mech.py --out $OUT   # GPU: csr_mech.json (+ ncu CSV)
    python measurements/csr_mech.py --simulate measurements/h100/csr_mech.json
    python measurements/csr_mech.py --simulate measurements/h200/csr_mech.json

``gather_l1_k`` (``measurements/gather.py``) measured k cycles per warp load over k lines, every
lane at word 0 of its line, every load an L1 hit, the loads in flight on different lines. The
CSR kernel's gathers put each lane at an arbitrary word of its line, its 4 gathers of a chunk on
neighbouring columns (often the same lines), and miss L1 for a third of their sectors; at batch 1
with rows of 230-415 nonzeros the simulator prices them 30-55% above the GPU. The ``cmech_*``
family (:mod:`kernels_ir.kernels.microbench.csr_gathers`) varies one of these at a time:

- word position: ``cmech_same_32`` (control, = ``gather_l1_32``), ``cmech_spread_32`` (32 banks),
  ``cmech_spread4_32`` (8 banks x 4 lanes), ``cmech_rand_32`` (random words), ``cmech_spread_8``
  (8 lines, 32 banks), ``cmech_spread_32_w4`` (16 bytes a lane, 8 chunk positions) against
  ``gather_l1_32_w4`` (chunk 0 for all);
- lines shared by the 4 loads in flight: ``cmech_reuse_same_32``, ``cmech_reuse_rand_32``;
- L1 misses (plain loads over 1 MiB): ``cmech_miss_same_32``, ``cmech_miss_rand_32``, against
  ``gather_l2_32`` (L1 bypassed);
- 16 bytes a lane at random chunks, one load or two a 32-byte sector (the CSR kernel's gathers
  of h at batch 4 and 8), hits and misses: ``cmech_rand_32_w4``, ``cmech_miss_rand_32_w4``,
  ``cmech_pair_rand_32_w4``, ``cmech_miss_pair_rand_32_w4`` (added for the H200 record, whose
  Nsight pass also reads the LSU writeback counters).

Each is timed at two sizes (slope of the medians, 11 repeats, raw times kept); cost per warp load
per SM = per_op x SM count x clock. An Nsight Compute pass (``--worker``) then launches each once
and records L1TEX requests, sectors, hits, set accesses, data-stage and tag-output wavefronts and
L2 requests/sectors.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import PerSMProbe  # noqa: E402

NAMES = (["cmech_same_32", "cmech_spread_32", "cmech_spread4_32", "cmech_rand_32",
          "cmech_spread_8", "cmech_spread_32_w4", "gather_l1_32_w4",
          "cmech_reuse_same_32", "cmech_reuse_rand_32",
          "cmech_miss_same_32", "cmech_miss_rand_32", "gather_l2_32"]
         + ["cmech_rand_32_w4", "cmech_miss_rand_32_w4", "cmech_pair_rand_32_w4",
            "cmech_miss_pair_rand_32_w4"])
# the true 128-bit gathers, first measured on the H200 (the H100 record predates them)
WIDE = NAMES[-4:]
SIZES = (16, 64)         # rounds on the GPU (slope of the medians)
SIM_SIZES = (2, 4)       # rounds in the simulator (the full grid: 264 x 1024 threads)
NCU_ROUNDS = 16
METRICS = ("gpu__time_duration.sum", "sm__cycles_active.avg",
           "smsp__inst_executed_op_global_ld.sum",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
           "l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum",
           "regex:l1tex__data_pipe_lsu_wavefronts.*",
           "regex:l1tex__t_set_accesses.*", "regex:l1tex__t_set_conflicts.*",
           "regex:l1tex__data_bank.*", "regex:l1tex__m_xbar2l1tex_read_sectors.*",
           "regex:l1tex__lsu_writeback_active.*",
           "lts__t_requests_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum")


PROBE = PerSMProbe(script=__file__, record="csr_mech", names=NAMES, sizes=SIZES,
                   sim_sizes=SIM_SIZES, ncu_rounds=NCU_ROUNDS, metrics=METRICS,
                   kernel_regex="regex:mb_(cmech|gather)", format_version=1)
measure, worker, simulate_into = PROBE.measure, PROBE.worker, PROBE.simulate_into


def main(argv: list | None = None) -> int:
    return PROBE.main(argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
