"""The L2-sensitive microbenchmarks, recorded GPU against the simulator, under today's spec or
with spec fields overridden: the check every change to the engine's L2 must pass before any
campaign case is looked at.

    python measurements/l2_check.py                                   # today's h100 spec
    python measurements/l2_check.py --set l2_bytes_per_cycle_per_slice=48 --jobs 2
    python measurements/l2_check.py --only lmech_ws_1,l2_stream --json out.json

Every value is a record's (no GPU needed): the ``lmech_*`` exchange probes
(``h100/lamport_mech.json``, ``lamport_free.json``, ``lamport_rot.json``: the GPU value is the
mean of a record's two passes, each record listed where several measured one benchmark), the
private stream (``l2_stream.json``) and the all-SM gathers (``gather.json``, ``csr_mech.json``).
The simulator runs each exactly as the record's own ``--simulate`` does. ``--set`` takes any
numeric field of the spec (``gpusim/specs/h100.toml``), so a candidate value is judged on every
benchmark at once; the printed table has the ratio simulator / GPU per benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "h100")
LAMPORT_RECORDS = ("lamport_mech.json", "lamport_free.json", "lamport_rot.json")
PER_SM = {"gather": ("gather_l2_8", "gather_l2_32"),
          "csr_mech": ("cmech_miss_same_32", "cmech_miss_rand_32")}
# the default set: each family's L2-bound members and its controls
DEFAULT = ("l2_stream", "gather_l2_8", "gather_l2_32", "cmech_miss_same_32", "cmech_miss_rand_32",
           "lmech_xq_9216", "lmech_xq_9216_rot", "lmech_xq_32768", "lmech_xq_32768_rot",
           "lmech_xp_4096", "lmech_xp_9216", "lmech_xp_32768",
           "lmech_x_1024", "lmech_x_4096", "lmech_x_9216", "lmech_x_9216_rot", "lmech_x_32768",
           "lmech_x_32768_rot", "lmech_xb_1024", "lmech_xb_4096", "lmech_xb_9216",
           "lmech_xb_9216_rot", "lmech_xb_32768", "lmech_xb_32768_rot",
           "lmech_ws_1", "lmech_ws_8", "lmech_pollers_1", "lmech_readers_16",
           "lmech_readers_132", "lmech_watch_131_w8", "flag_round_trip")


def _load(name: str) -> dict:
    from measurements.probe import read_record

    return read_record(os.path.join(HERE, name))


def measured() -> dict[str, list[float]]:
    """GPU seconds per op of every benchmark this check knows, one value per record."""
    out: dict[str, list[float]] = {}
    for rec_name in LAMPORT_RECORDS:
        for name, r in _load(rec_name)["results"].items():
            if r.get("status") != "ok":
                continue
            passes = r.get("per_op_s_passes") or [r["per_op_s"]]
            out.setdefault(name, []).append(sum(passes) / len(passes))
    out["l2_stream"] = [_load("l2_stream.json")["per_round_s"]]
    for rec_name, names in PER_SM.items():
        res = _load(f"{rec_name}.json")["results"]
        for n in names:
            out[n] = [res[n]["per_sm_cycles"]]   # cycles per warp load per SM
    return out


def simulated(spec, name: str) -> float:
    """The simulator's value of benchmark ``name`` in the unit of its record."""
    if name == "l2_stream":
        from measurements.l2_stream import _simulated
        return _simulated(spec, {})["per_round_s"]
    if name.startswith(("gather_", "cmech_")):
        from gpusim.calibrate import simulated_cycles_per_op
        from measurements.csr_mech import SIM_SIZES
        return simulated_cycles_per_op(spec, name, SIM_SIZES, {}) * spec.sm_count
    from measurements.lamport_mech import ENTRIES, simulate_bench
    if name not in ENTRIES:
        raise SystemExit(f"{name}: not a benchmark this check knows")
    return simulate_bench(spec, name, ENTRIES[name][2])["per_op_s"]


def _spec(overrides: dict):
    from gpusim.specs import load_spec
    spec = load_spec("h100")
    return dataclasses.replace(spec, **overrides) if overrides else spec


def _one(args):
    name, overrides = args
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        return name, simulated(_spec(overrides), name)


def _parse_set(items) -> dict:
    from gpusim.specs import load_spec
    spec = load_spec("h100")
    out = {}
    for item in items or ():
        key, _, val = item.partition("=")
        cur = getattr(spec, key, None)
        if not _ or isinstance(cur, bool) or not isinstance(cur, (int, float)):
            raise SystemExit(f"--set {item!r}: accepted KEY=NUMBER with KEY a numeric field of "
                             f"the h100 spec")
        try:
            out[key] = type(cur)(float(val)) if isinstance(cur, int) else float(val)
        except ValueError:
            raise SystemExit(f"--set {item!r}: {val!r} is not a number") from None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="spec field override")
    ap.add_argument("--only", help="comma-separated benchmarks (default: the L2 set)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    a = ap.parse_args(argv)
    overrides = _parse_set(a.set)
    names = a.only.split(",") if a.only else list(DEFAULT)
    gpu = measured()
    unknown = [n for n in names if n not in gpu]
    if unknown:
        raise SystemExit(f"no GPU record of {', '.join(unknown)}")
    jobs = [(n, overrides) for n in names]
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            sims = dict(ex.map(_one, jobs))
    else:
        sims = dict(map(_one, jobs))
    rows = []
    print(f"spec h100{' with ' + str(overrides) if overrides else ''}")
    print(f"{'benchmark':24s} {'GPU (each record)':>26s} {'simulator':>10s}  sim/GPU")
    for n in names:
        g = gpu[n]
        mean = sum(g) / len(g)
        scale, unit = (1.0, "cyc") if n.startswith(("gather_", "cmech_")) else (1e9, "ns")
        ratio = sims[n] / mean
        rows.append({"benchmark": n, "gpu": g, "sim": sims[n], "ratio": ratio})
        gtxt = " / ".join(f"{x * scale:.0f}" for x in g)
        print(f"{n:24s} {gtxt:>22s} {unit:>3s} {sims[n] * scale:10.0f}  {ratio:6.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"overrides": overrides, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
