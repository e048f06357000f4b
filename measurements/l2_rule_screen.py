"""Which L2 contention-group rule fits the H200's L2 microbenchmarks: candidate rules simulated
over the recorded lockstep-load probes, no campaign case involved.

    python measurements/l2_rule_screen.py --out measurements/h200/l2_rule_screen.json

The probes (all measured on the H200, their lines known): the 20 four-warp runs of
``l2_group_rate.json.xz`` (:data:`measurements.l2_group_rate.SIM_RUNS`), the 24 hammered sets of
``l2_slice_map.json``, the 18 queues runs of ``l2_slice_queues.json`` and the 10 sweeps of
``l2_sweep_share.json``. The candidates, each a set of H200 spec values and a form of
:func:`gpusim.specs.rules.group_request_cost`:

- ``before``: the rule before 2026-12-01, the span's factor on every line, and the H100's per-SM
  request cost (1.47 cycles);
- ``request``: the same rule, with the H200's own per-SM cost (1.00, ``l2_group_rate.json.xz``);
- ``flat``: one rate for every request, 0.57 cycles (the spread runs' value), no sharers, no span;
- ``so_far``: the span's factor in proportion to the line's fraction of sharing, 1.00 a request,
  a line's sharers every SM that has loaded it so far (the rule of 2026-12-01 until the sweeps);
- ``window_512``, ``window_2048``: the same, the sharers those of the request's window of 512 or
  2048 cycles and the one before (``l2_group_share_window_cycles``);
- ``today``: the same with the H200 spec's window (1024 cycles).

``--only rate,map`` screens some families only (a quicker look; the record holds all).

Prints every probe's error under each and the mean absolute errors by probe family; writes them.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CANDIDATES = {
    "before": {"l2_request_cycles_per_sm": 1.47, "_span_on_every_line": True,
               "l2_group_share_window_cycles": 0.0},
    "request": {"_span_on_every_line": True, "l2_group_share_window_cycles": 0.0},
    "flat": {"l2_group_request_cycles": 0.57, "l2_group_private_request_cycles": 0.0,
             "l2_group_span_per_doubling": 0.0},
    "so_far": {"l2_group_share_window_cycles": 0.0},
    "window_512": {"l2_group_share_window_cycles": 512.0},
    "window_2048": {"l2_group_share_window_cycles": 2048.0},
    "today": {},
}


def span_on_every_line(spec, sharers, q):
    """The rule before 2026-12-01: the sharers' rate times ``1 + a log2(q)`` for every line."""
    import numpy as np

    from gpusim.specs.rules import group_request_cost

    base = group_request_cost(spec, sharers, 1)
    return base * (1.0 + float(spec.l2_group_span_per_doubling)
                   * np.log2(np.maximum(np.asarray(q, dtype=np.float64), 1.0)))


def candidate_spec(name: str):
    """The H200's spec with the candidate's values; installs the candidate's rule in the engine."""
    import gpusim.engine.l2 as l2
    from gpusim.specs import load_spec, rules

    spec = copy.copy(load_spec("h200"))
    values = dict(CANDIDATES[name])
    l2.group_request_cost = (span_on_every_line if values.pop("_span_on_every_line", False)
                             else rules.group_request_cost)
    for k, v in values.items():
        object.__setattr__(spec, k, v)
    return spec


def probes() -> list:
    """``(key, GPU cycles)`` of every probe: ``rate:`` runs, ``map:`` sets, ``que:`` runs."""
    import numpy as np

    from measurements import l2_group_rate as gr
    from measurements.probe import read_record

    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h200")
    rec = read_record(os.path.join(h, "l2_group_rate.json"))
    runs = {**rec["runs"], **rec["rate4_runs"]}
    out = []
    for n in gr.SIM_RUNS:
        r = runs[n]
        out.append((f"rate:{n}", float(np.median(r.get("cycles_per_load_per_sm")
                                                 or r["cycles_per_round_per_sm"]))))
    smap = read_record(os.path.join(h, "l2_slice_map.json"))["hammer"]
    out += [(f"map:{k}", float(np.median(v["cycles_per_load_per_sm"]))) for k, v in smap.items()]
    que = read_record(os.path.join(h, "l2_slice_queues.json"))["runs"]
    out += [(f"que:{k}", float(np.median(v["cycles_per_load_per_sm"]))) for k, v in que.items()]
    sw = read_record(os.path.join(h, "l2_sweep_share.json"))["runs"]
    out += [(f"sweep:{k}", float(np.median(v["cycles_per_round_per_sm"]))) for k, v in sw.items()]
    return out


