"""Store visibility (``l2_store_visibility_cycles``) and same-warp same-address order in L2.

Each mechanism isolated on the :class:`gpusim.engine.l2.L2` unit (one store, one load, exact
cycles) and on a tiny simulated kernel (a microbenchmark of :mod:`kernels_ir.kernels.microbench`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.l2 import L2
from gpusim.specs import load_spec
from kernels_ir.kernels import microbench as mb

WORDS = 1024


def _spec(vis: int):
    # one L2 partition: the near/far split would change the poll phases this file reasons about
    return dataclasses.replace(load_spec("h100"), l2_store_visibility_cycles=vis, l2_partitions=1,
                               l2_far_extra_cycles=0)


def _one(l2: L2, warp: int, word: int, t: float, store: bool):
    """Warp ``warp``'s lane 0 alone accesses ``word`` at cycle ``t``: (done, served)."""
    flat = np.zeros((4, 32), dtype=np.int64)
    flat[warp, 0] = word
    active = np.zeros((4, 32), dtype=bool)
    active[warp, 0] = True
    done, served = l2.access(np.array([float(t)]), np.array([warp]), flat, active, 1,
                             "store" if store else "poll", store)
    return float(done[0]), float(served[0, 0])


@pytest.mark.parametrize("vis", [0, 87, 500])
def test_store_visible_vis_cycles_after_the_slice_serves_it(vis):
    l2 = L2(_spec(vis), WORDS)
    _one(l2, 1, 40, 0.0, False)            # warm the sector: no DRAM miss below
    _, served = _one(l2, 0, 40, 1000.0, True)
    assert served == 1000.0 + l2.half      # the store reaches its slice after half a round trip
    assert l2.arrival[40] == served + vis  # ... and is visible vis cycles later
    # another warp's poll served before that reads the old value (timing._stale replays it)
    _, seen_at = _one(l2, 1, 40, 1001.0, False)
    assert (seen_at < l2.arrival[40]) == (vis > 1)


@pytest.mark.parametrize("vis", [0, 87, 500])
def test_own_pending_store_delays_the_load_not_a_replay(vis):
    l2 = L2(_spec(vis), WORDS)
    _one(l2, 2, 64, 0.0, False)
    _, st = _one(l2, 0, 64, 1000.0, True)
    done, served = _one(l2, 0, 64, 1001.0, False)       # same warp, same word, 1 cycle later
    assert served == max(1001.0 + l2.half, st + vis)    # in order: waits for its own store
    assert served >= l2.arrival[64]                     # never stale: no poll replay
    assert done == served + l2.half
    done2, served2 = _one(l2, 1, 64, 1001.0, False)     # another warp: no such wait
    assert served2 == 1001.0 + l2.half and done2 == served2 + l2.half


def test_an_atomic_is_its_warps_last_write():
    """A thread's accesses to one address are ordered (coherence): after an atomic its warp is
    the word's writer, so the warp's next load of the word is served after the atomic."""
    l2 = L2(_spec(300), WORDS)
    _one(l2, 0, 8, 0.0, True)
    active = np.zeros((4, 32), dtype=bool)
    active[1, 0] = True
    flat = np.full((4, 32), 8, dtype=np.int64)
    l2.atomic(np.array([10.0]), np.array([1]), flat, active)
    assert l2.writer[8] == 1


def _per_op_cycles(name: str, spec, sizes=(4, 8)) -> float:
    pts = []
    for s in sizes:
        m = mb.build(name, s)
        pts.append((m.ops, simulate(m.kernel, m.inputs, spec).cycles))
    (o1, c1), (o2, c2) = pts
    return (c2 - c1) / (o2 - o1)


def test_store_visibility_microbenchmark_costs_exactly_vis_more():
    """One warp stores a flag and polls it. Its poll issues ``mio_issue_interval_cycles`` after
    the store (the stall count between two memory-pipe instructions) and reaches the slice that
    much later: a store visible by then is seen at once; a later one makes the poll stale, and
    with the same-warp order its re-poll is served when the store is visible, so each cycle of
    visibility from there on costs exactly one cycle more."""
    gap = _spec(0).mio_issue_interval_cycles
    assert _per_op_cycles("store_visibility", _spec(gap - 2)) == \
        _per_op_cycles("store_visibility", _spec(0))
    base = _per_op_cycles("store_visibility", _spec(2 * gap))
    assert base > _per_op_cycles("store_visibility", _spec(0))     # the re-poll
    for vis in (87, 300):
        assert _per_op_cycles("store_visibility", _spec(vis)) == pytest.approx(
            base + vis - 2 * gap, abs=1.0)


def test_flag_round_trip_grows_with_visibility():
    """Two hand-offs per round trip, each seen by a poll of another SM that re-polls at once:
    each is seen at the first poll served after it is visible, so ``vis`` later visibility moves
    it by ``vis`` give or take one poll period (the poll loop's round trip, at most the far
    round trip plus a few issue cycles): between 2 (vis - period) and 2 (vis + period) more."""
    spec0 = _spec(0)
    period = spec0.l2_hit_latency_cycles + spec0.l2_far_extra_cycles / 2 + 16
    base = _per_op_cycles("flag_round_trip", spec0)
    slow = {vis: _per_op_cycles("flag_round_trip", _spec(vis)) for vis in (400, 800)}
    for vis, cyc in slow.items():
        assert base + 2 * (vis - period) <= cyc <= base + 2 * (vis + period), vis
    assert base < slow[400] < slow[800]
