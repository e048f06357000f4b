"""The vectorised timing units against slow, obviously-correct references (one row at a time)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusim.engine.l2 import BucketServer
from gpusim.engine.scheduler import RING, IssueUnit


def _first_fit(issue, pipe, g: int, ready: int, p: int, occ: int) -> int:
    """The scheduler's rule for one row: first cycle >= ready with a free issue slot and ``occ``
    free pipe cycles (a ring slot is taken when it holds the cycle itself)."""
    c = ready
    while True:
        pipe_free = all(pipe[p, g, (c + j) % RING] != c + j for j in range(occ))
        slots = [k for k in range(issue.shape[0]) if issue[k, g, c % RING] != c]
        if pipe_free and slots:
            issue[slots[0], g, c % RING] = c
            for j in range(occ):
                pipe[p, g, (c + j) % RING] = c + j
            return c
        c += 1


@pytest.mark.parametrize("issue_per_cycle", [1, 2])
def test_issue_unit_rounds_match_one_row_at_a_time(issue_per_cycle):
    rng = np.random.default_rng(7)
    groups = 6
    unit = IssueUnit(groups, issue_per_cycle)
    issue = np.full((issue_per_cycle, groups, RING), -1, dtype=np.int64)
    pipe = np.full((4, groups, RING), -1, dtype=np.int64)
    t0 = 0
    for _ in range(150):
        rounds, n = [], 0
        for _ in range(int(rng.integers(1, 4))):
            g = rng.permutation(groups)[:int(rng.integers(1, groups + 1))]
            rounds.append((np.arange(n, n + g.size), g, None))
            n += g.size
        t0 = max(0, t0 + int(rng.integers(-30, 40)))
        ready = (t0 + rng.integers(0, 10, n)).astype(np.int64)
        p, occ = int(rng.integers(0, 4)), int(rng.integers(1, 9))
        got = unit.reserve_rounds(rounds, ready, p, occ)
        want = np.empty(n, dtype=np.int64)
        for rows, g, _ in rounds:
            for r, gg in zip(rows, g, strict=True):
                want[r] = _first_fit(issue, pipe, int(gg), int(ready[r]), p, occ)
        assert np.array_equal(got, want)


def _bucket_rounds(server: BucketServer, used: dict, keys, arrive, cost=None) -> np.ndarray:
    """The bucket rule, round by round with plain Python: per (server, bucket) requests claim
    their cost in order of (time, index); a claim fits when the bucket's work so far plus the
    claims before it this round leave room for it (or it is alone in an empty bucket); the
    others move to the next bucket."""
    out = np.empty(len(arrive))
    cost = [server.service] * len(arrive) if cost is None else list(cost)
    t = {i: float(a) for i, a in enumerate(arrive)}
    while t:
        claims: dict = {}
        for i in sorted(t, key=lambda i: (t[i], i)):
            b = int(np.floor(t[i] / server.bucket))
            claims.setdefault((int(keys[i]), b), []).append(i)
        nxt = {}
        for (k, b), rows in claims.items():
            u0, before, taken = used.get((k, b), 0.0), 0.0, 0.0
            for i in rows:
                u = u0 + before
                if u + cost[i] <= server.bucket or (u0 == 0 and before == 0):
                    out[i] = max(t[i], b * server.bucket + u)
                    taken += cost[i]
                else:
                    nxt[i] = (b + 1) * server.bucket
                before += cost[i]
            used[(k, b)] = u0 + taken
        t = nxt
    return out


@pytest.mark.parametrize("costs", [False, True])
def test_bucket_server_matches_plain_rounds(costs):
    rng = np.random.default_rng(3)
    server = BucketServer(5, 4.0, bucket=32)      # 8 requests per bucket and server
    used: dict = {}
    for _ in range(40):
        n = int(rng.integers(0, 60))
        keys = rng.integers(0, 5, n)
        arrive = rng.integers(0, 400, n) + rng.choice([0.0, 0.5], n)
        cost = rng.choice([0.5, 1.5, 4.0], n) if costs else None
        got = server.serve(keys, arrive, cost)
        assert np.array_equal(got, _bucket_rounds(server, used, keys, arrive, cost))


def _stream_reference(busy: dict, arrive, service: float, bucket: int = 128) -> list:
    """The stream rule one request at a time with plain Python: the free part of each bucket
    (its end: the work booked before the call sits at its start) laid end to end on one axis,
    the call's requests served there in order of arrival, each no earlier than its arrival on
    that axis and one service after the request before it; a start is mapped back into its
    bucket, which books one service. ``busy`` maps bucket -> booked work and is updated."""
    used0 = dict(busy)

    def free(b):
        return max(bucket - used0.get(b, 0.0), 0.0)

    lo = int(min(arrive) // bucket)

    def axis(t):                       # the free time before t, from bucket lo on
        b = int(t // bucket)
        before = sum(free(k) for k in range(lo, b))
        return before + min(max(t - (b * bucket + used0.get(b, 0.0)), 0.0), free(b))

    def real(v):                       # the instant of free-axis position v
        b, cum = lo, 0.0
        while cum + free(b) <= v:
            cum += free(b)
            b += 1
        return b, b * bucket + used0.get(b, 0.0) + (v - cum)

    out, prev = {}, None
    for i in sorted(range(len(arrive)), key=lambda i: (arrive[i], i)):
        v = axis(float(arrive[i])) if prev is None else max(axis(float(arrive[i])),
                                                             prev + service)
        b, t = real(v)
        out[i] = max(float(arrive[i]), t)
        busy[b] = busy.get(b, 0.0) + service
        prev = v
    return [out[i] for i in range(len(arrive))]


def test_stream_server_serves_a_burst_back_to_back():
    from gpusim.engine.l2 import StreamServer

    s = StreamServer(16.25)
    got = s.serve(np.full(2000, 1000.0))
    assert np.allclose(got, 1000.0 + 16.25 * np.arange(2000))
    assert s.serve(np.zeros(0)).size == 0


def test_stream_server_backfills_what_a_fifo_would_leave_idle():
    """Two arrays' requests handed over one after the other (the CSR kernel's values, then its
    indices): the second call's requests take the idle time between the first call's, which a
    next-free FIFO would have queued after them all; no bucket takes more than its cycles of
    work (times inside a bucket are approximate, as the slices' are)."""
    from gpusim.engine.l2 import StreamServer

    svc = 16.0
    s = StreamServer(svc)
    first = np.arange(200) * 2 * svc            # half the channel's rate
    a, b = s.serve(first), s.serve(first + 1.0)
    assert np.allclose(a, first)
    assert b.max() < first.max() + 2 * svc      # a FIFO: first.max() + 200 services
    per_bucket = np.bincount((np.concatenate([a, b]) // 128).astype(int))
    assert per_bucket.max() * svc <= 128


def test_stream_server_is_the_rule_one_request_at_a_time():
    from gpusim.engine.l2 import StreamServer

    rng = np.random.default_rng(11)
    svc = 16.25
    s, busy = StreamServer(svc), {}
    for _ in range(6):
        arrive = rng.uniform(0, 5000, 300).round(1)
        got = s.serve(arrive)
        want = _stream_reference(busy, list(arrive), svc)
        assert np.allclose(got, want), np.abs(got - np.array(want)).max()


def test_stream_server_refuses_what_it_cannot_remember():
    """Requests older than half the ring before the latest bucket booked, or one call that
    needs more than half of it, raise instead of sharing a ring cell with live buckets."""
    from gpusim.engine.l2 import StreamServer

    s = StreamServer(16.0)
    s.serve(np.array([128.0 * 40000]))
    with pytest.raises(RuntimeError, match="before the latest booked"):
        s.serve(np.array([0.0]))
    with pytest.raises(RuntimeError, match="need more than"):
        StreamServer(16.0).serve(np.zeros(300_000))
    s = StreamServer(16.0)                    # within the window: served, nothing shared
    s.serve(np.array([128.0 * 20000]))
    assert s.serve(np.array([0.0]))[0] == 0.0
