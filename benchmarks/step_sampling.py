"""How many simulated steps a persistent kernel's per-step time needs: the steps' scatter.

Usage: ``python benchmarks/step_sampling.py measurements/h200/fresh_2026-11-29_s56
[--steps 16] [--jobs 2] [--out FILE.json]``. Every fp32 RNN persistent case of one recorded draw
(sparse Lamport, sparse barrier, dense) is simulated for ``--steps`` steps, all of them, on the
spec of the recorded GPU, values checked. Printed per family, against the measured per-step times
(each the mean of 96 GPU steps): the error of the steady state of the first 3 and 4 steps (what
the simulator used to price a kernel with), of all ``--steps``, and of what
:func:`gpusim.pricing.steps_needed` would pick from the first 3; the steps' scatter (coefficient of
variation of steps 3 on) and the wall time. Not a test: it costs minutes, and its answer is a
figure for ``benchmarks/step_sampling.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _family(case_id: str) -> str:
    if case_id.startswith("dense"):
        return "dense"
    return "lamport" if "-lamport-" in case_id else "barrier"


def _one(args) -> dict:
    case, steps, spec_name = args
    from gpusim.measurements import build_case
    from gpusim.pricing import price_program
    from gpusim.specs import load_spec

    spec = load_spec(spec_name)
    t = time.time()
    p = price_program(build_case(case, steps, spec), spec, what=case["id"])
    return {"id": case["id"], "family": _family(case["id"]),
            "measured_s": case["result"]["per_step_s"],
            "step_cycles": [float(c) for c in p.result.step_cycles],
            "warp_instructions": int(p.result.warp_instructions),
            "s_per_cycle": spec.cycles_to_s(1.0), "wall_s": time.time() - t}


def analyse(rows: list) -> dict:
    """Per family: MAPE and mean signed error of each estimator, median scatter, wall time."""
    from gpusim.engine.timing import steady_step_cycles
    from gpusim.pricing import steps_needed

    out = {}
    for fam in ("lamport", "barrier", "dense"):
        sel = [r for r in rows if r["family"] == fam]
        if not sel:
            continue
        est = {"first 3": [], "first 4": [], "all": [], "policy": []}
        cv = []
        for r in sel:
            sc = np.asarray(r["step_cycles"])
            per_step = r["warp_instructions"] / len(sc)
            want = steps_needed(sc[:3], int(per_step * 3))
            for k, cyc in (("first 3", steady_step_cycles(sc[:3])),
                           ("first 4", steady_step_cycles(sc[:4])),
                           ("all", steady_step_cycles(sc)),
                           ("policy", steady_step_cycles(sc[:want]))):
                est[k].append(cyc * r["s_per_cycle"] / r["measured_s"] - 1.0)
            cv.append(float(sc[2:].std() / sc[2:].mean()))
        out[fam] = {"cases": len(sel),
                    **{k: {"mape": float(np.mean(np.abs(v))), "signed": float(np.mean(v))}
                       for k, v in est.items()},
                    "scatter_median": float(np.median(cv)),
                    "wall_s": float(sum(r["wall_s"] for r in sel))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("draw", help="a recorded draw's folder (campaign.json.gz)")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", help="write the per-case step cycles and the summary (JSON)")
    a = ap.parse_args(argv)
    from gpusim.measurements import case_layer_kind, load_campaign

    camp = load_campaign(a.draw)
    gpu = camp.provenance["gpu_name"]
    cases = [c for c in camp.ok_cases if c["kind"] in ("sparse_persistent", "dense_persistent")
             and case_layer_kind(c) == ("rnn", "fp32", 1)]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(_one, [(c, a.steps, camp.spec_name) for c in cases]))
    summary = analyse(rows)
    print(f"{a.draw}: {len(rows)} cases, {a.steps} steps each, {gpu}")
    print(f"{'family':8s} {'cases':>5s} " + " ".join(f"{k:>16s}" for k in
                                                   ("first 3", "first 4", "all", "policy"))
          + "  scatter  wall s")
    for fam, s in summary.items():
        print(f"{fam:8s} {s['cases']:5d} " + " ".join(
            f"{100 * s[k]['mape']:7.1f}% {100 * s[k]['signed']:+6.1f}%"
            for k in ("first 3", "first 4", "all", "policy"))
            + f"  {s['scatter_median']:6.2f}  {s['wall_s']:6.0f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"draw": a.draw, "steps": a.steps, "gpu": gpu,
                                           "summary": summary, "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
