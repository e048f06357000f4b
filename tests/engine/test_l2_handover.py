"""Line hand-over between SMs (``l2_line_handover_cycles``) against the recorded H100
microbenchmarks: the IR ring exchange (``measurements/h100/lamport_ring_ir.json``), whose
lines have 1 or 4 writer SMs, and the Lamport writers family
(``measurements/h100/lamport_mech.json``).

The mechanism alone on the :class:`gpusim.engine.l2.L2` unit (exact cycles), then the simulator
against the records: the ring's multi-writer lines (the fit) and the writers family
(``lmech_ws_{1,2,4,8}``: 1..8 SMs write every sector; ``lmech_ws_2_warp`` / ``lmech_split_16``
/ ``lmech_delay_16``: several stores of ONE SM), and, as strict expected failures, what the
engine still misses (the Lamport exchange is too fast: the x / xb crossover and the GPU's two
polls per group).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine.l2 import L2
from gpusim.specs import load_spec
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "measurements" / "h100" / "lamport_mech.json"
RING = ROOT / "measurements" / "h100" / "lamport_ring_ir.json"
C = 100.0        # cycles per hand-over of the unit tests
WORDS = 1024


def _l2(handover: float = C, polled: bool = True) -> L2:
    spec = dataclasses.replace(load_spec("h100"), l2_line_handover_cycles=handover,
                               l2_partitions=1, l2_far_extra_cycles=0)
    # warps 0, 1 on SM 0; warps 2, 3 on SM 1; warps 4, 5 on SM 2
    l2 = L2(spec, WORDS, np.array([0, 0, 1, 1, 2, 2]))
    l2.warm(0, WORDS)
    if polled:   # the words belong to a buffer the kernel polls (as the executor marks them)
        l2.mark_polled(0, WORDS)
    return l2


def _one(l2: L2, warp: int, word: int, t: float, store: bool):
    """Warp ``warp``'s lane 0 alone accesses ``word`` at cycle ``t``: (done, served)."""
    flat = np.zeros((6, 32), dtype=np.int64)
    flat[warp, 0] = word
    active = np.zeros((6, 32), dtype=bool)
    active[warp, 0] = True
    done, served = l2.access(np.array([float(t)]), np.array([warp]), flat, active, 1,
                             "store" if store else "poll", store)
    return float(done[0]), float(served[0, 0])


def test_a_line_is_handed_to_each_further_sm_once():
    l2 = _l2()
    _, a = _one(l2, 0, 32, 0.0, True)                  # SM 0 takes line 1 at once
    _, b = _one(l2, 2, 40, 0.0, True)                  # SM 1, another sector of the line
    assert a == l2.half and b == a + C                 # one hand-over later
    assert l2.arrival[40] == b + l2.visibility
    _, c = _one(l2, 0, 33, 0.0, True)                  # SM 0 again: it holds the line
    assert c == a
    _, d = _one(l2, 3, 41, 0.0, True)                  # SM 1's other warp: after its hand-over
    assert d == b
    assert l2.handovers == 1


