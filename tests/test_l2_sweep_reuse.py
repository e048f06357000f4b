"""``measurements/l2_sweep_reuse.py`` (record ``h200/l2_sweep_reuse.json``): the lockstep sweep
of ``l2_sweep_share.py`` over tables of 16 to 1024 rows."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_group_map, load_spec
from measurements import l2_sweep_reuse as ru
from measurements import l2_sweep_share as sw

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h200" / "l2_sweep_reuse.json").read_text())
SHARE = json.loads((ROOT / "measurements" / "h200" / "l2_sweep_share.json").read_text())


def _med(run) -> float:
    return statistics.median(run["cycles_per_round_per_sm"])


def _per_request(name) -> float:
    r = REC["runs"][name]
    return _med(r) / r["load"]["max"]


def test_the_record_is_every_table_and_place_with_raw_repeats():
    p = REC["provenance"]
    assert "H200" in p["gpu_name"] and set(p["sm_clock_mhz_samples"]) == {1980}
    assert REC["map_check"] == {"pairs": 200, "wrong": 0} and REC["start_late"] == 0
    assert set(REC["runs"]) == {f"r{t}_{p}" for t in ru.TABLES for p in sw.PLACES}
    groups = np.asarray(load_group_map(load_spec("h200").l2_group_map))
    for name, r in REC["runs"].items():
        assert r["k"] == ru.K and len(r["cycles_per_round_per_cta"]) == sw.LAUNCHES
        assert all(len(x) == sw.CTAS for x in r["cycles_per_round_per_cta"])
        assert r["load"] == pytest.approx(ru.group_load(groups, r["rows"])), name
        assert "simulated" in r and REC["simulated_spec"] == "h200"


def test_the_full_table_repeats_the_share_probes_lockstep_runs():
    for place in sw.PLACES:
        a, b = _med(REC["runs"][f"r1024_{place}"]), _med(SHARE["runs"][f"k132_{place}"])
        assert abs(a / b - 1) < 0.03, place


def test_lines_loaded_again_in_one_sector_cost_a_group_least():
    """All lanes in sector 0 on a table of 16 or 64 rows (each line back every 1 or 4 rounds):
    0.29-0.31 cycles a request of the busiest group, well under every rate the spec gives a
    group (0.49-0.58); rotating sectors on the same lines 0.47-0.57."""
    spec = load_spec("h200")
    for rows in (16, 64):
        assert _per_request(f"r{rows}_s0") < 0.32
        assert 0.45 < _per_request(f"r{rows}_rot") < spec.l2_group_private_request_cycles
    assert spec.l2_group_request_cycles > 0.48


def test_the_table_size_must_be_a_power_of_two_in_range():
    for bad in (8, 48, 2048):
        with pytest.raises(ValueError, match="power of two"):
            ru.source(bad)
    assert "const unsigned ROWS = 64u," in ru.source(64)
