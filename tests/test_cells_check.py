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


def test_record_values_and_what_the_readmes_say():
    """measurements/h100/cells_check.json: every kernel that fits matched its reference on the
    H100, the simulator priced each, and the READMEs quote its MAPE and the dense finding."""
    import json
    from pathlib import Path

    import numpy as np

    root = Path(__file__).resolve().parents[1]
    rec = json.loads((root / "measurements" / "h100" / "cells_check.json").read_text())
    assert "cells_check.py" in rec["provenance"]["command"]
    assert "H100" in rec["provenance"]["gpu_name"]
    assert set(rec["results"]) == {cc.key(c) for c in cc.draw()}
    ok = {k: r for k, r in rec["results"].items() if r["status"] == "ok"}
    skipped = [r for r in rec["results"].values() if r["status"] == "skipped"]
    assert len(ok) == 18 and len(skipped) == 2
    assert all("registers" in r["reason"] for r in skipped)
    assert max(r["max_rel_err"] for r in ok.values()) <= 1e-6
    sim = rec["simulated"]["results"]
    err = {k: sim[k]["per_step_s"] / r["per_step_s"] - 1 for k, r in ok.items()}
    mape = 100 * float(np.mean(np.abs(list(err.values()))))
    for readme in ("README.md", "measurements/README.md"):
        assert f"{mape:.1f}%" in (root / readme).read_text().replace("\n", " "), readme
    dense = [e for k, e in err.items() if ok[k]["kind"] == "dense"]
    assert len(dense) == 3 and min(dense) > 0.25       # the IR loads h once per gate
    local = [ok[k]["exchange"] for k in ok if ok[k]["heads"] > 1]
    assert local.count("cta") == 6 and local.count("grid") == 2
