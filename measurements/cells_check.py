"""The gated cells (LSTM, GRU) and multi-head layers on the GPU: values against the float64
references, per-step time, and the simulator's prediction of the same kernels.

    PYTHONPATH=. python3 measurements/cells_check.py --out $OUT      # GPU: cells_check.json
    python measurements/cells_check.py --simulate measurements/h100/cells_check.json

The layers are a random draw (:func:`draw`, seed :data:`SEED`; no mechanism of the simulator was
developed against a gated or multi-head kernel, so every case is out of sample): cells lstm/gru,
hidden 192-1536 log-uniform (a gated layer has 3-4x the rows of a vanilla one), batch 1/2/4/8,
density 0.01-0.3 log-uniform, sparse (wide loads, optimal layout) or dense, Lamport or barrier;
then multi-head vanilla layers with 4-64 heads, some whose heads fit in one CTA (the exchange
stays in the CTA: the kernel is then the same for both syncs, so those are measured twice) and
one whose heads do not (grid-wide exchange). A case the registers refuse is
recorded as skipped with the reason. GPU: :func:`gpusim.backends.cupy_backend.run_program`
(values checked against the float64 reference before any timing; per-step time = slope between
``STEPS`` and ``SHORT_STEPS`` steps, median of interleaved repeats). Simulator:
:func:`gpusim.pricing.price_program` of the same layer with ``SIM_STEPS`` steps (values checked).
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEED = 19
N_CELLS = 12
STEPS, SHORT_STEPS, SIM_STEPS = 128, 16, 4
REPEATS = 9   # timed repeats (after record_programs's 2 warm-up launches)
# (hidden, heads, batch, density): multi-head vanilla layers; hidden / heads units per head
HEADS = ((1024, 16, 4, 0.1), (2048, 64, 2, 0.2), (4096, 32, 1, 0.05), (1536, 4, 4, 0.1))


def draw(seed: int = SEED, n: int = N_CELLS) -> list[dict]:
    """The cases: ``n`` random gated layers, then the multi-head layers of :data:`HEADS`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        cell = ("lstm", "gru")[int(rng.random() < 0.5)]
        hidden = int(round(math.exp(rng.uniform(math.log(192), math.log(1536))) / 8) * 8)
        batch = int(rng.choice([1, 2, 4, 8]))
        density = float(f"{math.exp(rng.uniform(math.log(0.01), math.log(0.3))):.3g}")
        dense = bool(rng.random() < 0.25)
        sync = ("lamport", "barrier")[int(rng.random() < 0.5)]
        out.append({"cell": cell, "heads": 1, "hidden": hidden, "batch": batch,
                    "density": 1.0 if dense else density, "kind": "dense" if dense else "sparse",
                    "sync": sync})
    for hidden, heads, batch, density in HEADS:
        for sync in ("lamport", "barrier"):
            out.append({"cell": "rnn", "heads": heads, "hidden": hidden, "batch": batch,
                        "density": density, "kind": "sparse", "sync": sync})
    return out


def key(c: dict) -> str:
    return (f"{c['kind']}-{c['cell']}-h{c['hidden']}-H{c['heads']}-b{c['batch']}-"
            f"d{c['density']}-{c['sync']}")


def build(c: dict, steps: int, spec):
    """The case's program (sparse: wide loads, optimal layout, as the campaign builds them)."""
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    kw = {"heads": c["heads"]} if c["heads"] > 1 else {}
    layer = make_layer(c["hidden"], c["batch"], c["density"], steps, SEED, cell=c["cell"], **kw)
    if c["kind"] == "dense":
        return build_dense_rnn(layer, spec, sync=c["sync"], wide_loads=True)
    return build_sparse_rnn(layer, spec, sync=c["sync"], wide_loads=True, layout="optimal")


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_programs

    return record_programs(out, argv, "cells_check.json", draw(), key, build,
                           lambda prog: {"exchange": prog.variant.get("exchange", "grid")},
                           seed=SEED, steps=[STEPS, SHORT_STEPS], repeats=REPEATS)


CASE_FIELDS = ("cell", "heads", "hidden", "batch", "density", "kind", "sync")


def _simulated(spec, rec) -> dict:
    from measurements.probe import price_recorded

    return price_recorded(spec, rec, CASE_FIELDS, build, SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main
    return probe_main(argv, __doc__, "measurements/cells_check.py", measure,
                      lambda path: add_simulated(path, _simulated, steps=SIM_STEPS))


if __name__ == "__main__":
    raise SystemExit(main())
