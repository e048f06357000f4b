"""``measurements/l2_sweep_share.py`` (record ``h200/l2_sweep_share.json``): 132 SMs sweeping one
table of random lines, 1 to 132 of them on a row at once; and the engine's sharers at once
(``l2_group_share_window_cycles``) that the record measures."""

from __future__ import annotations

import copy
import json
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine.l2 import L2
from gpusim.specs import load_group_map, load_spec
from measurements import l2_sweep_share as sw

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h200" / "l2_sweep_share.json").read_text())


def _med(run) -> float:
    return statistics.median(run["cycles_per_round_per_sm"])


def test_the_record_is_every_run_with_its_raw_repeats():
    p = REC["provenance"]
    assert "H200" in p["gpu_name"] and p["sm_count"] == 132
    assert set(p["sm_clock_mhz_samples"]) == {1980}
    assert REC["map_check"] == {"pairs": 200, "wrong": 0} and REC["start_late"] == 0
    assert (REC["rows"], REC["lines"], REC["mult"]) == (sw.ROWS, sw.LINES, sw.MULT)
    assert set(REC["runs"]) == {f"k{k}_{p}" for k in sw.SHARE for p in sw.PLACES}
    for name, r in REC["runs"].items():
        assert len(r["cycles_per_round_per_cta"]) == sw.LAUNCHES, name
        for launch, med in zip(r["cycles_per_round_per_cta"], r["cycles_per_round_per_sm"],
                               strict=True):
            assert len(launch) == sw.CTAS and med == pytest.approx(statistics.median(launch))
        assert (r["sector"], r["word"]) == sw.PLACES[r["place"]], name


def test_the_rows_are_disjoint_and_the_load_is_the_records():
    lines = sw.row_lines(np.arange(sw.ROWS))
    assert np.array_equal(np.sort(lines.reshape(-1)), np.arange(sw.LINES))
    groups = np.asarray(load_group_map(load_spec("h200").l2_group_map))
    assert sw.group_load(groups) == pytest.approx(REC["load"])
    assert 23 < REC["load"]["span"] < 24 and REC["load"]["groups"] == 47


@pytest.mark.parametrize("k", sw.SHARE)
def test_k_sms_start_on_each_row(k):
    st = sw.starts(k)
    coh = sw.CTAS // k
    for w in range(sw.WARPS):
        col = st[:, w]
        assert len(np.unique(col)) == coh                    # one row a cohort
        assert np.bincount(np.unique(col, return_inverse=True)[1]).tolist() == [k] * coh
    assert len(np.unique(st)) == coh * sw.WARPS
    assert st.min() >= 0 and st.max() < sw.ROWS
    with pytest.raises(ValueError, match="divisor"):
        sw.starts(5)


def test_on_the_gpu_one_sm_a_row_costs_the_private_rate():
    """Every SM loads every line over the kernel, yet with the SMs spread over the table (about
    8 loading a row within a round) the busiest group costs 0.47-0.55 cycles a request: the
    private lines' rate (0.58, the rule's), not the shared one with the span's factor (0.49 x
    1.46 = 0.71) that counting every SM so far gives."""
    spec = load_spec("h200")
    busiest = REC["load"]["max"]
    for place in sw.PLACES:
        c = _med(REC["runs"][f"k1_{place}"]) / busiest
        assert 0.46 < c < spec.l2_group_private_request_cycles, (place, c)
    shared_rule = spec.l2_group_request_cycles * (
        1 + spec.l2_group_span_per_doubling * np.log2(REC["load"]["span"]))
    assert shared_rule > 0.7


def test_on_the_gpu_lockstep_sharing_is_no_dearer():
    """All 132 SMs on a row at once cost no more than one at a time: 0.45-0.48 against 0.47-0.55
    (the span's factor, measured on few hot lines, does not show here: not modelled)."""
    for place in sw.PLACES:
        assert _med(REC["runs"][f"k132_{place}"]) <= 1.02 * _med(REC["runs"][f"k1_{place}"])


