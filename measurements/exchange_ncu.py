"""Nsight Compute warp-state and instruction statistics of the exchange-scan kernels and the
broadcast microbenchmarks: where the persistent kernels' per-word exchange time goes.

    PYTHONPATH=. python3 measurements/exchange_ncu.py --out $OUT     # GPU: exchange_ncu.json

Runs itself under ``ncu --section WarpStateStats --section InstructionStats --section
SpeedOfLight`` with ``--worker``, which launches each selected kernel once: the Lamport and
barrier exchange-scan cases at 4096 and 32768 words (hidden 1024 / 8192, batch 4, density 0.002,
T = 16) and ``broadcast_fresh_4096`` / ``broadcast_fresh_16384`` at 16 rounds. A diagnosis record
(measurements/README.md, "Exchange scan"); nothing reads it automatically.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 16
CASES = ("exchange-h1024-b4-lamport", "exchange-h1024-b4-barrier", "exchange-h8192-b4-lamport",
         "exchange-h8192-b4-barrier")
MICRO = ("broadcast_fresh_4096", "broadcast_fresh_16384")
SECTIONS = ("WarpStateStats", "InstructionStats", "SpeedOfLight")


def worker(order_path: str) -> int:
    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from kernels_ir.kernels import microbench as mb
    from measurements.campaign import build_case, launch_jobs
    from measurements.exchange_scan import scan_cases

    spec = load_spec("h100")
    jobs = [(c["id"], build_case(c, STEPS, spec)) for c in scan_cases() if c["id"] in CASES]
    jobs += [(n, mb.build(n, 16)) for n in MICRO]
    launch_jobs(Runner(), jobs, order_path)
    return 0


def parse_raw_csv(text: str) -> list[dict]:
    """``ncu --csv --page raw``: a header of metric names, a row of units, one row per launch."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines()
                                                  if ln.startswith('"')))))
    if len(rows) < 3:
        return []
    head, units = rows[0], rows[1]
    out = []
    for r in rows[2:]:
        m = {}
        for k, u, v in zip(head, units, r, strict=False):
            try:
                m[k] = float(v.replace(",", ""))
            except ValueError:
                m[k] = v
            if u:
                m.setdefault("_units", {})[k] = u
        out.append({"kernel": m.get("Kernel Name"), "metrics": m})
    return out


def run_ncu(script: str, out: str, log_name: str, kernels: str, sections, metrics=(),
            flags=()) -> dict:
    """Run ``script --worker ORDER`` under ``ncu --csv --page raw`` (kernels matching the regex
    ``kernels``, these sections and metrics, extra ``flags``); the record: provenance, command,
    return code, and ``cases``: worker launch name -> that launch's metrics."""
    from measurements.campaign import provenance

    os.makedirs(out, exist_ok=True)
    order_path = os.path.join(out, "order.json")
    log = os.path.join(out, log_name)
    cmd = ["ncu", "--csv", "--page", "raw", "--clock-control", "none", *flags,
           "--kernel-name", kernels, "--log-file", log]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    for s in sections:
        cmd += ["--section", s]
    cmd += [sys.executable, script, "--worker", order_path]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=500,
                       env=dict(os.environ, PYTHONPATH=os.getcwd()))
    res = {"provenance": provenance(sys.argv), "command": " ".join(cmd),
           "returncode": p.returncode, "seconds": time.time() - t0,
           "stderr_tail": p.stderr[-3000:], "sections": list(sections)}
    if metrics:
        res["metrics"] = list(metrics)
    try:
        with open(log) as f:
            launches = parse_raw_csv(f.read())
        with open(order_path) as f:
            order = [x for x in json.load(f) if x is not None]
        res["cases"] = dict(zip(order, launches, strict=False))
    except (OSError, ValueError) as exc:
        res["error"] = str(exc)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--worker", metavar="ORDER_JSON")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    res = run_ncu(os.path.abspath(__file__), args.out, "exchange_ncu_raw.csv",
                  "regex:sparse_rnn|mb_broadcast", SECTIONS)
    res["steps"] = STEPS
    with open(os.path.join(args.out, "exchange_ncu.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(json.dumps({k: v for k, v in res.items() if k != "cases"}, default=float)[:2000])
    for name, rec in res.get("cases", {}).items():
        m = rec["metrics"]
        keys = [k for k in m if ("issue_stalled" in k and "per_issue_active" in k)
                or k in ("smsp__inst_executed.sum", "gpu__time_duration.sum",
                         "smsp__cycles_active.avg")]
        print(name, {k.replace("smsp__average_warps_issue_stalled_", "")
                     .replace("_per_issue_active.ratio", ""): m[k] for k in keys
                     if isinstance(m[k], float) and m[k] > 0.05})
    return 0


if __name__ == "__main__":
    sys.exit(main())