def test_hand_overs_of_all_lines_queue_at_one_server():
    c = 32.0                                           # four hand-overs per 128-cycle bucket
    l2 = _l2(c)
    for line in range(4):                              # SM 0 first on lines 0..3
        _one(l2, 0, 32 * line, 0.0, True)
    done = [_one(l2, w, 32 * line + 8, 0.0, True)[1] for line in range(4) for w in (2, 4)]
    # eight hand-overs (SMs 1 and 2 on four lines), all arriving at l2.half, served by one
    # server in its buckets: the k-th begins at max(arrival, bucket start + position x c)
    begin = [max(l2.half, 128 * (1 + k // 4) + c * (k % 4)) for k in range(8)]
    assert sorted(done) == [b + c for b in begin]
    assert l2.handovers == 8


def test_late_hand_overs_do_not_queue():
    l2 = _l2()
    _one(l2, 0, 32, 0.0, True)
    _, b = _one(l2, 2, 33, 5 * C, True)                # another SM, long after: one hand-over
    assert b == 5 * C + l2.half + C


def test_lines_nobody_polls_are_not_handed_over():
    """Plain stores of several SMs into one line (the CSR kernel's outputs) pass at once."""
    l2 = _l2(polled=False)
    _, a = _one(l2, 0, 16, 0.0, True)
    _, b = _one(l2, 2, 17, 0.0, True)
    assert b == a == l2.half


def test_no_hand_over_when_the_spec_has_none():
    l2 = _l2(0.0)
    _one(l2, 0, 16, 0.0, True)
    _, b = _one(l2, 2, 17, 0.0, True)
    assert b == l2.half


def test_loads_behind_a_held_store_are_served_in_order():
    l2 = _l2()
    _one(l2, 0, 16, 0.0, True)
    _, held = _one(l2, 2, 17, 0.0, True)               # arrives at l2.half, held until `held`
    # a load reaching the line after the held store arrived sees it (no stale value) ...
    _, s = _one(l2, 1, 20, 10.0, False)
    assert s == held + l2.visibility
    # ... a load that reached it before returns the old value (timing._stale re-polls it)
    _, s0 = _one(l2, 1, 17, -50.0, False)
    assert s0 == -50.0 + l2.half < l2.arrival[17]
    # and once the store is visible, loads are not delayed
    _, s1 = _one(l2, 1, 17, held + 100.0, False)
    assert s1 == held + 100.0 + l2.half


# --- the record -----------------------------------------------------------------------------

def _record() -> dict:
    return read_record(str(RECORD))       # kept gzipped


def _measured(rec: dict, name: str) -> float:
    r = rec["results"][name]
    passes = r["per_op_s_passes"]
    return sum(passes) / len(passes)


def test_record_has_provenance_and_the_families():
    rec = _record()
    prov = rec["provenance"]
    assert "H100" in prov["gpu_name"] and prov["sm_count"] == 132
    assert prov["date"].startswith("2026-") and "lamport_mech.py" in prov["command"]
    for name in ("lmech_ws_1", "lmech_ws_2", "lmech_ws_4", "lmech_ws_8", "lmech_ws_2_warp",
                 "lmech_split_16", "lmech_delay_16", "lmech_x_9216", "lmech_xb_9216"):
        r = rec["results"][name]
        assert r["status"] == "ok" and len(r["per_op_s_passes"]) == 2, name
    assert set(rec["families"]["writers"]) >= {"lmech_ws_1", "lmech_ws_8"}
    # the spec value names the record it was fitted to
    src = load_spec("h100").source("l2_line_handover_cycles")
    assert "measurements/h100/lamport_ring_ir.json" in src and src.startswith("[C]")
    # what the writers family says: each SM per sector costs, several stores of one SM do not
    m = {n: _measured(rec, n) for n in ("lmech_ws_1", "lmech_ws_2", "lmech_ws_4", "lmech_ws_8",
                                        "lmech_ws_2_warp", "lmech_split_16", "lmech_delay_16")}
    assert m["lmech_ws_1"] < m["lmech_ws_2"] < m["lmech_ws_4"] < m["lmech_ws_8"]
    assert abs(m["lmech_ws_2_warp"] / m["lmech_ws_1"] - 1) < 0.1
    assert abs(m["lmech_split_16"] / m["lmech_delay_16"] - 1) < 0.05


def _lmech():
    spec = importlib.util.spec_from_file_location("lamport_mech",
                                                  ROOT / "measurements" / "lamport_mech.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _simulated(names) -> dict:
    lm = _lmech()
    spec = load_spec("h100")
    return {n: lm.simulate_bench(spec, n, lm.ENTRIES[n][2]) for n in names}


@pytest.mark.slow
def test_simulator_reproduces_the_writers_family():
    """The check of the fit (not fitted to it): with 2, 4, 8 SMs per sector (8, 16, 32 per
    line) the simulator is within 25% of the GPU and in its order; one SM's two warps cost
    what one does (within 8%: the GPU's own three records of ws_1 span 1025-1135 ns, +-5%
    around their mean, and its ws_2_warp, 1065, lies inside them), and two stores of one warp
    16 loads apart no more than one store after the same loads (GPU 0.99x; how much less the
    engine charges is the known gap below).
    ws_1 itself is the Lamport exchange's known gap (every line has 4 writers there, as in
    the ring's 132_sec, but the wait is too short)."""
    rec = _record()
    names = ("lmech_ws_1", "lmech_ws_2", "lmech_ws_4", "lmech_ws_8", "lmech_ws_2_warp",
             "lmech_split_16", "lmech_delay_16")
    sim = {n: r["per_op_s"] for n, r in _simulated(names).items()}
    meas = {n: _measured(rec, n) for n in names}
    for n in ("lmech_ws_2", "lmech_ws_4", "lmech_ws_8"):
        assert abs(sim[n] / meas[n] - 1) < 0.25, n
    assert sim["lmech_ws_1"] < sim["lmech_ws_2"] < sim["lmech_ws_4"] < sim["lmech_ws_8"]
    assert abs(sim["lmech_ws_2_warp"] / sim["lmech_ws_1"] - 1) < 0.08
    assert sim["lmech_split_16"] / sim["lmech_delay_16"] < 1.05


@pytest.mark.slow
def test_split_stores_cost_what_one_delayed_store_does():
    """Two stores 16 loads apart cost about what one store after the loads does (GPU 0.99x).
    A known gap until the L2 contention groups (``l2_group_map``): the engine's first store
    took the line early and the split cost 0.89x; with the groups 0.91x (1036 / 1144 ns,
    GPU 1324 / 1338)."""
    sim = {n: r["per_op_s"] for n, r in _simulated(("lmech_split_16", "lmech_delay_16")).items()}
    assert sim["lmech_split_16"] / sim["lmech_delay_16"] > 0.9


def _ring():
    spec = importlib.util.spec_from_file_location("lamport_ring",
                                                  ROOT / "measurements" / "lamport_ring.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ring_record_isolates_the_line_hand_over():
    """What the record says, and the simulator's values stored in it (by today's engine):
    multi-writer lines cost per writer SM and share one server (few of them cost nothing),
    and the fitted experiments are within 15% of the GPU."""
    rec = json.loads(RING.read_text())
    g = {k: v["per_op_s"] * 1e9 for k, v in rec["results"].items()}
    sim = {k: v["per_op_s"] * 1e9 for k, v in rec["simulated"]["results"].items()}
    assert g["132_sec"] - g["132"] > 300                  # 4 SMs a line: +376 ns a round
    assert abs(g["132_rows"] / g["132_sec"] - 1) < 0.1    # 32 alternating stores: the same
    assert abs(g["132_warps"] / g["132"] - 1) < 0.05      # 8 warps of one SM: free
    assert g["132_sec4"] < g["132_sec12"] < g["132_sec32"] < g["132_sec"]
    assert abs(g["132_sec4"] / g["132"] - 1) < 0.05       # 4 such lines among 132: free
    for key in _ring().HANDOVER_FIT:
        assert abs(sim[key] / g[key] - 1) < 0.15, key


@pytest.mark.slow
def test_exchange_crossover_with_the_barrier():
    """The Lamport exchange beats the barrier one at 4096 words and no longer at 9216, on the
    GPU and in the engine. Not modelled until the L2 contention groups (``l2_group_map``):
    the engine's Lamport exchange was 20-35% too fast and never lost; with the groups
    ``lmech_x_4096`` / ``_9216`` take 802 / 1691 ns (GPU 866 / 1912), ``lmech_xb_*`` 1220 /
    1737 (GPU 1277 / 1836)."""
    rec = _record()
    names = ("lmech_x_4096", "lmech_xb_4096", "lmech_x_9216", "lmech_xb_9216")
    sim = {n: r["per_op_s"] for n, r in _simulated(names).items()}
    meas = {n: _measured(rec, n) for n in names}
    assert meas["lmech_x_4096"] < 0.8 * meas["lmech_xb_4096"]    # the record: Lamport wins ...
    assert meas["lmech_x_9216"] > 0.95 * meas["lmech_xb_9216"]   # ... and no more at 9216
    assert sim["lmech_x_4096"] < 0.8 * sim["lmech_xb_4096"]
    assert sim["lmech_x_9216"] > 0.95 * sim["lmech_xb_9216"]


@pytest.mark.slow
def test_two_polls_per_group_round():
    """On the GPU the first poll of a group almost always misses (2.04 polls per group and
    round). The engine matched it (2.11) while it issued the poll's check as the IR writes it,
    BITCAST, ISETP, POR a word; SASS issues one ISETP a word (``gpusim.engine.lowering``), and
    with that shorter poll loop the engine polled 2.36 times and the exchange was 17% fast
    (``lmech_ws_1`` 851 ns against 1025). With the loop's edges (``measurements/h200/
    loop_edges.json``: the vote 13 cycles after the checks, the exit test, three tests a pass
    that polls again, on the polling rule's replays too) the pass is as long as the SASS's and
    the engine polls 2.08 times (929 ns): within 10% of the GPU, from a microbenchmark of the
    loop control alone."""
    rec = _record()
    size = rec["results"]["lmech_ws_1"]["sizes"]["64"]
    gpu = np.mean([p["per_group_round_mean"] for p in size["polls"]])
    assert abs(gpu - 2.0) < 0.1
    r = _simulated(("lmech_ws_1",))["lmech_ws_1"]
    assert abs(1.0 + r["poll_replays_per_first_load"] - gpu) < 0.1 * gpu


@pytest.mark.slow
def test_a_replayed_poll_runs_all_three_tests():
    """The spin loop's three compare-and-branch pairs before every poll again
    (``measurements/h200/loop_edges.json``), on the replays too: the engine's polls a group
    and round within 5% of the GPU's 2.04 (``lmech_ws_1``)."""
    rec = _record()
    size = rec["results"]["lmech_ws_1"]["sizes"]["64"]
    gpu = np.mean([p["per_group_round_mean"] for p in size["polls"]])
    r = _simulated(("lmech_ws_1",))["lmech_ws_1"]
    assert abs(1.0 + r["poll_replays_per_first_load"] - gpu) < 0.05 * gpu


def test_only_pollers_before_a_word_delay_it():
    """The pollers rule (``l2_poll_sharer_cycles``, :meth:`L2.seen_delay`): a word is seen
    ``N x`` the sharer cycles after it is visible at L2, ``N`` the SMs whose first polls of its
    line reached L2 before that; an SM that polls only after it, or whose lane is inactive, does
    not count (``measurements/h200/lamport_pollers_wait.json``: pollers that wake after the
    words arrived cost the GPU nothing)."""
    spec = dataclasses.replace(load_spec("h100"), l2_poll_sharer_cycles=2.0)
    l2 = L2(spec, WORDS, np.array([0, 0, 1, 1, 2, 2]))
    l2.track_pollers(0, WORDS)
    flat = np.full((6, 32), 40, dtype=np.int64)          # every lane polls line 1
    active = np.zeros((6, 32), dtype=bool)
    active[[0, 2, 4], 0] = True                            # one warp on each SM
    active[5, 0] = False                                   # SM 2's other warp: inactive
    served = np.full((6, 32), np.inf)
    served[[0, 2, 4], 0] = [100.0, 300.0, 500.0]           # SM 0, 1, 2 first reach the line
    l2.note_polls(np.array([0, 2, 4, 5]), flat, active, served[[0, 2, 4, 5]])
    l2.note_polls(np.array([0]), flat, active, np.full((1, 32), 900.0))   # later: no change
    at = np.array([50.0, 200.0, 400.0, 600.0])             # when the word is visible at L2
    words = np.full(4, 40)
    assert l2.seen_delay(words, at).tolist() == [0.0, 2.0, 4.0, 6.0]
    # a word of a line nobody polled
    assert l2.seen_delay(np.array([WORDS - 1]), np.array([600.0])).tolist() == [0.0]
