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
    from measurements.campaign import launch_jobs

    launch_jobs(Runner(), jobs(load_spec("h100")), order_path)
    return 0


def _num(v: str):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return v


def parse_source_csv(text: str) -> list[dict]:
    """The source page of one kernel: rows of SASS instructions (the header row starts with
    ``Address``; column names as ncu prints them; numbers as floats)."""
    rows = list(csv.reader(io.StringIO(text)))
    head_at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if head_at is None:
        return []
    head = rows[head_at]
    return [{k: _num(v) for k, v in zip(head, r, strict=False)} for r in rows[head_at + 1:]
            if len(r) == len(head)]


def summarize(rows: list[dict]) -> dict:
    """Totals by stall reason (``stall_*`` columns, all samples) and the instructions that hold
    at least KEEP_FRACTION of the kernel's samples, with their SASS text, executed count and
    non-zero stall columns."""
    total_col = "Warp Stall Sampling (All Samples)"
    if not rows or total_col not in rows[0]:
        return {}
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    totals = {k: sum(r[k] for r in rows if isinstance(r.get(k), float)) for k in reasons}
    grand = sum(r[total_col] for r in rows if isinstance(r.get(total_col), float)) or 1.0
    hot = [{"index": i, "sass": str(r["Source"]).strip(),
            "executed": r.get("Instructions Executed"), "samples": r[total_col],
            **{k: r[k] for k in reasons if isinstance(r.get(k), float) and r[k]}}
           for i, r in enumerate(rows)
           if isinstance(r.get(total_col), float) and r[total_col] >= KEEP_FRACTION * grand]
    return {"samples": grand, "instructions": len(rows),
            "executed": sum(r["Instructions Executed"] for r in rows
                            if isinstance(r.get("Instructions Executed"), float)),
            "stall_totals": {k: v for k, v in totals.items() if v}, "hot": hot}


def summarize_dir(out: str, order: list[str]) -> dict:
    """Summaries of the ``pcsamp_<case>.csv`` pages in ``out``."""
    res = {}
    for name in order:
        text = read_page(os.path.join(out, f"pcsamp_{name}.csv"))
        if text is not None:
            res[name] = summarize(parse_source_csv(text))
    return res


def read_page(path: str) -> str | None:
    """A recorded source page: ``path``, or its gzipped copy ``path + ".gz"`` (the recorded
    pages are kept gzipped; :func:`measurements.probe.open_record`); None where neither exists."""
    from measurements.probe import open_record, record_path

    if not os.path.exists(record_path(path)):
        return None
    with open_record(path) as f:
        return f.read()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--worker", metavar="ORDER_JSON")
    ap.add_argument("--summarize", metavar="DIR", help="rebuild DIR/exchange_pcsamp.json's "
                    "summaries from the CSV pages there")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if args.summarize:
        path = os.path.join(args.summarize, "exchange_pcsamp.json")
        with open(path) as f:
            res = json.load(f)
        for name, summ in summarize_dir(args.summarize, list(res["kernels"])).items():
            res["kernels"][name].update(summ)
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=float)
        return 0
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
        with open(os.path.join(args.out, f"pcsamp_{name}.csv"), "w") as f:
            f.write(q.stdout)
        res["kernels"][name] = {"export_returncode": q.returncode,
                                "export_stderr": q.stderr[-1000:]}
    for name, summ in summarize_dir(args.out, order).items():
        res["kernels"][name].update(summ)
    with open(os.path.join(args.out, "exchange_pcsamp.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(json.dumps({k: v for k, v in res.items() if k != "kernels"}, default=float)[:1500])
    for name, k in res["kernels"].items():
        print(f"== {name}: {k.get('instructions')} instructions, {k.get('samples')} samples")
        for h in sorted(k.get("hot", []), key=lambda h: -h["samples"])[:10]:
            print(f"   {h['index']:4d} {h['samples']:6.0f} {h['sass'][:60]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
