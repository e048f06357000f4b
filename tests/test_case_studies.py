"""docs/case_studies.md quotes what `gpusim predict` says today: one of its rows recomputed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gnmt_row_is_todays_prediction():
    from gpusim.api import predict
    from gpusim.specs import load_spec

    p = predict(load_spec("h100"), hidden=1024, batch=4, density=0.1, cell="lstm",
                engine="sim").to_dict()
    k = {r["name"]: r for r in p["kernels"]}
    u = p["uncertainty"]
    best, nb = p["best_persistent"], p["next_best"]
    lo, hi = u["speedup_range"]
    row = (f"| H100 | 4 | 0.1 | {best} {k[best]['per_step_s'] * 1e6:.2f} | "
           f"{nb} {k[nb]['per_step_s'] * 1e6:.2f} | {p['speedup']:.2f}x ({lo:.2f}-{hi:.2f}) | "
           f"{', '.join(u['could_be_fastest'])} |")
    assert row in (ROOT / "docs" / "case_studies.md").read_text()
