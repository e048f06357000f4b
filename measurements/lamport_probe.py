"""Lamport exchange probes (H1 phase wait, H2 shared sectors): one device call, or the simulator.

    PYTHONPATH=. python3 measurements/lamport_probe.py --out $OUT      # GPU (writes the JSON)
    python measurements/lamport_probe.py --simulate measurements/h100/lamport_probe.json

Times the ``lamport_*`` microbenchmarks of :mod:`kernels_ir.kernels.microbench`
(:func:`~kernels_ir.kernels.microbench.lamport_exchange`) at two sizes (rounds), per round =
slope of the medians, plus ``flag_round_trip`` / ``flag_round_trip_delay16`` as references.
``--simulate FILE`` adds the same benchmarks simulated with the h100 spec (same sizes) to FILE.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NAMES = ("lamport_one", "lamport_one_delay16", "lamport_interleaved",
         "lamport_interleaved_delay16", "lamport_contiguous", "lamport_contiguous_delay16",
         "flag_round_trip", "flag_round_trip_delay16")
SIZES = {n: (16, 64) for n in NAMES}
SIZES["flag_round_trip"] = SIZES["flag_round_trip_delay16"] = (64, 256)


def measure(out: str, argv: list) -> dict:
    from gpusim.backends.cupy_backend import Runner
    from measurements.campaign import provenance
    from measurements.probe import time_microbench

    runner = Runner()
    res = {"provenance": provenance(argv), "results": {}}
    for name in NAMES:
        res["results"][name] = time_microbench(runner, name, SIZES[name], repeats=15, warmup=3)
    with open(os.path.join(out, "lamport_probe.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    return res


def simulate_into(path: str) -> None:
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir.kernels import microbench as mb

    with open(path) as f:
        data = json.load(f)
    spec = load_spec("h100")
    sim = {"spec": "h100", "clock_hz": spec.clock_hz, "results": {}}
    for name in NAMES:
        pts = []
        for s in SIZES[name]:
            m = mb.build(name, s)
            pts.append((m.ops, simulate(m.kernel, m.inputs, spec).cycles))
        (o1, c1), (o2, c2) = pts
        cyc = (c2 - c1) / (o2 - o1)
        meas = data["results"].get(name, {}).get("per_op_s")
        cycles = {str(s): c for s, (_, c) in zip(SIZES[name], pts, strict=True)}
        sim["results"][name] = {"cycles": cycles,
                                "per_op_cycles": cyc, "per_op_s": cyc / spec.clock_hz,
                                "measured_per_op_s": meas}
        print(f"{name:30s} sim {cyc / spec.clock_hz * 1e9:8.1f} ns  measured "
              f"{meas * 1e9 if meas else float('nan'):8.1f} ns", flush=True)
    data["simulated"] = sim
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=float)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/lamport_probe.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
