"""Fit a GPU spec's uncertain values (types I/M) to recorded microbenchmarks.

    python -m gpusim.calibrate [--data measurements/h100] [--spec h100] [--write]

Only microbenchmarks are used (``microbench.json``), never the campaign cases, so that the
cross-check against the campaign stays an independent test. For each fitted parameter the
matching microbenchmark (written in the IR, :mod:`kernels_ir.kernels.microbench`) is simulated at
two small sizes with the parameter set to ``p``; the simulated cost per operation (slope of the
cycles, which cancels fill and launch) is matched to the measured cost per operation times the
clock by ``scipy.optimize.root_scalar`` (brentq over a plausible bracket). Fitted:

============================== ================= =========================================
parameter                      microbenchmark    simulated at
============================== ================= =========================================
clock_hz                       nvidia-smi SM clock samples taken during the run (median)
smem_latency_cycles            smem_latency      rounds 2 / 4 (chain 32)
l2_hit_latency_cycles          l2_latency        16 lines, rounds 2 / 4 (the first lap is
                                                 cold in both sizes, so the slope is hits)
l2_atomic_same_address_cycles  atomic_same       per_warp 2 / 4 (132 CTAs x 8 warps)
fence_latency_cycles           grid_barrier      rounds 4 / 8 (132 CTAs)
l2_store_visibility_cycles     store_visibility  rounds 4 / 8 (one warp: its load of its own
                                                 pending store is served when it is visible)
graph_launch_overhead_s        graph_node        library_profile.json (not microbench.json):
                                                 per-node time of a CUDA graph of 1000 vs 100
                                                 one-element adds, minus the simulated
                                                 duration of that kernel (one CTA, one load,
                                                 add, store, L2 warm)
============================== ================= =========================================

The grid barrier is fitted through ``fence_latency_cycles`` (the ``__threadfence()`` before the
arrive), not ``l2_atomic_latency_cycles``: fitting the barrier with the atomic latency alone needs
about 1900 cycles, which then makes the same-address atomic benchmark impossible to match (its
warps would be latency bound); with the fence the two benchmarks fit together and the atomic
latency keeps its literature value (about 300 cycles).

``flag_round_trip`` (two SMs and ``_same_sm``) and the full-grid ``poll_storm`` family (relaxed
polls of one vector; relaxed and plain loads over 32 vectors) are not fitted: they are reported
as held-out checks (predicted vs measured after
the fit). ``--write`` rewrites the parameters' lines in ``gpusim/specs/<spec>.toml`` as type
``"C"`` with ``calibration = "<data>/microbench.json"`` and a source naming the measurement; the
result of every run is also written to ``<data>/calibration.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

from kernels_ir.errors import InputError

ROOT = Path(__file__).resolve().parents[1]

# parameter -> (microbenchmark, sizes for the simulation, extra builder arguments, bracket)
FITS = {
    "smem_latency_cycles": ("smem_latency", (2, 4), {}, (5, 200)),
    "l2_hit_latency_cycles": ("l2_latency", (2, 4), {"lines": 16}, (20, 2000)),
    "l2_atomic_same_address_cycles": ("atomic_same", (2, 4), {}, (0.1, 100)),
    "fence_latency_cycles": ("grid_barrier", (4, 8), {}, (0, 8000)),
    "l2_store_visibility_cycles": ("store_visibility", (4, 8), {}, (0, 2000)),
}
HELD_OUT = {"flag_round_trip": ((4, 8), {}), "flag_round_trip_same_sm": ((4, 8), {}),
            "poll_storm": ((2, 4), {}), "poll_storm_rot": ((32, 64), {}),
            "poll_storm_plain": ((32, 64), {})}


def simulated_cycles_per_op(spec, bench: str, sizes, kwargs) -> float:
    from gpusim.engine import simulate
    from kernels_ir.kernels import microbench as mb

    pts = []
    for s in sizes:
        m = mb.build(bench, s, **kwargs)
        pts.append((m.ops, simulate(m.kernel, m.inputs, spec).cycles))
    (o1, c1), (o2, c2) = pts
    return (c2 - c1) / (o2 - o1)


def fit(spec, micro: dict, clock_hz: float) -> dict:
    """Fitted values (and the evidence) for every parameter in :data:`FITS` that was measured."""
    from scipy.optimize import root_scalar

    out = {}
    spec = dataclasses.replace(spec, clock_hz=clock_hz)
    for param, (bench, sizes, kw, (lo, hi)) in FITS.items():
        if bench not in micro:
            continue
        target = micro[bench]["per_op_s"] * clock_hz
        kind = type(getattr(spec, param))

        def err(p, param=param, bench=bench, sizes=sizes, kw=kw, base=spec, kind=kind,
                target=target):
            s = dataclasses.replace(base, **{param: float(p) if kind is float else
                                             max(1, int(round(p)))})
            return simulated_cycles_per_op(s, bench, sizes, kw) - target

        p0 = float(getattr(spec, param))
        try:  # bracketing (brentq) over the plausible range: the cost can be flat in places
            sol = root_scalar(err, bracket=(lo, hi), method="brentq", xtol=0.05, maxiter=40)
            value, converged = sol.root, bool(sol.converged)
        except ValueError:  # no sign change over the range: keep the closer end
            value = lo if abs(err(lo)) < abs(err(hi)) else hi
            converged = False
        value = round(value, 2) if kind is float else int(round(value))
        resid = err(value)
        out[param] = {"value": value, "previous": p0, "benchmark": bench,
                      "measured_per_op_s": micro[bench]["per_op_s"],
                      "measured_cycles": target, "residual_cycles": resid,
                      "converged": converged}
        spec = dataclasses.replace(spec, **{param: value})
    held = {}
    for bench, (sizes, kw) in HELD_OUT.items():
        if bench in micro:
            pred = simulated_cycles_per_op(spec, bench, sizes, kw) / clock_hz
            meas = micro[bench]["per_op_s"]
            held[bench] = {"predicted_s": pred, "measured_s": meas,
                           "ape": abs(pred - meas) / meas}
    return {"clock_hz": clock_hz, "params": out, "held_out": held}


def node_kernel():
    """The kernel of a graph node in ``library_profile.json``'s ``graph_node``: one element,
    ``x += 1`` (one CTA; lane 0 loads, adds and stores)."""
    from kernels_ir import F32, Builder, verify

    b = Builder("graph_node", grid=1, block=32)
    x = b.global_buffer("x", F32, 4, role="inout")
    lane = b.sreg("lane")
    with b.if_(b.isetp("eq", lane, 0)):
        v = b.ldg(x, 0)
        b.stg(x, 0, b.fadd(v, 1.0))
    return verify(b.build())


def fit_graph_node(spec, profile: dict, clock_hz: float) -> dict | None:
    """``graph_launch_overhead_s`` from the recorded per-node time of a CUDA graph: what the
    node costs beyond the simulated execution of its kernel."""
    import numpy as np

    from gpusim.engine import simulate

    node = (profile.get("graph_node") or {}).get("per_node_s")
    if not node:
        return None
    spec = dataclasses.replace(spec, clock_hz=clock_hz)
    res = simulate(node_kernel(), {"x": np.zeros(4, np.float32)}, spec, l2_warm=True)
    value = float(node) - res.cycles / clock_hz
    if not value > 0:
        raise InputError(f"graph_node per_node_s={node} is shorter than the simulated kernel "
                         f"({res.cycles / clock_hz:.3g} s)")
    return {"value": float(f"{value:.4g}"), "previous": spec.graph_launch_overhead_s,
            "benchmark": "graph_node", "measured_per_node_s": float(node),
            "simulated_kernel_s": res.cycles / clock_hz}


def write_spec(spec_path: Path, result: dict, record: str) -> None:
    """Rewrite the fitted parameters' lines as type C with their calibration record."""
    text = spec_path.read_text()
    entries = dict(result["params"])
    entries["clock_hz"] = {"value": result["clock_hz"], "benchmark": "nvidia-smi clocks.sm "
                           "samples during the campaign (median)"}
    for param, e in entries.items():
        m = re.search(rf'^{param} = \{{ value = [^,]+, unit = "([^"]+)".*$', text, re.M)
        if not m:
            raise InputError(f"{spec_path}: no line for parameter {param!r}")
        unit = m.group(1)
        if "measured_per_op_s" in e:
            src = (f"fitted by gpusim.calibrate to microbenchmark {e['benchmark']} "
                   f"({e['measured_per_op_s'] * 1e9:.2f} ns/op measured); was {e['previous']}")
        elif "measured_per_node_s" in e:
            src = (f"gpusim.calibrate: CUDA-graph node {e['measured_per_node_s'] * 1e9:.0f} ns "
                   f"measured ({e['benchmark']}) minus {e['simulated_kernel_s'] * 1e9:.0f} ns "
                   f"simulated for its kernel; was {e['previous']}")
        else:
            src = f"{e['benchmark']}"
        line = (f'{param} = {{ value = {e["value"]}, unit = "{unit}", type = "C", '
                f'source = "{src}", calibration = "{e.get("record", record)}" }}')
        text = text[:m.start()] + line + text[m.end():]
    spec_path.write_text(text)


