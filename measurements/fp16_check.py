"""fp16 weights on the GPU: values against the float64 reference of the rounded weights, per-step
time beside the fp32 kernel of the same layer, and the simulator's prediction of both.

    PYTHONPATH=. python3 measurements/fp16_check.py --out $OUT      # GPU: fp16_check.json
    python measurements/fp16_check.py --simulate measurements/h100/fp16_check.json

The layers are a random draw (:func:`draw`, seed :data:`SEED`; no mechanism of the simulator was
developed against an fp16 kernel, so every fp16 case is out of sample): vanilla layers, hidden
256-8192 log-uniform, batch 1/2/4/8, density 0.01-0.5 log-uniform, each as the sparse kernel
(wide loads, optimal layout) with both syncs in fp16 and in fp32 (the pair gives the GPU's cost
of unpacking the weights), and the dense kernel in both dtypes where it fits; then gated layers
(LSTM, GRU) in fp16; then the layers at the H100's fp16 capacity limit (:data:`AT_LIMIT`), which
fp32 cannot hold: their fp16 kernels show that the capacity fp16 claims runs without spills and
with the right values, and their fp32 cases are recorded as refused. A case the registers
refuse is recorded as skipped with the reason. GPU:
:func:`gpusim.backends.cupy_backend.run_program` (values checked against the float64 reference
of the fp16-rounded layer before any timing; per-step time = slope between ``STEPS`` and
``SHORT_STEPS`` steps, median of interleaved repeats). Simulator:
:func:`gpusim.pricing.price_program` of the same layer with ``SIM_STEPS`` steps (values checked).
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEED = 23
N_LAYERS, N_GATED = 10, 4
STEPS, SHORT_STEPS, SIM_STEPS = 128, 16, 4
REPEATS = 9   # timed repeats (after record_programs's 2 warm-up launches)
AT_LIMIT = ((0.1, 4), (0.02, 1))   # (density, batch): the fp16 kernel at capacity's largest N


def _log_uniform(rng, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw(seed: int = SEED) -> list[dict]:
    """The cases (see the module docstring); the at-limit layers' sizes come from the capacity
    model of the H100 (``models.capacity.max_hidden``, fp16)."""
    import numpy as np

    from gpusim.specs import load_spec
    from models import capacity as cap

    rng = np.random.default_rng(seed)
    out = []

    def add(**c):
        out.append({"cell": "rnn", "kind": "sparse", **c})

    for _ in range(N_LAYERS):
        hidden = int(round(_log_uniform(rng, 256, 8192) / 8) * 8)
        batch = int(rng.choice([1, 2, 4, 8]))
        density = float(f"{_log_uniform(rng, 0.01, 0.5):.3g}")
        for dtype in ("fp16", "fp32"):
            for sync in ("lamport", "barrier"):
                add(hidden=hidden, batch=batch, density=density, sync=sync, dtype=dtype)
            add(hidden=hidden, batch=batch, density=1.0, sync="lamport", dtype=dtype,
                kind="dense")
    for _ in range(N_GATED):
        cell = ("lstm", "gru")[int(rng.random() < 0.5)]
        hidden = int(round(_log_uniform(rng, 192, 1536) / 8) * 8)
        batch = int(rng.choice([1, 2, 4, 8]))
        density = float(f"{_log_uniform(rng, 0.01, 0.3):.3g}")
        sync = ("lamport", "barrier")[int(rng.random() < 0.5)]
        add(cell=cell, hidden=hidden, batch=batch, density=density, sync=sync, dtype="fp16")
    spec = load_spec("h100")
    for density, batch in AT_LIMIT:
        hidden = cap.max_hidden(spec, density, batch, dtype="fp16").hidden
        for dtype in ("fp16", "fp32"):
            add(hidden=hidden, batch=batch, density=density, sync="lamport", dtype=dtype,
                at_limit=True)
    return out


def key(c: dict) -> str:
    return (f"{c['kind']}-{c['cell']}-h{c['hidden']}-b{c['batch']}-d{c['density']}-{c['sync']}-"
            f"{c['dtype']}")


def build(c: dict, steps: int, spec):
    """The case's program (sparse: wide loads, optimal layout, as the campaign builds them)."""
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    layer = make_layer(c["hidden"], c["batch"], c["density"], steps, SEED, cell=c["cell"])
    if c["kind"] == "dense":
        return build_dense_rnn(layer, spec, sync=c["sync"], wide_loads=True, dtype=c["dtype"])
    return build_sparse_rnn(layer, spec, sync=c["sync"], wide_loads=True, layout="optimal",
                            dtype=c["dtype"])


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_programs

    return record_programs(out, argv, "fp16_check.json", draw(), key, build,
                           lambda prog: {"kernel": prog.kernel.name},
                           seed=SEED, steps=[STEPS, SHORT_STEPS], repeats=REPEATS)


CASE_FIELDS = ("cell", "hidden", "batch", "density", "kind", "sync", "dtype")


def _simulated(spec, rec) -> dict:
    from measurements.probe import price_recorded

    return price_recorded(spec, rec, CASE_FIELDS, build, SIM_STEPS)


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main
    return probe_main(argv, __doc__, "measurements/fp16_check.py", measure,
                      lambda path: add_simulated(path, _simulated, steps=SIM_STEPS))


if __name__ == "__main__":
    raise SystemExit(main())
