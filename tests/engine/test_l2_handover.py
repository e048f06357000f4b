"""Sector hand-over between SMs (``l2_sector_handover_cycles``) against the recorded H100
microbenchmarks of the Lamport exchange (``measurements/h100/lamport_mech.json``).

The mechanism alone on the :class:`gpusim.engine.l2.L2` unit (exact cycles), then the simulator
against the record: the writers family (``lmech_ws_{1,2,4,8}``: 1..8 SMs write every sector;
``lmech_ws_2_warp`` / ``lmech_split_16`` / ``lmech_delay_16``: several stores of ONE SM), and,
as strict expected failures, what the engine still misses (the Lamport exchange without
multi-SM sectors is too fast: the x / xb crossover and the GPU's two polls per group).
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

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "measurements" / "h100" / "lamport_mech.json"
C = 700          # hand-over cycles of the unit tests
WORDS = 1024


def _l2(handover: int = C, polled: bool = True) -> L2:
    spec = dataclasses.replace(load_spec("h100"), l2_sector_handover_cycles=handover,
                               l2_partitions=1, l2_far_extra_cycles=0)
    # warps 0, 1 on SM 0; warps 2, 3 on SM 1
    l2 = L2(spec, WORDS, np.array([0, 0, 1, 1]))
    l2.warm(0, WORDS)
    if polled:   # the words belong to a buffer the kernel polls (as the executor marks them)
        l2.mark_polled(0, WORDS)
    return l2


def _one(l2: L2, warp: int, word: int, t: float, store: bool):
    """Warp ``warp``'s lane 0 alone accesses ``word`` at cycle ``t``: (done, served)."""
    flat = np.zeros((4, 32), dtype=np.int64)
    flat[warp, 0] = word
    active = np.zeros((4, 32), dtype=bool)
    active[warp, 0] = True
    done, served = l2.access(np.array([float(t)]), np.array([warp]), flat, active, 1,
                             "store" if store else "poll", store)
    return float(done[0]), float(served[0, 0])


def test_store_from_another_sm_waits_for_the_hand_over():
    l2 = _l2()
    _, a = _one(l2, 0, 16, 0.0, True)                  # SM 0, sector 2
    _, b = _one(l2, 2, 17, 0.0, True)                  # SM 1, same sector, same time
    assert a == l2.half and b == a + C                 # performed one hand-over later
    assert l2.arrival[17] == b + l2.visibility
    _, c = _one(l2, 0, 18, 0.0, True)                  # back to SM 0: another hand-over
    assert c == b + C


def test_stores_of_one_sm_and_late_stores_pass_at_once():
    l2 = _l2()
    _, a = _one(l2, 0, 16, 0.0, True)
    _, b = _one(l2, 1, 17, 0.0, True)                  # another warp of the same SM
    assert b == a
    _, c = _one(l2, 2, 18, 2 * C, True)                # another SM, long after: no wait
    assert c == 2 * C + l2.half
    _, d = _one(l2, 2, 40, 0.0, True)                  # another sector: independent
    assert d == l2.half


def test_sectors_nobody_polls_are_not_handed_over():
    """Plain stores of several SMs into one sector (the CSR kernel's outputs) pass at once."""
    l2 = _l2(polled=False)
    _, a = _one(l2, 0, 16, 0.0, True)
    _, b = _one(l2, 2, 17, 0.0, True)
    assert b == a == l2.half


def test_no_hand_over_when_the_spec_has_none():
    l2 = _l2(0)
    _one(l2, 0, 16, 0.0, True)
    _, b = _one(l2, 2, 17, 0.0, True)
    assert b == l2.half


def test_loads_behind_a_held_store_are_served_in_order():
    l2 = _l2()
    _one(l2, 0, 16, 0.0, True)
    _, held = _one(l2, 2, 17, 0.0, True)               # arrives at l2.half, held until `held`
    # a load reaching the sector after the held store arrived sees it (no stale value) ...
    _, s = _one(l2, 1, 17, 10.0, False)
    assert s == held + l2.visibility == l2.arrival[17]
    # ... a load that reached it before returns the old value (timing._stale re-polls it)
    _, s0 = _one(l2, 1, 17, -50.0, False)
    assert s0 == -50.0 + l2.half < l2.arrival[17]
    # and once the store is visible, loads are not delayed
    _, s1 = _one(l2, 1, 17, held + 100.0, False)
    assert s1 == held + 100.0 + l2.half


# --- the record -----------------------------------------------------------------------------

def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


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
    src = load_spec("h100").source("l2_sector_handover_cycles")
    assert "measurements/h100/lamport_mech.json" in src and src.startswith("[C]")
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
    """ws_8 - ws_1 (the fitted difference) within 10%, ws_4 - ws_1 within 30%, ws_2 above
    ws_1; one SM's two warps or two stores cost what one store does (5%)."""
    rec = _record()
    names = ("lmech_ws_1", "lmech_ws_2", "lmech_ws_4", "lmech_ws_8", "lmech_ws_2_warp",
             "lmech_split_16", "lmech_delay_16")
    sim = {n: r["per_op_s"] for n, r in _simulated(names).items()}
    meas = {n: _measured(rec, n) for n in names}

    def extra(d, n):
        return d[n] - d["lmech_ws_1"]

    assert abs(extra(sim, "lmech_ws_8") / extra(meas, "lmech_ws_8") - 1) < 0.10
    assert abs(extra(sim, "lmech_ws_4") / extra(meas, "lmech_ws_4") - 1) < 0.30
    assert sim["lmech_ws_1"] < sim["lmech_ws_2"] < sim["lmech_ws_4"] < sim["lmech_ws_8"]
    assert abs(sim["lmech_ws_2_warp"] / sim["lmech_ws_1"] - 1) < 0.05
    assert abs(sim["lmech_split_16"] / sim["lmech_delay_16"] - 1) < 0.05


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not modelled: the Lamport exchange without multi-SM "
                   "sectors is 20-35% too fast in the engine (lmech_x_N), so it never loses "
                   "to the barrier exchange; the GPU's cross-over is at 9216 words")
def test_exchange_crossover_with_the_barrier():
    rec = _record()
    names = ("lmech_x_4096", "lmech_xb_4096", "lmech_x_9216", "lmech_xb_9216")
    sim = {n: r["per_op_s"] for n, r in _simulated(names).items()}
    meas = {n: _measured(rec, n) for n in names}
    assert meas["lmech_x_4096"] < 0.8 * meas["lmech_xb_4096"]    # the record: Lamport wins ...
    assert meas["lmech_x_9216"] > 0.95 * meas["lmech_xb_9216"]   # ... and no more at 9216
    assert sim["lmech_x_4096"] < 0.8 * sim["lmech_xb_4096"]
    assert sim["lmech_x_9216"] > 0.95 * sim["lmech_xb_9216"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="not modelled: on the GPU the first poll of a group "
                   "almost always misses (2.04 polls per group and round); the engine finds "
                   "the data on the first poll in 30% of the groups")
def test_two_polls_per_group_round():
    rec = _record()
    size = rec["results"]["lmech_ws_1"]["sizes"]["64"]
    gpu = np.mean([p["per_group_round_mean"] for p in size["polls"]])
    assert abs(gpu - 2.0) < 0.1
    r = _simulated(("lmech_ws_1",))["lmech_ws_1"]
    assert abs(1.0 + r["poll_replays_per_first_load"] - gpu) < 0.1 * gpu
