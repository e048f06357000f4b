"""``measurements/l2_gather_sweep.py``: the H200's L1-bypassing gathers by lines per warp load and
by warps per SM (record ``h200/l2_gather_sweep.json``), and the simulator beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from measurements import l2_gather_sweep as sweep
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
REC = read_record(str(ROOT / "measurements" / "h200" / "l2_gather_sweep.json"))


def _per_sm(per_op_s: float) -> float:
    prov = REC["provenance"]
    return per_op_s * prov["sm_count"] * prov["clock_rate_khz"] * 1e3


def test_the_builders_are_the_gather_family_with_their_own_sizes():
    for key, kw in sweep.ENTRIES:
        m = sweep.builder(key, kw)(2)
        assert m.kernel.grid == kw.get("ctas", 264) and m.kernel.block == kw.get("threads", 1024)
        assert m.params["k"] == kw["k"] and m.params["path"] == "l2"


def test_the_record_has_every_entry_on_an_h200_and_its_simulation():
    assert "H200" in REC["provenance"]["gpu_name"]
    assert [k for k, _ in sweep.ENTRIES] == list(REC["results"])
    assert all(r["status"] == "ok" for r in REC["results"].values())
    assert REC["simulated"]["spec"] == "h200"
    assert set(REC["simulated"]["results"]) == set(REC["results"])


def test_on_the_gpu_a_line_costs_the_same_whatever_the_span():
    """From 4 lines a warp load on, the GPU's cost per warp load per SM grows in proportion to
    the lines (1.08-1.19 cycles a line; 32 lines 1.9-2.1 times 16), where the simulator's span
    rule makes a load over 32 groups 1.5 times dearer a request than one over 1."""
    cost = {kw["k"]: _per_sm(REC["results"][key]["per_op_s"])
            for key, kw in sweep.ENTRIES if "ctas" not in kw}
    for k in (4, 8, 16, 32):
        assert 1.07 < cost[k] / k < 1.19, (k, cost[k])
    assert 1.9 < cost[32] / cost[16] < 2.1


@pytest.mark.slow
def test_a_simulated_value_is_todays():
    from gpusim.specs import load_spec

    key, kw = sweep.ENTRIES[2]
    got = sweep.simulated_cycles(load_spec("h200"), key, kw)
    assert got == pytest.approx(REC["simulated"]["results"][key]["per_op_cycles"], rel=1e-9)
