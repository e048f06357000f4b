"""How a Lamport step lands on the sleep timer's ticks: per warp and step, its wake and the end of
its work, inside the campaign's own kernel (GPU), then the models beside it.

    PYTHONPATH=. python3 measurements/tick_steps.py --out $OUT       # GPU: tick_steps.json
    python measurements/tick_steps.py --simulate measurements/h200/tick_steps.json

Why: the Lamport kernel closes its step with ``__nanosleep(200)``, which ends on the next tick
of a GPU-wide timer of period 256 ns (``sleep_stairs.json``, ``sleep_phase.json``). The
analytical model rounds the step's work up to the next tick, so it prices every small layer's
step a whole number of periods; on the draws the GPU's steps at hidden 256-1100 are not whole
periods (the mean step of a layer falls anywhere between), and the model is 12-14% slow there at
batch 1 and 4. Either the work varies from step to step and the steps mix two tick counts, or
the warps do not wake on one tick. This probe says which (both: the model now takes the mean
wake over the spread measured here, ``lamport_step_spread_ns``).

The kernel is the campaign's (sparse, Lamport, wide loads, optimal layout, the step's closing
wait of 200 ns), generated from the IR as always; only its CUDA text is stamped (the IR has no
clock). Lane 0 of every warp writes, per step: ``t0`` (``clock64``) and ``g0``
(``%globaltimer``, ns) at the top of the step (right after the previous step's wait), and ``tw``
(``clock64``) right before the step's ``__nanosleep``, after its h stores.

Per layer (steps 4 to the last but one): the wake's phase in the period (``g0`` mod 256), the
share of steps on which every warp of the grid woke on the same tick, the periods a warp's step
takes (how many steps of each count), ``work_mean``, the mean over warps and steps of the time
from a warp's own tick to its ``tw`` (its ``clock64`` difference converted by its SM's clock,
fitted to ``g0``), and per step the grid's last ``tw`` after the step's *first* tick (the tick
the earliest warp woke on, so the warps' skew over ticks is in it: ``work_max``, mean, spread,
percentiles); ``ruled_step_ns``, the mean step the timer's rule would give if every warp woke on
the first tick more than ``sleep_tick_lead_ns`` after the grid's last ``tw``, against the
stamped steps and the plain kernel's per-step time (the campaign's two launch lengths).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (hidden, batch, density, seed): small layers of no draw whose Lamport steps are two to five
# periods, batch 1, 2, 4 and 8
LAYERS = ((288, 1, 0.05, 9100001), (336, 1, 0.2, 9100002), (416, 1, 0.03, 9100003),
          (544, 1, 0.25, 9100004), (704, 1, 0.02, 9100005), (864, 1, 0.1, 9100006),
          (1040, 1, 0.04, 9100007), (360, 2, 0.1, 9100008), (680, 2, 0.3, 9100009),
          (312, 4, 0.1, 9100010), (432, 4, 0.3, 9100011), (576, 4, 0.02, 9100012),
          (736, 4, 0.15, 9100013), (976, 4, 0.05, 9100014), (488, 8, 0.05, 9100015),
          (928, 8, 0.02, 9100016))
LAYER_FIELDS = ("hidden", "batch", "density", "seed")
FIELDS = ("t0", "g0", "tw")
STEPS, SHORT_STEPS = 128, 32      # the campaign's two launch lengths
FIRST = 4                         # steps dropped at the start
PERIOD_NS = 256                   # the timer's period for a 200 ns wait (sleep_stairs.json)
TS_BUFFER = "ts"
SIM_STEPS = 12


def build(h: int, b: int, d: float, seed: int, steps: int, spec):
    """The campaign's sparse Lamport kernel (wide loads, optimal layout, its closing wait)."""
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer
    return build_sparse_rnn(make_layer(h, b, d, steps, seed), spec, sync="lamport",
                            wide_loads=True, layout="optimal")