def test_the_simulator_prices_one_sm_a_row_near_the_gpu_and_lockstep_far_above():
    """The record's simulated values: k = 1 +12% (rotating sectors) and +30% (sector 0, which
    the GPU serves faster: not modelled), where counting every SM so far gave +35% / +56%
    (``simulated_so_far``, ``l2_rule_screen.json``'s ``so_far``); k = 132 still +88% / +101%
    (the span's factor)."""
    runs = REC["runs"]
    assert REC["simulated_spec"] == "h200" and "l2_rule_screen" in REC["simulated_so_far_from"]
    for place in sw.PLACES:
        one = runs[f"k1_{place}"]
        assert abs(one["simulated"] / _med(one) - 1) < 0.31, place
        assert runs[f"k132_{place}"]["simulated"] / _med(runs[f"k132_{place}"]) > 1.5
    assert abs(runs["k1_rot"]["simulated"] / _med(runs["k1_rot"]) - 1) < 0.15


def _l2(window: float):
    spec = copy.copy(load_spec("h200"))
    object.__setattr__(spec, "l2_group_share_window_cycles", window)
    return L2(spec, 1 << 16, sm_of_warp=np.arange(64))


def test_sharers_at_once_count_only_the_recent_windows():
    l2 = _l2(1024.0)
    line = np.zeros(1, dtype=np.int64)
    bit = lambda sm: np.array([1 << sm], dtype=np.uint64)      # noqa: E731
    seen = [l2._sharers(line, bit(sm), np.array([3000.0 * sm]))[0] for sm in range(10)]
    assert seen == [1] * 10                 # one SM every 3000 cycles: never two windows apart
    l2 = _l2(1024.0)
    seen = [l2._sharers(line, bit(sm), np.array([600.0 * sm]))[0] for sm in range(10)]
    assert max(seen) <= 4 and seen[1] == 2  # this window and the one before
    l2 = _l2(1024.0)
    many = l2._sharers(np.zeros(40, dtype=np.int64),
                       np.left_shift(np.uint64(1), np.arange(40, dtype=np.uint64)),
                       np.full(40, 5000.0))
    assert many.tolist() == [40.0] * 40     # forty SMs at once
    late = l2._sharers(line, bit(41), np.array([100.0]))      # an older window counts as now
    assert late[0] == 41


def test_without_a_window_the_sharers_are_every_sm_so_far():
    l2 = _l2(0.0)
    assert l2.share_window == 0
    sm = np.arange(10)
    warp_lines = np.zeros(1, dtype=np.int64)
    costs = [l2._group_costs(warp_lines, np.zeros(1, dtype=np.int64), sm[i:i + 1],
                             np.array([3000.0 * i]))[0] for i in range(10)]
    spec = load_spec("h200")
    assert costs[0] == pytest.approx(spec.l2_group_private_request_cycles)
    assert costs[-1] < costs[0]             # ten SMs so far: part shared
    l2 = _l2(1024.0)
    costs = [l2._group_costs(warp_lines, np.zeros(1, dtype=np.int64), sm[i:i + 1],
                             np.array([3000.0 * i]))[0] for i in range(10)]
    assert costs == pytest.approx([spec.l2_group_private_request_cycles] * 10)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_cuda_kernel_keeps_a_rolled_loop_of_sixteen_loads(tmp_path):
    src = tmp_path / "sweep.cu"
    src.write_text(sw.SOURCE)
    subprocess.run(["nvcc", "-arch=sm_90", "-ptx", str(src), "-o", str(tmp_path / "s.ptx")],
                   check=True, capture_output=True)
    ptx = (tmp_path / "s.ptx").read_text()
    assert ptx.count("ld.relaxed.gpu.global.u32") == sw.LOADS


@pytest.mark.slow
def test_the_ir_form_checks_its_values_in_the_simulator():
    from measurements.probe import simulate_checked

    for k, place, rows in ((1, "rot", sw.ROWS), (132, "s0", sw.ROWS), (132, "rot", 16)):
        sector, word = sw.PLACES[place]
        res = simulate_checked(sw.sweep_ir(k, 1, sector, word, rows=rows), load_spec("h200"),
                               l2_warm=True)
        assert res.cycles > 0


def test_the_records_simulated_values_are_the_screens():
    """The record's simulated cycles are the rule screen's (``l2_rule_screen.json``) under
    today's rule and under the sharers so far: the same function, the same spec."""
    scr = json.loads((ROOT / "measurements" / "h200" / "l2_rule_screen.json").read_text())
    for name, r in REC["runs"].items():
        got = scr["simulated"][f"sweep:{name}"]
        assert r["simulated"] == pytest.approx(got["today"], abs=0.01), name
        assert r["simulated_so_far"] == pytest.approx(got["so_far"], abs=0.01), name
        assert scr["measured"][f"sweep:{name}"] == pytest.approx(_med(r))
