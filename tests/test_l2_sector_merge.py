"""``measurements/l2_sector_merge.py`` (record ``h200/l2_sector_merge.json``, GPU only): the
lockstep sweep with the sector chosen per CTA or per warp beside one sector for all and the
rotation."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_group_map, load_spec
from measurements import l2_sector_merge as sm
from measurements import l2_sweep_reuse as ru
from measurements import l2_sweep_share as sw

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h200" / "l2_sector_merge.json").read_text())
REUSE = json.loads((ROOT / "measurements" / "h200" / "l2_sweep_reuse.json").read_text())


def _per_request(name, rec=REC) -> float:
    r = rec["runs"][name]
    return statistics.median(r["cycles_per_round_per_sm"]) / r["load"]["max"]


def test_the_record_is_every_table_and_place_with_raw_repeats():
    p = REC["provenance"]
    # the first sample is taken at start-up, before any work (the idle clock); the runs count
    # clock64 cycles, so the clock's value does not enter them
    assert "H200" in p["gpu_name"] and set(p["sm_clock_mhz_samples"][1:]) == {1980}
    assert REC["map_check"] == {"pairs": 200, "wrong": 0} and REC["start_late"] == 0
    assert set(REC["runs"]) == {f"r{t}_{p}" for t in sm.TABLES for p in sm.PLACES}
    groups = np.asarray(load_group_map(load_spec("h200").l2_group_map))
    for name, r in REC["runs"].items():
        assert (r["sector"], r["word"]) == sm.PLACES[r["place"]], name
        assert len(r["cycles_per_round_per_cta"]) == sw.LAUNCHES
        assert all(len(x) == sw.CTAS for x in r["cycles_per_round_per_cta"])
        assert r["load"] == pytest.approx(ru.group_load(groups, r["rows"])), name


def test_the_shared_placements_repeat_the_reuse_record():
    for t in sm.TABLES:
        for place in ("s0", "rot"):
            name = f"r{t}_{place}"
            assert _per_request(name) == pytest.approx(_per_request(name, REUSE), rel=0.04)


def test_only_one_sector_for_every_sm_is_cheap():
    """Each SM (``cta``) or each warp (``warp``) in a sector of its own costs a group 0.51-0.59
    cycles a request on the tables of 16 and 64 rows, about the private lines' rate, like the
    rotation; only every SM in one sector (``s0``) costs 0.29-0.31. So the cheap service needs
    the whole GPU asking for one sector of each line, not one sector per SM's stream."""
    for t in (16, 64):
        s0 = _per_request(f"r{t}_s0")
        assert s0 < 0.32
        for place in ("cta", "warp", "rot"):
            assert 0.46 < _per_request(f"r{t}_{place}") < 0.60, (t, place)
            assert _per_request(f"r{t}_{place}") > 1.5 * s0


def test_the_source_adds_the_two_placements():
    src = sm.source(64)
    assert "sector == 5 ? (int)(blockIdx.x & 3)" in src and "sector == 6 ? (w & 3)" in src
    assert "const unsigned ROWS = 64u," in src
