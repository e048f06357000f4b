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

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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


def measure(out: str, argv: list) -> dict:
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, time_microbench

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    res = {"format_version": 2, "provenance": prov, "results": {}}
    for name in NAMES:
        r = time_microbench(runner, name, SIZES, {}, repeats=11, warmup=2)
        if r["status"] == "ok":
            r["benchmark"] = name
            r["per_sm_cycles"] = r["per_op_s"] * prov["sm_count"] * prov["clock_rate_khz"] * 1e3
        res["results"][name] = r
    clocks.stop(prov)
    path = os.path.join(out, "gather.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=float)
    # the Nsight pass (its own process under ncu)
    from measurements.exchange_ncu import run_ncu

    try:
        res["ncu"] = run_ncu(os.path.abspath(__file__), out, "gather_ncu_raw.csv",
                             "regex:mb_gather", (), METRICS)
    except Exception as exc:  # the timings stand without it
        res["ncu"] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=float)
    for name, rec in res["ncu"].get("cases", {}).items():
        m = rec["metrics"]
        print(name, {k: v for k, v in m.items() if k.startswith(("l1tex", "lts", "sm__"))
                     and isinstance(v, float) and v})
    return res


def worker(order_path: str) -> int:
    from gpusim.backends.cupy_backend import Runner
    from kernels_ir.kernels import microbench as mb
    from measurements.campaign import launch_jobs

    jobs = [(n, mb.build(n, NCU_ROUNDS)) for n in NAMES]
    launch_jobs(Runner(), jobs, order_path, check_grid=False)
    return 0


def simulate_into(path: str) -> None:
    from gpusim.calibrate import simulated_cycles_per_op
    from gpusim.specs import load_spec

    with open(path) as f:
        data = json.load(f)
    spec = load_spec("h100")
    sim = {"spec": "h100", "clock_hz": spec.clock_hz, "sizes": list(SIM_SIZES), "results": {}}
    for name in NAMES:
        cyc = simulated_cycles_per_op(spec, name, SIM_SIZES, {}) * spec.sm_count
        meas = data["results"].get(name, {}).get("per_sm_cycles")
        sim["results"][name] = {"per_sm_cycles": cyc, "measured_per_sm_cycles": meas}
        print(f"{name:22s} sim {cyc:7.2f}  measured {meas if meas else float('nan'):7.2f} "
              f"cycles per warp load per SM", flush=True)
    data["simulated"] = sim
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=float)


def main(argv: list | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1])
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/gather.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
