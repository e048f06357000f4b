"""The Lamport kernels with and without the fence that closes each step, over cells, weight
precisions and batches: the campaign's slope, GPU only.

    PYTHONPATH=. python3 measurements/step_fence.py --out $OUT     # step_fence.json

Why: a ``__threadfence()`` at the end of each step took 3-30% off the vanilla Lamport kernels
whose h fits one staging group on the H200, and moved larger slots by -5% to +2.5%
(``stamp_effect.json``, its ``fence`` form). This
checks the gated cells (LSTM, GRU), fp16 weights and more batches before the kernel keeps the
fence (``kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_FENCE``).

Per layer (seed 7, 128 and 32 steps, the program's own inputs, values checked) the per-step
slope (medians of 9 launches each) of the sparse Lamport kernel (wide loads, optimal layout)
and, where it fits, the dense one, built with ``step_fence`` False and True.
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


def build(kind: str, cell: str, dtype: str, h: int, b: int, d: float, steps: int, spec,
          fence: bool):
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    layer = make_layer(h, b, d, steps, SEED, cell=cell)
    if kind == "dense":
        return build_dense_rnn(layer, spec, sync="lamport", dtype=dtype, step_fence=fence)
    return build_sparse_rnn(layer, spec, sync="lamport", layout="optimal", dtype=dtype,
                            step_fence=fence)


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
    """Both forms of one kernel; a layer the registers refuse is recorded as such."""
    from kernels_ir.errors import CapacityError

    out = {}
    try:
        for fence in (False, True):
            progs = {T: build(kind, cell, dtype, h, b, d, T, spec, fence) for T in (STEPS, SHORT)}
            out["fence" if fence else "plain"] = slope(runner, progs)
    except CapacityError as exc:
        return {"status": "does not fit", "error": str(exc)}
    return out


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_layers

    def show(key, r):
        if r["status"] == "ok":
            print(key, {f: round(r[f]["per_step_s"] * 1e9) for f in ("plain", "fence")},
                  flush=True)
    return record_layers(out, argv, "step_fence.json",
                         [(kind, *layer) for layer in LAYERS for kind in ("sparse", "dense")],
                         measure_layer, show, gpu=None,
                         fields=("kernel", "cell", "dtype", "hidden", "batch", "density"),
                         key=lambda k, c, t, h, b, d: f"{k}-{c}-{t}-h{h}-b{b}-d{d}",
                         seed=SEED, steps=[STEPS, SHORT], repeats=REPEATS)


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main

    return gpu_probe_main(argv, __doc__, measure, "step_fence.json")


if __name__ == "__main__":
    raise SystemExit(main())