def _record(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    from gpusim.measurements import load_json
    from gpusim.specs import load_spec, spec_path

    ap = argparse.ArgumentParser(prog="python -m gpusim.calibrate", description=__doc__.split(
        "\n\n")[0].strip())
    ap.add_argument("--data", default=str(ROOT / "measurements" / "h100"))
    ap.add_argument("--spec", default="h100")
    ap.add_argument("--write", action="store_true", help="write the fitted values into the spec")
    args = ap.parse_args(argv)
    try:
        mpath = Path(args.data) / "microbench.json"
        m = load_json(mpath)
        micro = {k: v for k, v in m.get("results", {}).items() if v.get("status") == "ok"}
        samples = m.get("provenance", {}).get("sm_clock_mhz_samples") or []
        spec = load_spec(args.spec)
        busy = sorted(s for s in samples if s > 0)
        clock = busy[len(busy) // 2] * 1e6 if busy else spec.clock_hz
        res = fit(spec, micro, clock)
        record = _record(mpath)
        res["record"] = record
        ppath = Path(args.data) / "library_profile.json"
        if ppath.is_file():
            g = fit_graph_node(spec, load_json(ppath), clock)
            if g is not None:
                g["record"] = _record(ppath)
                res["params"]["graph_launch_overhead_s"] = g
        (Path(args.data) / "calibration.json").write_text(json.dumps(res, indent=1) + "\n")
        if args.write:
            write_spec(spec_path(args.spec), res, record)
            load_spec(args.spec)  # the rewritten file must still validate
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"clock_hz = {res['clock_hz']:.4g}")
    for p, e in res["params"].items():
        resid = (f", residual {e['residual_cycles']:+.2f} cycles" if "residual_cycles" in e
                 else "")
        print(f"{p:32s} {e['previous']:>8} -> {e['value']:>8}  ({e['benchmark']}{resid})")
    for b, e in res["held_out"].items():
        print(f"held out {b}: predicted {e['predicted_s'] * 1e9:.0f} ns, measured "
              f"{e['measured_s'] * 1e9:.0f} ns ({100 * e['ape']:.0f}% off)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
