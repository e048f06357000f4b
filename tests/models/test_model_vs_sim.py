"""The analytical model against the simulator: within 15% per-step time on >= 30 configurations.

Two independent witnesses: the model reads the spec and the kernel's structure, the simulator
executes the IR cycle by cycle. Shrunk GPUs (2-32 SMs) keep the simulation short; the model is
given the same concrete mapping (exact K_j and wavefronts) and nothing from the simulation.
"""

import dataclasses
import itertools

import pytest

from gpusim.specs import load_spec
from kernels_ir.errors import CapacityError
from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer
from models import analytical as an

TOLERANCE = 0.15

LAYERS = [  # (gpu, sm_count, hidden, batch, density)
    ("v100", 4, 256, 4, 0.1), ("v100", 4, 512, 4, 0.1), ("v100", 8, 512, 1, 0.2),
    ("v100", 4, 384, 2, 0.3), ("h100", 4, 512, 4, 0.05), ("h100", 6, 256, 8, 0.2),
    ("v100", 2, 128, 4, 1.0), ("h100", 4, 320, 1, 0.5),
    ("v100", 16, 1024, 4, 0.1), ("h100", 32, 1024, 2, 0.1),   # more SMs: L2 broadcast, atomics
]


def _configs():
    for (gpu, sms, n, b, d), name in itertools.product(LAYERS, an.PERSISTENT):
        yield gpu, sms, n, b, d, name


def _run_all():
    from gpusim.engine import simulate

    rows = []
    for gpu, sms, n, b, d, name in _configs():
        spec = dataclasses.replace(load_spec(gpu), sm_count=sms)
        v = an.VARIANTS[name]
        try:
            if v.sparse:
                prog = build_sparse_rnn(make_layer(n, b, d, 4, seed=1), spec, sync=v.sync,
                                        wide_loads=v.wide_loads, layout=v.layout)
            else:
                prog = build_dense_rnn(make_layer(n, b, 1.0, 4, seed=1), spec, sync=v.sync,
                                       wide_loads=v.wide_loads)
        except CapacityError:
            continue
        sim = simulate(prog.kernel, prog.inputs, spec, sample_steps=3).per_step_s
        model = an.predict_mapping(spec, name, prog.mapping, b).per_step_s[0]
        rows.append(((gpu, sms, n, b, d, name), sim, model, model / sim - 1))
    return rows


@pytest.mark.slow
def test_model_within_15_percent_of_simulator():
    rows = _run_all()
    assert len(rows) >= 30
    bad = [r for r in rows if abs(r[3]) > TOLERANCE]
    errs = [abs(r[3]) for r in rows]
    print(f"\n{len(rows)} configurations: mean |err| {sum(errs) / len(errs):.1%}, "
          f"max {max(errs):.1%}")
    assert not bad, "\n".join(f"{c}: sim {s * 1e6:.2f} us, model {m * 1e6:.2f} us ({e:+.1%})"
                              for c, s, m, e in bad)
