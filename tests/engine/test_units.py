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