def instrumented_code(code: str, steps: int) -> str:
    """The generated CUDA with the stamps of the module docstring (``g_ts``: one int per field,
    warp, CTA and step). Raises if the code does not have the expected shape (the time loop
    once, one ``__nanosleep`` in it), so that a change of the generator cannot move a stamp."""
    from measurements.probe import stamp_loop_top

    code, _ = stamp_loop_top(code, steps, len(FIELDS), FIELDS.index("g0"))
    sleeps = [ln for ln in code.splitlines() if "__nanosleep(" in ln]
    if len(sleeps) != 1:
        raise AssertionError(f"{len(sleeps)} __nanosleep in the kernel, expected 1")
    return code.replace(sleeps[0], f"        if (ts_w) g_ts[ts_i + {FIELDS.index('tw')}] = "
                        "(int)clock64();\n" + sleeps[0])


def gpu_summary(ts, lead_ns: float) -> dict:
    """The module docstring's figures from the stamps ``ts`` (steps, CTAs, warps, fields)."""
    import numpy as np

    from measurements.probe import wrap32

    t = ts.astype(np.int64)
    # the timer's low 32 bits, each stamp placed by its difference from the first one (a launch
    # is far shorter than 2^31 ns, so no stamp is a wrap away from another); 2^32 is a multiple
    # of the period, so the ticks stay at multiples of 256
    g = (t[0, 0, 0, 1] % 2 ** 32 + wrap32(t[..., 1] - t[0, 0, 0, 1])).astype(np.float64)
    g = g - np.floor(g.min() / PERIOD_NS) * PERIOD_NS
    # each SM's clock against the global timer (warp 0's top stamps over the steps)
    c0 = np.unwrap(t[:, :, 0, 0].astype(np.float64), period=2 ** 32, axis=0)
    rate = np.array([np.polyfit(g[:, c, 0], c0[:, c], 1)[0] for c in range(t.shape[1])])
    work_cyc = wrap32(t[..., 2] - t[..., 0]).astype(np.float64)
    g, work_cyc = g[FIRST:-1], work_cyc[FIRST:-1]
    tick = np.floor(g / PERIOD_NS)                     # the tick each warp woke on
    phase = g - tick * PERIOD_NS
    end = phase + work_cyc / rate[None, :, None]       # tw after the warp's tick, ns
    flat = tick.reshape(len(tick), -1)                 # steps x warps of the grid
    base = flat.min(axis=1)                            # the step's first tick
    same = base == flat.max(axis=1)
    periods = np.diff(tick, axis=0).reshape(-1).astype(int)
    step_first = tick[:, 0, 0]                          # CTA 0, warp 0
    # the grid's last end after the step's first tick
    last = ((flat - base[:, None]) * PERIOD_NS + end.reshape(len(tick), -1)).max(axis=1)
    ruled = (np.floor((last + lead_ns) / PERIOD_NS) + 1) * PERIOD_NS
    steps_ns = np.diff(step_first) * PERIOD_NS
    q = lambda x, p: float(np.percentile(x, p))       # noqa: E731
    counts = np.bincount(periods, minlength=8)
    return {
        "clock_mhz": float(np.median(rate) * 1e3),
        "wake_phase_ns": {"p50": q(phase, 50), "p99": q(phase, 99), "max": float(phase.max())},
        "same_tick_share": float(same.mean()),
        "periods": {str(k): int(n) for k, n in enumerate(counts) if n},
        "step_ns": float(steps_ns.mean()),
        "work_max_ns": {"mean": float(last.mean()), "std": float(last.std()),
                        "p10": q(last, 10), "p50": q(last, 50), "p90": q(last, 90),
                        "min": float(last.min()), "max": float(last.max())},
        "work_mean_ns": float(end.mean()),
        "ruled_step_ns": float(ruled[:-1].mean()),
        "work_max_series_ns": [round(float(x), 1) for x in last],
        "step_series_ns": [float(x) for x in steps_ns],
    }


