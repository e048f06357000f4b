"""The h exchange alone: per-step time of the persistent kernels at a density where the mat-vec
is nearly empty, against the size of h (hidden x batch words), on the GPU or in the simulator.

    PYTHONPATH=. python3 measurements/exchange_scan.py --out $OUT        # GPU -> exchange_scan.json
    python measurements/exchange_scan.py --simulate measurements/h100/exchange_scan.json

A diagnosis record for the Lamport under-prediction (measurements/README.md): if the gap between
measured and simulated step grows with the words exchanged, the missing cost is per chunk
polled; if it is flat, it is a fixed latency per step. Cases: hidden 256..8192 at batch 4 (and
hidden 1024 at batch 1/2/8), density 0.002, Lamport and barrier, wide loads, naive layout.
Not part of the cross-check (``gpusim crosscheck`` reads ``campaign.json`` only).

``micro``: the :func:`kernels_ir.kernels.microbench.broadcast` microbenchmarks (fresh vs
unchanged data, 4096 and 16384 words; at 32768 words plain, with the kernel's STS staging and
with only its shared carve-out; rounds 16 and 64, per round = slope), with
``grid_barrier`` as the reference; ``--simulate`` adds their simulated cost per round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DENSITY = 0.002
LAYERS = [(256, 4), (512, 4), (1024, 4), (2048, 4), (4096, 4), (8192, 4), (1024, 1),
          (1024, 2), (1024, 8)]
SYNCS = ("lamport", "barrier")
MICRO = ("broadcast_fresh_4096", "broadcast_same_4096", "broadcast_fresh_16384",
         "broadcast_same_16384", "broadcast_fresh_32768", "broadcast_fresh_32768_sts",
         "broadcast_fresh_32768_smem", "grid_barrier")
MICRO_SIZES = (16, 64)


def scan_cases() -> list[dict]:
    return [{"kind": "sparse_persistent", "hidden": n, "batch": b, "density": DENSITY,
             "sync": s, "wide_loads": True, "layout": "naive", "seed": 7000 + i,
             "id": f"exchange-h{n}-b{b}-{s}"}
            for i, (n, b) in enumerate(LAYERS) for s in SYNCS]


def measure(out: str) -> None:
    from gpusim.backends.cupy_backend import Runner, run_microbench, run_program
    from gpusim.measurements import kernel_fingerprint
    from gpusim.specs import load_spec
    from kernels_ir.kernels import microbench as mb
    from measurements.campaign import SHORT_STEPS, STEPS, build_case, provenance

    spec, runner = load_spec("h100"), Runner()
    res = {"provenance": provenance(sys.argv), "steps": [STEPS, SHORT_STEPS], "cases": [],
           "micro": {}}
    for name in MICRO:
        try:
            r = run_microbench(MICRO_SIZES, lambda s, name=name: mb.build(name, s), repeats=15,
                               warmup=3, runner=runner)
            for size in MICRO_SIZES:
                r["sizes"][str(size)]["kernel"] = kernel_fingerprint(mb.build(name, size).kernel)
            r["status"] = "ok"
            print(f"{name:28s} {r['per_op_s'] * 1e9:9.1f} ns/round", flush=True)
        except Exception as exc:  # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{name}: FAILED {r['error']}", flush=True)
        res["micro"][name] = r
    for c in scan_cases():
        t0 = time.time()
        try:
            prog = build_case(c, STEPS, spec)
            r = run_program(prog, repeats=10, warmup=2, seed=c["seed"], short_steps=SHORT_STEPS,
                            spec=spec, runner=runner)
            c = {**c, "result": r, "status": "ok",
                 "kernel": {**kernel_fingerprint(prog.kernel), "steps": STEPS}}
            print(f"{c['id']:28s} {r['per_step_s'] * 1e6:7.3f} us/step "
                  f"({time.time() - t0:.1f}s)", flush=True)
        except Exception as exc:  # record and go on
            c = {**c, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{c['id']}: FAILED {c['error']}", flush=True)
        res["cases"].append(c)
    with open(os.path.join(out, "exchange_scan.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)


def simulate_into(path: str) -> None:
    from gpusim.calibrate import simulated_cycles_per_op
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from measurements.campaign import build_case

    spec = load_spec("h100")
    data = json.load(open(path))
    for name, r in data.get("micro", {}).items():
        if r.get("status") != "ok":
            continue
        r["simulated_per_op_s"] = simulated_cycles_per_op(spec, name, (4, 8), {}) / spec.clock_hz
        print(f"{name:28s} measured {r['per_op_s'] * 1e9:7.1f}  simulated "
              f"{r['simulated_per_op_s'] * 1e9:7.1f} ns/round")
    for c in data["cases"]:
        if c.get("status") != "ok":
            continue
        prog = build_case(c, 16, spec)
        r = simulate(prog.kernel, prog.inputs, spec, sample_steps=8)
        c["simulated_per_step_s"] = r.per_step_s
        m = c["result"]["per_step_s"]
        print(f"{c['id']:28s} words {c['hidden'] * c['batch']:6d}  measured {m * 1e6:6.3f}  "
              f"simulated {r.per_step_s * 1e6:6.3f} us  gap {(m - r.per_step_s) * 1e6:+6.3f}")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=float)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out")
    g.add_argument("--simulate", metavar="FILE")
    args = ap.parse_args(argv)
    if args.simulate:
        simulate_into(args.simulate)
    else:
        os.makedirs(args.out, exist_ok=True)
        measure(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
