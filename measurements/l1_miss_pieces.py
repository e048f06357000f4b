"""What a load that misses L1 costs the L1TEX data stage: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/l1_miss_pieces.py --out $OUT   # GPU: l1_miss_pieces.json
    python measurements/l1_miss_pieces.py --simulate measurements/h200/l1_miss_pieces.json.xz
    python measurements/l1_miss_pieces.py --wavefronts measurements/h200/l1_miss_pieces.json.xz

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
crossbar), LSU writeback cycles, tag-stage output wavefronts and L2 sectors. ``--wavefronts``
adds the simulator's data-stage wavefronts a request (:func:`simulated_wavefronts`) and the
rule's for a hit (:func:`rule_wavefronts`), beside Nsight's (:func:`nsight_per_request`).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.csr_mech import METRICS as CSR_METRICS  # noqa: E402
from measurements.probe import PerSMProbe  # noqa: E402

KS = (1, 2, 4, 8, 16, 32)
NAMES = ([f"cmech_miss_{p}_{k}{w}_p" for w in ("", "_w4") for p in ("same", "spread", "rand")
          for k in KS] + ["cmech_miss_rand_32_lo", "cmech_miss_rand_32_w4_lo"])
SIZES = (16, 64)         # rounds on the GPU (slope of the medians)
SIM_SIZES = (2, 4)       # rounds in the simulator
NCU_ROUNDS = 16
# the load counters of csr_mech.py's pass (time, active cycles, load instructions, requests,
# sectors, L1 hits, tag output wavefronts), then the data pipe, the crossbar and the writeback
METRICS = CSR_METRICS[:7] + (
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


DATA_WF = "l1tex__data_pipe_lsu_wavefronts_mem_lgds.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"


def nsight_per_request(rec: dict, name: str, metric: str = DATA_WF) -> float:
    """Nsight's ``metric`` per global load request of benchmark ``name`` in record ``rec``."""
    m = rec["ncu"]["cases"][name]["metrics"]
    return m[metric] / m[REQUESTS]


def rule_wavefronts(name: str) -> float:
    """The bank rule's wavefronts of one of the benchmark's warp loads were it a hit (shared
    memory's rule at the load's width, :func:`kernels_ir.banks.wavefronts`)."""
    import numpy as np

    from kernels_ir.banks import wavefronts
    from kernels_ir.kernels import microbench as mb
    from kernels_ir.kernels.microbench.csr_gathers import lane_words

    p = mb.build(name, 2).params
    lanes = np.arange(32)
    flat = (lanes % p["k"]) * 37 * 32 + lane_words(p["pattern"], p["width"])
    return float(wavefronts(flat[None, :].astype(np.int64), p["width"])[0])


def simulated_wavefronts(name: str, spec_name: str = "h200", rounds=(2, 4)) -> float:
    """The simulator's data-stage wavefronts per global load request of benchmark ``name`` on
    its own grid: the slope between ``rounds`` (the one-off loads and the first lap drop out),
    counted at :meth:`gpusim.engine.smem.SharedPipe.global_returns` (loads that hit) and
    :meth:`~gpusim.engine.smem.SharedPipe.missed_units` (loads with missed lanes)."""
    import numpy as np

    from gpusim.engine import simulate
    from gpusim.engine.smem import SharedPipe
    from gpusim.specs import load_spec
    from kernels_ir.kernels import microbench as mb

    spec = load_spec(spec_name)
    count = {"wf": 0, "req": 0}
    real_returns, real_units = SharedPipe.global_returns, SharedPipe.missed_units
    kept = SharedPipe.__dict__["missed_units"]       # the staticmethod itself, to put back

    def returns(self, done, warps, sm, wavefronts):
        count["wf"] += int(np.sum(wavefronts))
        count["req"] += int(np.size(warps))
        return real_returns(self, done, warps, sm, wavefronts)

    def units(flat, active, missed, back, width):
        rows, ts = real_units(flat, active, missed, back, width)
        count["wf"] += int(rows.size)
        count["req"] += int(flat.shape[0])
        return rows, ts

    pts = []
    SharedPipe.global_returns, SharedPipe.missed_units = returns, staticmethod(units)
    try:
        for r in rounds:
            count.update(wf=0, req=0)
            m = mb.build(name, r)
            simulate(m.kernel, m.inputs, spec, l2_warm=True)
            pts.append((count["wf"], count["req"]))
    finally:
        SharedPipe.global_returns, SharedPipe.missed_units = real_returns, kept
    (w1, q1), (w2, q2) = pts
    return (w2 - w1) / (q2 - q1)


def add_wavefronts(path: str) -> None:
    """Add ``wavefronts``: per benchmark Nsight's data-stage wavefronts a request, the hit rule's
    and the simulator's, to the record at ``path``."""
    from measurements.probe import read_record, record_path, save_record

    path = record_path(path)
    rec = read_record(path)
    out = {}
    for name in NAMES:
        out[name] = {"nsight": nsight_per_request(rec, name), "rule": rule_wavefronts(name),
                     "simulated": simulated_wavefronts(name)}
        print(f"{name:28s} Nsight {out[name]['nsight']:6.2f}  rule {out[name]['rule']:5.1f}  "
              f"simulated {out[name]['simulated']:6.2f}", flush=True)
    rec["wavefronts"] = out
    save_record(path, rec)


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--wavefronts"] and len(argv) == 2:
        add_wavefronts(argv[1])
        return 0
    return PROBE.main(argv, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
