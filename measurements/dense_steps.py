"""The dense kernel's step, three ways on the GPU: the campaign's slope, and its clock stamps'
median and mean step (then the simulator).

    PYTHONPATH=. python3 measurements/dense_steps.py --out $OUT     # dense_steps.json
    python measurements/dense_steps.py --simulate measurements/h200/dense_steps.json

Why: over the H200 draws the simulator's dense persistent kernel at batch 1 is 15% faster than
the campaign measured it (370 cases), at batch 4 within 3%. Yet stamped step by step
(``exchange_groups.py --layers dense``) its median step agrees with the simulator within 10%
both ways, its row body alone (``body_probe.py``, ``DENSE=1``) within 5%. So either the step's
median is not its mean (a step now and then much longer than the others), or the campaign's
launches differ from the probe's.

Per layer (seed 7), for the dense kernel and the sparse Lamport kernel (wide loads, optimal
layout) beside it, each of 128 steps:

- ``campaign``: ``run_program`` as the campaign calls it (T = 128 against 32, inputs drawn
  afresh before every launch, 9 repeats interleaved), values checked;
- ``stamped``: the kernel with ``exchange_groups``' clock stamps, on the program's own inputs,
  values checked; its step's median, each step's median over the warps (``step_series_ns``)
  and their mean (``step_mean_ns``).

``--simulate`` adds the simulator's mean step (8 steps, buffers warm in L2).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT = 128, 32
# batch 1 from one to two rows a warp (hidden 536 to 2048), and batch 4 as the control
LAYERS = ((536, 1, 0.05), (928, 1, 0.05), (1128, 1, 0.05), (1744, 1, 0.05), (2048, 1, 0.05),
          (1024, 4, 0.05))
KERNELS = ("dense", "sparse")


def measure_layer(runner, spec, h: int, b: int, d: float) -> dict:
    from gpusim.backends.cupy_backend import run_program
    from measurements.exchange_groups import _compile_traced, build, gpu_summary, groups_of
    from measurements.probe import time_launches

    out = {}
    for kind in KERNELS:
        prog = build(h, b, d, STEPS, spec, "lamport", dense=kind == "dense")
        camp = run_program(prog, repeats=9, short_steps=SHORT, spec=spec, runner=runner)
        traced, size = _compile_traced(runner, prog.kernel, "lamport", steps=STEPS)
        import numpy as np
        inputs = dict(prog.inputs) | {"ts": np.zeros(size, np.int32)}
        times, got = time_launches(runner, traced, inputs, repeats=5)
        err = float(prog.max_rel_err(got))
        if not err <= 1e-3:
            raise AssertionError(f"{kind} stamped: values differ from the reference ({err})")
        ts = got["ts"].reshape(STEPS, prog.kernel.grid, prog.kernel.block // 32, -1)
        out[kind] = {"campaign": {k: camp[k] for k in ("per_step_s", "per_step_raw_s", "steps",
                                                       "max_rel_err", "launch_s")},
                     "stamped": {"launch_s": times, "max_rel_err": err,
                                 "summary": gpu_summary(ts, spec.clock_hz, groups_of(h, b),
                                                        series=True)}}
    return out


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        print(key, json.dumps({k: {"campaign_ns": v["campaign"]["per_step_s"] * 1e9,
                                   "median_ns": v["stamped"]["summary"]["step_ns"],
                                   "mean_ns": v["stamped"]["summary"]["step_mean_ns"]}
                               for k, v in r.items() if k in KERNELS},
                              default=lambda x: round(x, 1)), flush=True)
    return record_layers(out, argv, "dense_steps.json", LAYERS, measure_layer, show, gpu=None,
                         steps=STEPS, short_steps=SHORT)


def simulate_into(path: str) -> None:
    from gpusim.engine import simulate
    from measurements.exchange_groups import build
    from measurements.probe import add_simulated

    def results(spec, rec):
        res = {}
        for key, r in rec["results"].items():
            res[key] = {}
            for kind in KERNELS:
                prog = build(r["hidden"], r["batch"], r["density"], 8, spec, "lamport",
                             dense=kind == "dense")
                sim = simulate(prog.kernel, prog.inputs, spec, l2_warm=True)
                if not prog.max_rel_err(sim.globals) <= 1e-3:
                    raise AssertionError(f"{key} {kind}: the simulator's values differ")
                res[key][kind] = {"per_step_s": float(sim.per_step_s)}
            print(key, json.dumps(res[key]), flush=True)
        return res
    add_simulated(path, results, gpu=None, steps=8)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/dense_steps.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
