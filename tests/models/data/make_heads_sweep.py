"""Simulate the persistent kernels of a sweep of multi-head layers and record their per-step
times in ``heads_sweep.json`` (read by ``tests/models/test_heads_model.py``, which prices the
same layers with the analytical model and compares). Simulating them takes a few minutes, so the
test reads this record instead:

    python tests/models/data/make_heads_sweep.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPEC = "h100"
SEED = 0
SAMPLE_STEPS = 3
TIMESTEPS = SAMPLE_STEPS + 2
KERNELS = ("sparse-lamport", "sparse-naive", "dense-persistent")
# (hidden, batch, density, cell, heads): rnn and lstm, 2-32 heads of 32-512 units, batch 1-8,
# density 0.02-0.3 within the heads' blocks; whole heads per CTA and grid-wide cases
LAYERS = (
    (1024, 4, 0.1, "rnn", 32),
    (2048, 2, 0.05, "rnn", 16),
    (1024, 4, 0.1, "lstm", 8),
    (512, 8, 0.2, "lstm", 16),
    (1024, 1, 0.02, "rnn", 2),
    (2048, 2, 0.05, "lstm", 4),
    (4096, 1, 0.02, "rnn", 32),
    (256, 1, 0.3, "lstm", 8),
    (512, 8, 0.3, "rnn", 4),
    (1024, 2, 0.05, "lstm", 32),
    (3072, 4, 0.02, "rnn", 24),
    (1536, 1, 0.1, "lstm", 12),
    (2048, 4, 0.1, "rnn", 8),
    (4096, 1, 0.02, "lstm", 16),
)


def main() -> int:
    from gpusim.pricing import price_program
    from gpusim.specs import load_spec
    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer
    from models.analytical import VARIANTS

    spec = load_spec(SPEC)
    cases = []
    for hidden, batch, density, cell, heads in LAYERS:
        for name in KERNELS:
            v = VARIANTS[name]
            layer = make_layer(hidden, batch, density if v.sparse else 1.0, TIMESTEPS, SEED,
                               cell=cell, heads=heads)
            try:
                if v.sparse:
                    prog = build_sparse_rnn(layer, spec, sync=v.sync, wide_loads=v.wide_loads,
                                            layout=v.layout, seed=SEED)
                else:
                    prog = build_dense_rnn(layer, spec, sync=v.sync, wide_loads=v.wide_loads)
            except CapacityError:
                continue
            p = price_program(prog, spec, sample_steps=SAMPLE_STEPS, what=name)
            cases.append({"hidden": hidden, "batch": batch, "density": density, "cell": cell,
                          "heads": heads, "kernel": name, "exchange": prog.variant["exchange"],
                          "heads_per_cta": int(prog.mapping.heads_per_cta),
                          "sim_per_step_s": p.per_step_s})
            print(json.dumps(cases[-1]), file=sys.stderr, flush=True)
    out = {"command": "python tests/models/data/make_heads_sweep.py", "gpu": SPEC,
           "seed": SEED, "sample_steps": SAMPLE_STEPS, "timesteps": TIMESTEPS, "cases": cases}
    path = Path(__file__).with_name("heads_sweep.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(cases)} cases -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
