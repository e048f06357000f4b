"""Nsight Compute memory tables and warp states of the CSR row-per-warp kernel (the campaign's
7 CSR cases): what a gather of one sector per line costs in L1TEX and L2.

    PYTHONPATH=. python3 measurements/csr_ncu.py --out $OUT     # GPU: csr_ncu.json

Runs itself under ``ncu --cache-control none --section MemoryWorkloadAnalysis_Tables --section
WarpStateStats --metrics <METRICS>`` with ``--worker``, which launches each CSR case's one-step
kernel twice on the same buffers (the first launch fills L2, as the graph's previous step does;
read the second). A diagnosis record for the CSR under-prediction (measurements/README.md,
"Library baselines from a calibration sweep"); nothing reads it automatically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SECTIONS = ("MemoryWorkloadAnalysis_Tables", "WarpStateStats")
METRICS = ("gpu__time_duration.sum", "lts__t_requests_srcunit_tex_op_read.sum",
           "lts__t_sectors_srcunit_tex_op_read.sum",
           "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_global_op_ld.sum",
           "smsp__inst_executed_op_global_ld.sum", "sm__cycles_active.avg")


def worker(order_path: str) -> int:
    from types import SimpleNamespace

    import numpy as np

    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from measurements.campaign import NCU_STEPS, build_case, cases, launch_jobs

    spec = load_spec("h100")
    jobs = []
    for c in cases():
        if c["kind"] == "csr":
            prog = build_case(c, NCU_STEPS, spec)
            step = SimpleNamespace(kernel=prog.kernel,
                                   inputs=prog.step_inputs(0, np.asarray(prog.layer.h0)))
            jobs += [(f"{c['id']}:fill", step), (f"{c['id']}:warm", step)]
    launch_jobs(Runner(), jobs, order_path, check_grid=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--worker", metavar="ORDER_JSON")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    from measurements.exchange_ncu import run_ncu

    res = run_ncu(os.path.abspath(__file__), args.out, "csr_ncu_raw.csv", "regex:csr", SECTIONS,
                  METRICS, flags=("--cache-control", "none"))
    with open(os.path.join(args.out, "csr_ncu.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(json.dumps({k: v for k, v in res.items() if k != "cases"}, default=float)[:1500])
    for name, rec in res.get("cases", {}).items():
        m = rec["metrics"]
        print(name, {k: m.get(k) for k in METRICS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
