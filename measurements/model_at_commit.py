"""Price recorded draws with the analytical model of an earlier commit, so that a README's "the
model before, on the same layers" can be checked later from a record.

    python measurements/model_at_commit.py --commit REV --out FILE DRAW_DIR [DRAW_DIR ...]

The commit is checked out in a temporary ``git worktree`` and its own code prices, in a
subprocess: every RNN layer's speedup (``gpusim.speedup_check.check_speedups``, model engine
only, fp32 single-head RNN layers) and every RNN case of our kernels per step
(``gpusim.cli.crosscheck.predict_model``: the sparse and dense persistent kernels and the CSR
kernel). The record keeps the rows, their summary, the commit and the command. Nothing of
the simulator runs (its prices do not depend on the analytical model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# runs inside the old commit's checkout (its gpusim and models first on sys.path)
_WORKER = r"""
import json, sys, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
from gpusim.cli.crosscheck import predict_model
from gpusim.measurements import KERNEL_KINDS, build_case, case_layer_kind, load_campaign
from gpusim.specs import load_spec
from gpusim.speedup_check import check_speedups

out = {"speedup_rows": [], "cases": []}
for d in sys.argv[1:]:
    for r in check_speedups(d, engines=("model",))["rows"]:
        if "cell" in r or r.get("heads"):
            continue
        m = r["model"]
        out["speedup_rows"].append({"draw": r["draw"], "hidden": r["hidden"], "batch": r["batch"],
                                    "density": r["density"], "ape": m["ape"],
                                    "fastest_named": bool(m["fastest_named"]),
                                    "persistent_named": bool(m["persistent_named"]),
                                    "speedup": m["speedup"]})
    camp = load_campaign(d)
    spec = load_spec(camp.spec_name)
    for c in camp.cases:
        if c["kind"] not in KERNEL_KINDS or c.get("status") != "ok" or \
                case_layer_kind(c) != ("rnn", "fp32", 1):
            continue
        prog = build_case(c, 3, spec) if c["kind"] != "csr" else None
        m = predict_model(c, spec, prog)
        if m is None:
            continue
        out["cases"].append({"draw": Path(d).name, "id": c["id"], "model_s": m,
                             "measured_s": float(c["result"]["per_step_s"])})
json.dump(out, sys.stdout)
"""


def summary(rec: dict) -> dict:
    """Speedup MAPE, fastest and persistent variant named, and the per-step MAPE of the
    record's rows."""
    rows, cases = rec["speedup_rows"], rec["cases"]
    apes = [r["ape"] for r in rows if r["ape"] is not None]
    step = [abs(c["model_s"] / c["measured_s"] - 1) for c in cases]
    return {"layers": len(apes), "speedup_mape": sum(apes) / len(apes),
            "fastest_named": sum(r["fastest_named"] for r in rows if r["ape"] is not None),
            "persistent_named": sum(r["persistent_named"] for r in rows if r["ape"] is not None),
            "cases": len(step), "per_step_mape": sum(step) / len(step)}


def price(commit: str, draws: list[str]) -> dict:
    """The record of ``draws`` priced by the model at ``commit`` (a temporary worktree)."""
    full = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        wt = os.path.join(tmp, "tree")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", wt, full],
                       check=True)
        try:
            env = {**os.environ, "PYTHONPATH": wt}
            res = subprocess.run([sys.executable, "-c", _WORKER,
                                  *[str(Path(d).resolve()) for d in draws]],
                                 cwd=wt, env=env, check=True, capture_output=True, text=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", wt],
                           check=True)
    rec = json.loads(res.stdout)
    rec["draws"] = [Path(d).name for d in draws]
    rec["commit"] = full
    rec["summary"] = summary(rec)
    return rec


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commit", required=True, help="the earlier commit whose model prices")
    ap.add_argument("--out", required=True, help="the record to write (JSON)")
    ap.add_argument("draws", nargs="+", help="draw folders (fresh_<date>_s<seed>)")
    args = ap.parse_args(argv)
    rec = price(args.commit, args.draws)
    rec["command"] = ("python measurements/model_at_commit.py --commit "
                      f"{args.commit} --out {args.out} " + " ".join(args.draws))
    Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
