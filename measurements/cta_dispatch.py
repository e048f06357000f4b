"""What one more CTA per SM costs a launch: one device call, or the simulator.

    PYTHONPATH=. python3 measurements/cta_dispatch.py --out $OUT      # GPU: cta_dispatch.json
    python measurements/cta_dispatch.py --simulate measurements/h100/cta_dispatch.json

The per-step baselines launch several CTAs per SM every step (the CSR row-per-warp kernel: one warp
per row, 8 warps per CTA, so hidden 2824 is 353 CTAs, 2.7 per SM of an H100); the persistent
kernels launch one. ``cta_dispatch`` (below) is a grid of ``per_sm`` x 132 CTAs that do almost
nothing (thread 0 stores its CTA index, checked). Each ``per_sm`` is timed as the CSR baseline is:
CUDA graphs of 64 and of 8 back-to-back non-cooperative launches, one graph between two events,
``REPEATS`` times after ``WARMUP``; cost per launch = (64-launch time - 8-launch time) / 56 per
repeat (every value kept). A single launch between two events was tried first and is useless here:
12-16 us of host launch latency whose noise (+-2 us) hides the dispatch. The record gives the
medians and the least-squares slope over ``per_sm`` (ns per extra CTA per SM), for 256- and
128-thread CTAs. ``--simulate FILE`` adds the simulator's cycles per ``per_sm`` and slope.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SIZES = {"cta_dispatch": (1, 2, 3, 4, 6, 8), "cta_dispatch_t128": (1, 2, 4, 8, 12, 16)}
THREADS = {"cta_dispatch": 256, "cta_dispatch_t128": 128}


def cta_dispatch(per_sm: int = 1, sms: int = 132, threads: int = 256):
    """A grid of ``per_sm * sms`` CTAs of ``threads`` threads that do almost nothing (thread 0
    of every CTA stores its CTA index): op = one more CTA per SM (all of them fit at once for
    ``per_sm * threads`` up to the SM's 2048 threads). Kept here, not among the simulator's
    microbenchmarks: it measured a cost too small to be the mechanism it was built to test
    (measurements/README.md)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import I32, PRED
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    for n, v in (("per_sm", per_sm), ("sms", sms), ("threads", threads)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise InputError(f"{n}={v!r}: accepted whole numbers >= 1")
    if threads % 32 or threads > 1024:
        raise InputError(f"threads={threads} must be a multiple of 32 up to 1024")
    if per_sm * threads > 2048:
        raise InputError(f"per_sm={per_sm} x threads={threads} exceeds the 2048 threads an SM "
                         f"holds at once: accepted per_sm up to {2048 // threads}")
    grid = per_sm * sms
    name = "cta_dispatch" + ("" if threads == 256 else f"_t{threads}")
    b = Builder(f"mb_{name}", grid=grid, block=threads, bench=name, per_sm=per_sm)
    g_out = b.global_buffer("out", I32, grid, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    with b.if_(b.isetp("eq", tid, 0, dst=b.reg(PRED, "t0"))):
        b.stg(g_out, cta, cta)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"out": np.full(grid, -1, np.int32)}, per_sm,
                      "one more CTA per SM", {"per_sm": per_sm, "sms": sms, "threads": threads},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]),
                                                    np.arange(grid, dtype=np.int32))))


def build(name: str, per_sm: int):
    return cta_dispatch(per_sm=per_sm, threads=THREADS[name])


REPEATS, WARMUP = 15, 2
LAUNCHES = (64, 8)       # graphs of back-to-back launches: cost per launch = the difference / 56


def _slope(xs, ys) -> float:
    import numpy as np

    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def measure(out: str, argv: list) -> dict:
    from gpusim.backends.cupy_backend import Runner, _summary
    from gpusim.measurements import kernel_fingerprint
    from measurements.campaign import provenance
    from measurements.probe import launch_checked, save_record

    runner = Runner()
    cp = runner.cp
    res = {"format_version": 2, "provenance": provenance(argv), "repeats": REPEATS,
           "warmup": WARMUP, "launches": list(LAUNCHES), "results": {}}
    t0 = time.time()
    stream = cp.cuda.Stream(non_blocking=True)
    for name, sizes in SIZES.items():
        rec = {"benchmark": name, "sizes": {}}
        for size in sizes:
            m = build(name, size)
            comp, bufs = launch_checked(runner, m, f"{name} (per_sm {size})")

            def capture(count, comp=comp, bufs=bufs):
                with stream:
                    stream.begin_capture()
                    try:
                        for _ in range(count):
                            runner.launch(comp, bufs, stream=stream)
                    finally:
                        g = stream.end_capture()
                return g

            graphs = [capture(c) for c in LAUNCHES]

            def timed(g) -> float:
                stream.synchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                g.launch(stream)
                e1.record(stream)
                e1.synchronize()
                return cp.cuda.get_elapsed_time(e0, e1) * 1e-3

            for _ in range(WARMUP):
                for g in graphs:
                    timed(g)
            long_, short = [], []
            for _ in range(REPEATS):
                long_.append(timed(graphs[0]))
                short.append(timed(graphs[1]))
            per = sorted((a - c) / (LAUNCHES[0] - LAUNCHES[1])
                         for a, c in zip(long_, short, strict=True))
            rec["sizes"][str(size)] = {"per_launch": _summary(per), "t_long": _summary(long_),
                                       "t_short": _summary(short), "params": m.params,
                                       "kernel": kernel_fingerprint(m.kernel)}
        med = [rec["sizes"][str(s)]["per_launch"]["median"] for s in sizes]
        rec["slope_s_per_cta_per_sm"] = _slope(sizes, med)
        res["results"][name] = rec
        print(f"{name}: per graph node (us) {[round(x * 1e6, 3) for x in med]}; "
              f"slope {rec['slope_s_per_cta_per_sm'] * 1e9:.1f} ns per CTA per SM", flush=True)
    res["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "cta_dispatch.json"), res)
    return res


def _simulated(spec, rec) -> dict:
    from gpusim.engine import simulate

    out = {}
    for name, sizes in SIZES.items():
        cyc = []
        for size in sizes:
            m = build(name, size)
            r = simulate(m.kernel, m.inputs, spec)
            if not m.verify_result(r.globals):
                raise AssertionError(f"{name} (per_sm {size}): the simulator's values fail")
            cyc.append(r.cycles)
        slope = _slope(sizes, cyc)
        out[name] = {"cycles": dict(zip(map(str, sizes), cyc, strict=True)),
                     "slope_cycles_per_cta_per_sm": slope,
                     "slope_s_per_cta_per_sm": slope / spec.clock_hz}
        print(f"{name}: simulated slope {slope / spec.clock_hz * 1e9:.1f} ns per CTA per SM")
    return out


def main(argv: list | None = None) -> int:
    from gpusim.specs import load_spec
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated,
                                                 clock_hz=load_spec("h100").clock_hz))


if __name__ == "__main__":
    sys.exit(main())
