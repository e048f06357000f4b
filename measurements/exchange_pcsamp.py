"""Per-instruction warp-stall sampling (Nsight Compute ``SourceCounters``) of the persistent
kernels: which SASS instruction the excess ``long_scoreboard`` stall of the exchange waits at.

    PYTHONPATH=. python3 measurements/exchange_pcsamp.py --out $OUT     # GPU: exchange_pcsamp.json

Runs itself under ``ncu --section SourceCounters --section WarpStateStats -o REPORT`` with
``--worker`` (each selected kernel launched once, T = 16), then exports the report's source page
(``ncu -i REPORT --page source --csv --print-source sass``): one row per SASS instruction with its
executed count and its stall samples by reason. The JSON keeps, per kernel, every instruction
with at least 0.2% of the kernel's samples, plus the totals by reason. The raw CSV pages are kept
beside it. A diagnosis record (measurements/README.md); nothing reads it automatically.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS = 16
SCAN = ("exchange-h1024-b4-lamport", "exchange-h8192-b4-lamport", "exchange-h8192-b4-barrier")
CAMPAIGN = ("sparse_persistent-h4096-b4-d0.02-lamport-wide-naive",
            "sparse_persistent-h4096-b4-d0.02-barrier-wide-naive")
MICRO = ("broadcast_fresh_16384",)
KEEP_FRACTION = 0.002


def jobs(spec):
    from gpusim.measurements import build_case
    from kernels_ir.kernels import microbench as mb
    from measurements.campaign import cases
    from measurements.exchange_scan import scan_cases

    out = [(c["id"], build_case(c, STEPS, spec)) for c in scan_cases() if c["id"] in SCAN]
    out += [(c["id"], build_case(c, STEPS, spec)) for c in cases() if c["id"] in CAMPAIGN]
    out += [(n, mb.build(n, 16)) for n in MICRO]
    return out


def worker(order_path: str) -> int:
    from gpusim.backends.cupy_backend import Runner
    from gpusim.specs import load_spec
    from measurements.campaign import launch_once

    spec, runner = load_spec("h100"), Runner()
    order = []
    for name, prog in jobs(spec):
        try:
            launch_once(runner, prog.kernel, prog.inputs)
            order.append(name)
        except Exception as exc:  # record and go on
            order.append(None)
            print(f"worker {name}: {exc}", file=sys.stderr)
        with open(order_path, "w") as f:
            json.dump(order, f)
    return 0


def _num(v: str):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return v


def parse_source_csv(text: str) -> list[dict]:
    """The source page of one kernel: rows of SASS instructions (column names as ncu prints
    them; numbers as floats)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 2:
        return []
    head = rows[0]
    return [{k: _num(v) for k, v in zip(head, r, strict=False)} for r in rows[1:]
            if len(r) == len(head)]


def summarize(rows: list[dict]) -> dict:
    """Totals by stall reason and the instructions that hold at least KEEP_FRACTION of the
    samples (column names containing 'Samples' / 'stall')."""
    if not rows:
        return {}
    sample_cols = [k for k in rows[0] if isinstance(rows[0][k], float)
                   and ("sampl" in k.lower() or "stall" in k.lower())]
    total_col = next((k for k in sample_cols if k.lower().startswith("warp stall sampling")
                      and "not" not in k.lower()), sample_cols[0] if sample_cols else None)
    totals = {k: sum(r[k] for r in rows if isinstance(r.get(k), float)) for k in sample_cols}
    grand = totals.get(total_col) or 1.0
    keep = []
    for i, r in enumerate(rows):
        v = r.get(total_col)
        if isinstance(v, float) and v >= KEEP_FRACTION * grand:
            keep.append({"index": i, **{k: r[k] for k in r
                                         if not isinstance(r[k], float) or r[k]}})
    return {"total_column": total_col, "totals": totals, "instructions": len(rows),
            "hot": keep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--worker", metavar="ORDER_JSON")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    from measurements.campaign import provenance

    os.makedirs(args.out, exist_ok=True)
    order_path = os.path.join(args.out, "order.json")
    rep = os.path.join(args.out, "pcsamp")
    cmd = ["ncu", "--clock-control", "none", "--kernel-name", "regex:sparse_rnn|mb_broadcast",
           "--section", "SourceCounters", "--section", "WarpStateStats", "--import-source", "no",
           "-f", "-o", rep, sys.executable, os.path.abspath(__file__), "--worker", order_path]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=420,
                       env=dict(os.environ, PYTHONPATH=os.getcwd()))
    res = {"provenance": provenance(sys.argv), "command": " ".join(cmd),
           "returncode": p.returncode, "seconds": time.time() - t0,
           "stderr_tail": p.stderr[-3000:], "stdout_tail": p.stdout[-2000:], "steps": STEPS,
           "kernels": {}}
    try:
        with open(order_path) as f:
            order = [x for x in json.load(f) if x is not None]
    except (OSError, ValueError) as exc:
        order, res["error"] = [], str(exc)
    for i, name in enumerate(order):
        q = subprocess.run(["ncu", "-i", rep + ".ncu-rep", "--page", "source", "--csv",
                            "--print-source", "sass", "--launch-skip", str(i), "--launch-count",
                            "1"], capture_output=True, text=True, timeout=120)
        raw = os.path.join(args.out, f"pcsamp_{name}.csv")
        with open(raw, "w") as f:
            f.write(q.stdout)
        rows = parse_source_csv(q.stdout)
        res["kernels"][name] = {"export_returncode": q.returncode,
                                "export_stderr": q.stderr[-1000:], **summarize(rows)}
    with open(os.path.join(args.out, "exchange_pcsamp.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(json.dumps({k: v for k, v in res.items() if k != "kernels"}, default=float)[:1500])
    for name, k in res["kernels"].items():
        print(f"== {name}: {k.get('instructions')} instructions, rc {k['export_returncode']} "
              f"{k['export_stderr'][:200]}")
        print("   totals", {a: b for a, b in k.get("totals", {}).items() if b})
        for h in sorted(k.get("hot", []), key=lambda h: -h.get(k["total_column"], 0))[:12]:
            print("   ", {a: b for a, b in h.items() if a in ("index", "Source", "Address")
                          or (isinstance(b, float) and b)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
