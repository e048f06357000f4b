"""The Lamport kernels with and without the fence that closes each step, over cells, weight
precisions and batches: the campaign's slope, GPU only.

    PYTHONPATH=. python3 measurements/step_fence.py --out $OUT     # step_fence.json
    STEP_SET=waits PYTHONPATH=. python3 measurements/step_fence.py --out $OUT   # step_wait.json
    python measurements/step_fence.py --simulate measurements/h200/step_wait.json

Why: a ``__threadfence()`` at the end of each step took 3-30% off the vanilla Lamport kernels
whose h fits one staging group on the H200, and moved larger slots by -5% to +2.5%
(``stamp_effect.json``, its ``fence`` form). This
checks the gated cells (LSTM, GRU), fp16 weights and more batches before the kernel keeps the
fence (``kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_FENCE``).

Per layer (seed 7, 128 and 32 steps, the program's own inputs, values checked) the per-step
slope (medians of 9 launches each) of the sparse Lamport kernel (wide loads, optimal layout)
and, where it fits, the dense one, built with ``step_fence`` False and True.

``STEP_SET=waits`` (``step_wait.json``): the same kernels closing each step with a
``__nanosleep`` of 100, 200 or 400 ns instead (``step_wait``; "plain" without), over these
layers and five vanilla ones of ``stamp_effect.py`` (there the wait was tried by patching the
generated CUDA; here it is the IR's own option, the kernel the simulator prices).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT, REPEATS, SEED = 128, 32, 9, 7
# (cell, dtype, hidden, batch, density)
LAYERS = (("lstm", "fp32", 512, 1, 0.1), ("lstm", "fp32", 1024, 4, 0.05),
          ("gru", "fp32", 768, 1, 0.1), ("gru", "fp32", 1536, 2, 0.05),
          ("rnn", "fp16", 1024, 1, 0.1), ("rnn", "fp16", 3072, 4, 0.05),
          ("rnn", "fp32", 640, 2, 0.2), ("rnn", "fp32", 3584, 8, 0.02),
          ("rnn", "fp32", 6144, 1, 0.03))
# the forms of each set: name -> the builder's step options; the record each set writes
FENCE_FORMS = {"plain": {"step_fence": False, "step_wait": 0},   # (measured without the wait)
               "fence": {"step_fence": True, "step_wait": 0}}
WAIT_FORMS = {"plain": {"step_wait": 0}, **{f"wait{n}": {"step_wait": n} for n in (100, 200, 400)}}
WAIT_LAYERS = LAYERS + (("rnn", "fp32", 1024, 1, 0.05), ("rnn", "fp32", 2048, 1, 0.05),
                        ("rnn", "fp32", 1536, 2, 0.05), ("rnn", "fp32", 2304, 4, 0.1),
                        ("rnn", "fp32", 2048, 8, 0.05))
FIELDS = ("kernel", "cell", "dtype", "hidden", "batch", "density")
SETS = {"": ("step_fence.json", LAYERS, FENCE_FORMS),
        "waits": ("step_wait.json", WAIT_LAYERS, WAIT_FORMS)}


def step_set():
    """(record, layers, forms) of ``STEP_SET`` (unset: the fence)."""
    name = os.environ.get("STEP_SET", "")
    if name not in SETS:
        raise SystemExit(f"STEP_SET={name!r}; accepted: {', '.join(map(repr, SETS))}")
    return SETS[name]


def build(kind: str, cell: str, dtype: str, h: int, b: int, d: float, steps: int, spec,
          **opts):
    """The Lamport kernel of the layer (seed 7) with the step options ``opts``."""
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    layer = make_layer(h, b, d, steps, SEED, cell=cell)
    if kind == "dense":
        return build_dense_rnn(layer, spec, sync="lamport", dtype=dtype, **opts)
    return build_sparse_rnn(layer, spec, sync="lamport", layout="optimal", dtype=dtype, **opts)


def slope(runner, progs: dict) -> dict:
    """The campaign's slope of the programs ``progs`` (``T -> program``), values checked."""
    from measurements.probe import timed_slope

    runs = {}
    for T, prog in progs.items():
        comp = runner.compile(prog.kernel, cooperative=True)
        runner.check_grid(comp)
        runs[T] = (prog, comp, dict(prog.inputs))
    return timed_slope(runner, runs, REPEATS)


def measure_layer(runner, spec, kind, cell, dtype, h, b, d) -> dict:
    """Every form of one kernel; a layer the registers refuse is recorded as such."""
    from kernels_ir.errors import CapacityError

    out = {}
    try:
        for form, opts in step_set()[2].items():
            progs = {T: build(kind, cell, dtype, h, b, d, T, spec, **opts)
                     for T in (STEPS, SHORT)}
            out[form] = slope(runner, progs)
    except CapacityError as exc:
        return {"status": "does not fit", "error": str(exc)}
    return out


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    name, layers, forms = step_set()

    def show(key, r):
        if r["status"] == "ok":
            print(key, {f: round(r[f]["per_step_s"] * 1e9) for f in forms}, flush=True)
    return record_layers(out, argv, name,
                         [(kind, *layer) for layer in layers for kind in ("sparse", "dense")],
                         measure_layer, show, gpu=None,
                         layer_fields=FIELDS,
                         key=lambda k, c, t, h, b, d: f"{k}-{c}-{t}-h{h}-b{b}-d{d}",
                         seed=SEED, steps=[STEPS, SHORT], repeats=REPEATS)


def _simulated(args) -> tuple:
    """(key, form, the simulator's mean step in seconds) of one kernel of the record: 8 steps,
    buffers warm in L2, values checked."""
    from gpusim.engine import simulate
    from gpusim.specs import load_spec

    key, form, opts, (kind, cell, dtype, h, b, d), gpu = args
    spec = load_spec(gpu)
    prog = build(kind, cell, dtype, h, b, d, 8, spec, **opts)
    sim = simulate(prog.kernel, prog.inputs, spec, l2_warm=True)
    if not prog.max_rel_err(sim.globals) <= 1e-3:
        raise AssertionError(f"{key} {form}: the simulator's values differ")
    return key, form, float(sim.per_step_s)


def simulate_into(path: str, jobs: int = 2) -> None:
    """Add the simulator's step of every recorded kernel and form (``jobs`` processes)."""
    from concurrent.futures import ProcessPoolExecutor

    from measurements.probe import add_simulated

    def results(spec, rec):
        forms = {f: o for s in SETS.values() for f, o in s[2].items()}
        work = [(key, form, forms[form], tuple(r[f] for f in FIELDS), rec.get("spec", "h200"))
                for key, r in rec["results"].items() if r["status"] == "ok"
                for form in forms if form in r]
        with ProcessPoolExecutor(jobs) as ex:
            done = list(ex.map(_simulated, work))
        res = {}
        for key, form, t in done:
            res.setdefault(key, {})[form] = {"per_step_s": t}
        for key, r in res.items():
            print(key, {f: round(v["per_step_s"] * 1e9) for f, v in r.items()}, flush=True)
        return res
    add_simulated(path, results, gpu="h200", steps=8)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/step_fence.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
