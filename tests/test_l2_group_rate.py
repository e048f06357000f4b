"""``measurements/l2_group_rate.py``: what one H200 L2 contention group serves, by the SMs that
share its lines, the lines in use and the groups a warp load spans, and the SM's own request rate
(record ``h200/l2_group_rate.json.xz``), with the spec values and the rule taken from it."""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_group_map, load_spec
from gpusim.specs.rules import group_request_cost
from measurements import l2_group_rate as gr
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
REC = read_record(str(ROOT / "measurements" / "h200" / "l2_group_rate.json"))
RUNS = {**REC["runs"], **REC["rate4_runs"]}
GROUPS = np.asarray(load_group_map(REC["provenance"]["group_map"]))


def _cycles(name: str) -> float:
    r = RUNS[name]
    return statistics.median(r.get("cycles_per_load_per_sm") or r["cycles_per_round_per_sm"])


def _per_request(name: str) -> float:
    """Cycles a request of the run's busiest group."""
    return _cycles(name) / RUNS[name]["load"]["max"]


def _per_sm_request(name: str) -> float:
    """Cycles a one-line request per SM (a hammer run's figure is a warp load of every warp, a
    rate4 run's a round of 4)."""
    r = RUNS[name]
    loads = 1 if "cycles_per_load_per_sm" in r else 4
    return _cycles(name) / (loads * 32 * r["warps"])


def test_the_record_is_an_h200_run_with_its_raw_repeats_on_a_checked_map():
    assert "H200" in REC["provenance"]["gpu_name"]
    assert REC["map_check"] == {"pairs": 200, "wrong": 0}
    for name, r in RUNS.items():
        per_cta = r.get("cycles_per_load_per_cta") or r["cycles_per_round_per_cta"]
        assert len(per_cta) == REC["launches"] == 5, name
        assert all(len(x) == r.get("ctas", gr.CTAS) for x in per_cta), name


def test_the_lines_are_regenerated_from_the_seeds():
    """The record keeps each run's lines as a SHA-1; the generators give them back."""
    sets = gr.all_sets(GROUPS)
    assert set(sets) == set(RUNS)
    for name, arr in sets.items():
        got = hashlib.sha1(np.asarray(arr, dtype=np.int32).tobytes()).hexdigest()
        assert got == RUNS[name]["lines_sha1"], name


def test_the_sm_sends_a_request_a_cycle_where_the_l2_does_not_bind():
    """On 16 or 66 SMs, 4 or 16 warps, sector 0 or rotating: 0.999-1.002 cycles a one-line
    request per SM; the H200's spec takes 1.00. On all 132 SMs the L2 binds: 1.0-1.13 with
    every lane in one sector, 1.40-1.60 with the sectors rotating."""
    few = [n for n in RUNS if n.endswith(("_c16", "_c66"))]
    assert len(few) == 8
    for n in few:
        assert _per_sm_request(n) == pytest.approx(1.0, abs=0.005), n
    assert load_spec("h200").l2_request_cycles_per_sm == 1.0
    for w in (4, 16):
        assert 1.0 < _per_sm_request(f"rand4_s0_w{w}") < 1.13
        assert 1.38 < _per_sm_request(f"rand4_rot_w{w}") < 1.62


def test_a_group_serves_alike_whatever_the_span_when_few_sms_share_a_line():
    """Lines dealt over 1, 4, 16 or all 47 groups (a warp load spans that many, up to 32), one
    to 97 SMs a line: 0.553-0.568 cycles a request of the busiest group, at 4 and 16 warps (32
    or 128 lines of each of 16 groups, 0.548-0.565). The same 16 groups on 2 lines each that all
    132 SMs load cost 15% more (0.643-0.644)."""
    for w in (4, 16):
        for g in (1, 4, 16, 47):
            assert 0.55 < _per_request(f"spread_g{g}_w{w}") < 0.575, (g, w)
        for n in (f"lines128_g16_w{w}", f"lines32_g16_w{w}"):
            assert 0.545 < _per_request(n) < 0.575, n
        assert _per_request(f"hot_g16_w{w}") > 1.12 * _per_request(f"spread_g16_w{w}")