def stamp_layer(runner, spec, h: int, b: int, d: float, seed: int) -> dict:
    """One layer on the GPU: the plain kernel's per-step time (two launch lengths) and the
    stamped kernel's launches and summary; values checked against the float64 reference."""
    import numpy as np

    from measurements.probe import (
        compile_instrumented,
        time_launches,
        timed_slope,
        with_stamp_buffer,
    )

    runs = {}
    for T in (STEPS, SHORT_STEPS):
        prog = build(h, b, d, seed, T, spec)
        comp = runner.compile(prog.kernel, cooperative=True)
        runner.check_grid(comp)
        runs[T] = (prog, comp, dict(prog.inputs))
    out = {"plain": timed_slope(runner, runs, repeats=9, what=f"h{h}-b{b} plain ")}
    prog = runs[STEPS][0]
    k = prog.kernel
    traced_kernel = with_stamp_buffer(k, STEPS * k.grid * (k.block // 32) * len(FIELDS),
                                      suffix="_ticks", name=TS_BUFFER)
    traced = compile_instrumented(runner, traced_kernel,
                                  lambda c: instrumented_code(c, STEPS), cooperative=True)
    runner.check_grid(traced)
    inputs = dict(prog.inputs)
    inputs[TS_BUFFER] = np.zeros(traced_kernel.buffers[-1].size, np.int32)
    times, got = time_launches(runner, traced, inputs)
    err = float(prog.max_rel_err(got))
    if not err <= 1e-3:
        raise AssertionError(f"h{h}-b{b} stamped: values differ from the reference ({err})")
    ts = got[TS_BUFFER].reshape(STEPS, k.grid, k.block // 32, len(FIELDS))
    out["stamped"] = {"launch_s": times, "max_rel_err": err,
                      "summary": gpu_summary(ts, float(spec.sleep_tick_lead_ns))}
    return out


def _short(r: dict) -> str:
    s = r["stamped"]["summary"]
    w = s["work_max_ns"]
    return (f"plain {r['plain']['per_step_s'] * 1e9:.0f} ns, stamped {s['step_ns']:.0f}, ruled "
            f"{s['ruled_step_ns']:.0f}; periods {s['periods']}; same tick "
            f"{s['same_tick_share']:.2f}; work max {w['mean']:.0f} +- {w['std']:.0f} "
            f"({w['p10']:.0f}..{w['p90']:.0f}); wake phase p99 {s['wake_phase_ns']['p99']:.0f}")


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    return record_layers(out, argv, "tick_steps.json", LAYERS, stamp_layer,
                         lambda key, r: print(key, _short(r), flush=True), gpu=None,
                         layer_fields=LAYER_FIELDS,
                         key=lambda h, b, d, s: f"h{h}-b{b}-d{d}", steps=STEPS,
                         short_steps=SHORT_STEPS, fields=list(FIELDS), period_ns=PERIOD_NS,
                         kernel="sparse Lamport, wide loads, optimal layout, closing wait")


def spread_ns(rec: dict) -> float:
    """``lamport_step_spread_ns`` from a record: the median over its layers of the standard
    deviation, from step to step, of the grid's last end after the step's tick."""
    import numpy as np
    return float(np.median([r["stamped"]["summary"]["work_max_ns"]["std"]
                            for r in rec["results"].values() if r.get("status") == "ok"]))


def model_work(spec, h: int, b: int, d: float, seed: int) -> dict:
    """The analytical model's step for the layer's mapping, and its work before the tick."""
    from models import analytical
    from models.analytical import persistent

    prog = build(h, b, d, seed, 2, spec)
    seen = []
    original = persistent._on_tick

    def on_tick(spec_, ns, work):
        seen.append(float(work.reshape(-1)[0]))
        return original(spec_, ns, work)
    persistent._on_tick = on_tick
    try:
        v = analytical.Variant("sparse-lamport", "persistent", True, "lamport", True, "optimal")
        t = analytical.predict_mapping(spec, v, prog.mapping, b)
    finally:
        persistent._on_tick = original
    ns = 1e9 / spec.clock_hz
    return {"step_ns": float(t.per_step_s.reshape(-1)[0]) * 1e9, "work_ns": seen[-1] * ns}


def simulate_into(path: str) -> None:
    """Add the simulator's per-step time and the analytical model's step and work."""
    from gpusim.pricing import price_program
    from measurements.probe import simulate_layers_into

    def price(spec, key, r):
        lay = (r["hidden"], r["batch"], r["density"], r["seed"])
        p = price_program(build(*lay, SIM_STEPS, spec), spec, what=key)
        return {"per_step_ns": p.per_step_s * 1e9, "model": model_work(spec, *lay)}
    simulate_layers_into(path, price, SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main
    return probe_main(argv, __doc__, "measurements/tick_steps.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
