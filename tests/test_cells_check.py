"""measurements/cells_check.py: the draw is fixed by its seed and holds both cells, both syncs,
sparse and dense and multi-head layers; its kernels are today's gated / multi-head kernels; the
simulator's side prices a recorded case with values checked."""

from __future__ import annotations

from gpusim.specs import load_spec
from measurements import cells_check as cc


def test_the_draw_is_fixed_and_covers_the_kinds():
    a, b = cc.draw(), cc.draw()
    assert a == b and len(a) == cc.N_CELLS + 2 * len(cc.HEADS)
    gated = a[:cc.N_CELLS]
    assert {c["cell"] for c in gated} == {"lstm", "gru"}
    assert {c["kind"] for c in gated} == {"sparse", "dense"}
    assert {c["sync"] for c in a} == {"lamport", "barrier"}
    assert all(c["heads"] > 1 and c["cell"] == "rnn" for c in a[cc.N_CELLS:])
    assert len({cc.key(c) for c in a}) == len(a)


def test_simulated_side_prices_a_recorded_case():
    c = next(c for c in cc.draw() if c["hidden"] < 300 and c["kind"] == "sparse")
    rec = {"results": {cc.key(c): {**c, "status": "ok", "per_step_s": 1e-6}}}
    res = cc._simulated(load_spec("h100"), rec)
    r = res[cc.key(c)]
    assert r["per_step_s"] > 0 and r["max_rel_err"] < 1e-4
