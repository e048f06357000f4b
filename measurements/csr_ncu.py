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
import subprocess
import sys
import time

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
    import numpy as np

    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from measurements.campaign import NCU_STEPS, build_case, cases, launch_once

    spec = load_spec("h100")
    runner = Runner()
    order = []
    for c in cases():
        if c["kind"] != "csr":
            continue
        prog = build_case(c, NCU_STEPS, spec)
        for launch in ("fill", "warm"):
            try:
                launch_once(runner, prog.kernel, prog.step_inputs(0, np.asarray(prog.layer.h0)),
                            check_grid=False)
                order.append(f"{c['id']}:{launch}")
            except Exception as exc:  # record and go on
                order.append(None)
                print(f"worker {c['id']}: {exc}", file=sys.stderr)
            with open(order_path, "w") as f:
                json.dump(order, f)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--worker", metavar="ORDER_JSON")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    from measurements.campaign import provenance
    from measurements.exchange_ncu import parse_raw_csv

    os.makedirs(args.out, exist_ok=True)
    order_path = os.path.join(args.out, "order.json")
    log = os.path.join(args.out, "csr_ncu_raw.csv")
    cmd = ["ncu", "--csv", "--page", "raw", "--clock-control", "none", "--cache-control", "none",
           "--kernel-name", "regex:csr", "--metrics", ",".join(METRICS), "--log-file", log]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += [sys.executable, os.path.abspath(__file__), "--worker", order_path]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=500,
                       env=dict(os.environ, PYTHONPATH=os.getcwd()))
    res = {"provenance": provenance(sys.argv), "command": " ".join(cmd),
           "returncode": p.returncode, "seconds": time.time() - t0,
           "stderr_tail": p.stderr[-3000:], "sections": list(SECTIONS), "metrics": list(METRICS)}
    try:
        with open(log) as f:
            launches = parse_raw_csv(f.read())
        with open(order_path) as f:
            order = [x for x in json.load(f) if x is not None]
        res["cases"] = dict(zip(order, launches, strict=False))
    except (OSError, ValueError) as exc:
        res["error"] = str(exc)
    with open(os.path.join(args.out, "csr_ncu.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(json.dumps({k: v for k, v in res.items() if k != "cases"}, default=float)[:1500])
    for name, rec in res.get("cases", {}).items():
        m = rec["metrics"]
        print(name, {k: m.get(k) for k in METRICS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