def test_one_sector_for_every_lane_is_served_faster_than_rotating_sectors():
    """Eight groups bound: every lane in sector 0, 1, 2 or 3 (any word) 0.506-0.509 cycles a
    request, the sectors rotating from load to load 0.552-0.553 (9% more); on all 47 groups
    the fixed sector leaves the groups short of binding (0.36-0.38 at the busiest)."""
    for w in (4, 16):
        fixed = [_per_request(f"g8_{p}_w{w}") for p in ("s0", "s1", "s2", "s3", "s0_lanew")]
        rot = [_per_request(f"g8_{p}_w{w}") for p in ("srot", "rot")]
        assert max(fixed) - min(fixed) < 0.005 and 0.50 < min(fixed)
        assert all(1.07 < r / fixed[0] < 1.11 for r in rot)
        assert _per_request(f"rand4_s0_w{w}") < 0.39


def test_the_rule_charges_the_span_to_shared_lines_only():
    """``group_request_cost`` on the H200's spec: a warp load over 16 or 32 groups of lines one
    or two SMs load costs what one over a single group does (the spread runs); at 132 SMs a line
    the span's factor stays (the hot runs, the queues runs)."""
    spec = load_spec("h200")
    one = float(group_request_cost(spec, 1.5, 1))
    assert float(group_request_cost(spec, 1.5, 16)) == one == float(group_request_cost(spec, 2, 32))
    assert float(group_request_cost(spec, 132, 16)) == pytest.approx(
        float(group_request_cost(spec, 132, 1)) * (1 + 4 * spec.l2_group_span_per_doubling))


def test_the_simulator_beside_the_record():
    """The record's simulated runs (``--simulate``, today's rule): the spread and few-line runs
    the span no longer over-prices are within -8% to +14% (they were +25% to +62% with the
    span on every line), the hot runs within -4% to +7%. Left: on 66 SMs with 4 warps the IR
    form is +50% to +62% (nvcc unrolls the CUDA loop 4 times, the IR form does not:
    ``test_l2_overlap.py``; unrolled alike +13% to +15%), and one sector for every lane is not
    faster in the simulator (unrolled, sector 0 +71% where rotating sectors are +30%)."""
    sim = {n: RUNS[n]["simulated"] / _cycles(n) - 1 for n in gr.SIM_RUNS}
    assert REC["simulated_spec"] == "h200"
    for n in ("spread_g1_w4", "spread_g4_w4", "spread_g16_w4", "lines128_g16_w4",
              "lines32_g16_w4", "lines128_g4_w4", "g8_rot_w4"):
        assert -0.09 < sim[n] < 0.15, (n, sim[n])
    for n in ("hot_g1_w4", "hot_g4_w4", "hot_g16_w4"):
        assert -0.05 < sim[n] < 0.08, (n, sim[n])
    for n in ("rand4_s0_w4_c66", "rand4_rot_w4_c66"):
        assert 0.45 < sim[n] < 0.65, (n, sim[n])
        # unrolled as nvcc unrolls the CUDA loop: +13% / +15%
        assert 0.10 < RUNS[n]["simulated_unrolled"] / _cycles(n) - 1 < 0.20, n
    # at 132 SMs unrolling leaves the groups' side: sector 0 +71%, rotating +30%; g8 +18% / +9%
    unrolled = {n: RUNS[n]["simulated_unrolled"] / _cycles(n) - 1
                for n in ("rand4_s0_w4", "rand4_rot_w4", "g8_s0_w4", "g8_rot_w4")}
    assert unrolled["rand4_s0_w4"] > 2 * unrolled["rand4_rot_w4"] > 0.5
    assert unrolled["g8_s0_w4"] > unrolled["g8_rot_w4"] > 0.05


@pytest.mark.slow
def test_a_simulated_value_is_todays():
    name = "spread_g16_w4"
    arr = np.asarray(gr.all_sets(GROUPS)[name], dtype=np.int32)
    got = gr.simulated(load_spec("h200"), RUNS[name], arr)
    assert got == pytest.approx(RUNS[name]["simulated"], abs=0.01)