def simulate_probe(key: str, spec) -> float:
    """The simulator's cycles of probe ``key`` on ``spec`` (in the record's unit)."""
    import numpy as np

    from measurements import l2_group_rate as gr
    from measurements.l2_slice_map import QUEUE_CTAS, _load_map, simulated_hammer
    from measurements.probe import read_record

    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h200")
    src, name = key.split(":", 1)
    if src == "rate":
        rec = read_record(os.path.join(h, "l2_group_rate.json"))
        run = {**rec["runs"], **rec["rate4_runs"]}[name]
        groups = np.asarray(_load_map(rec["provenance"]["group_map"]))
        return gr.simulated(spec, run, gr.checked_lines(gr.all_sets(groups)[name], run, name))
    if src == "map":
        return simulated_hammer(spec, read_record(os.path.join(h, "l2_slice_map.json"))
                                ["hammer"][name]["lines"])
    if src == "sweep":
        from measurements.l2_sweep_share import simulated
        r = read_record(os.path.join(h, "l2_sweep_share.json"))["runs"][name]
        return simulated(spec, r["k"], r["sector"], r["word"])
    r = read_record(os.path.join(h, "l2_slice_queues.json"))["runs"][name]
    return simulated_hammer(spec, r["sets"], QUEUE_CTAS, r.get("warps", 4))


def _job(args):
    key, cand = args
    return key, cand, simulate_probe(key, candidate_spec(cand))


def screen(jobs: int = 2, only: tuple = ()) -> dict:
    from concurrent.futures import ProcessPoolExecutor

    import numpy as np

    items = [p for p in probes() if not only or p[0].split(":")[0] in only]
    gpu = dict(items)
    sim: dict = {}
    with ProcessPoolExecutor(jobs) as ex:
        for key, cand, cyc in ex.map(_job, [(k, c) for k, _ in items for c in CANDIDATES]):
            sim.setdefault(key, {})[cand] = round(float(cyc), 2)
    summary = {}
    for fam in ("rate", "map", "que", "sweep", "all"):
        keys = [k for k, _ in items if fam == "all" or k.startswith(fam + ":")]
        if not keys:
            continue
        summary[fam] = {"probes": len(keys),
                        **{c: round(float(np.mean([abs(sim[k][c] / gpu[k] - 1) for k in keys])), 4)
                           for c in CANDIDATES}}
    return {"format_version": 1, "gpu": "h200", "candidates": CANDIDATES, "measured": gpu,
            "simulated": sim, "summary": summary,
            "command": "python measurements/l2_rule_screen.py --out "
                       "measurements/h200/l2_rule_screen.json"}


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the record to write (JSON)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="probe families to screen (comma-separated "
                                                "prefixes: rate,map,que,sweep; default all)")
    a = ap.parse_args(argv)
    rec = screen(a.jobs, tuple(x for x in a.only.split(",") if x))
    for key, g in rec["measured"].items():
        print(f"{key:26s} GPU {g:8.1f}  " + "  ".join(
            f"{c} {100 * (rec['simulated'][key][c] / g - 1):+4.0f}%" for c in CANDIDATES))
    for fam, s in rec["summary"].items():
        print(f"{fam:4s} {s['probes']:3d} probes: " + "  ".join(
            f"{c} {100 * s[c]:.1f}%" for c in CANDIDATES))
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
