"""L2 slices, DRAM behind them, and the per-word arrival clock that drives polling (one unit).

Model (every number from the spec):
- A warp's global access becomes one request per distinct ``l2_sector_bytes`` sector its active
  lanes touch (coalescing); each request is one L2 transaction.
- Sector ``s`` lives in slice ``(s ^ (s // l2_slices)) % l2_slices`` (a simple XOR fold so that
  strided streams spread over slices). A slice serves ``l2_bytes_per_cycle_per_slice`` bytes per
  cycle (:class:`BucketServer`: bandwidth per 128-cycle bucket, with backfill).
- A request reaches its slice ``l2_hit_latency_cycles / 2`` after issue and the reply returns
  the other half later (the round trip splits evenly; documented approximation).
- DRAM: the first touch of a sector is a miss (cold L2; data stays resident afterwards: no
  capacity evictions are modelled). Misses queue on one aggregate DRAM channel at
  ``dram_bandwidth_bytes_per_s / clock_hz`` bytes per cycle and add
  ``dram_latency_cycles - l2_hit_latency_cycles`` to the round trip.
- Atomics execute at the slice; atomics on one word serialise, one every
  ``l2_atomic_same_address_cycles``; their round trip is ``l2_atomic_latency_cycles``.
- ``arrival[word]``: cycle at which the last store or atomic to the word was performed at L2. A
  polling load served at the slice before that cycle returned the old value.
"""

from __future__ import annotations

import numpy as np

__all__ = ["L2", "fifo"]

_BIG = float(2 ** 44)


def fifo(keys: np.ndarray, arrive: np.ndarray, service: float, free: np.ndarray) -> np.ndarray:
    """Start cycles of requests at FIFO servers.

    ``keys``: server of each request; ``arrive``: arrival cycle; ``service``: cycles each takes;
    ``free``: float array, next free cycle per server (updated in place). Requests at one server
    are served in order of arrival (ties by position). Returns the start cycle of each request.
    """
    n = keys.size
    if n == 0:
        return np.zeros(0)
    order = np.lexsort((np.arange(n), arrive, keys))
    k, a = keys[order], arrive[order]
    head = np.ones(n, dtype=bool)
    head[1:] = k[1:] != k[:-1]
    seg = np.cumsum(head) - 1
    first = np.flatnonzero(head)
    pos = np.arange(n) - first[seg]                       # index within its server's queue
    # start_k = max(free0, max_{j<=k}(a_j - j*d)) + k*d  (segmented running max)
    v = a - pos * service
    v = np.maximum(v, free[k]) if n else v
    run = np.maximum.accumulate(v + seg * _BIG) - seg * _BIG
    start = run + pos * service
    last = np.append(first[1:], n) - 1
    free[k[last]] = start[last] + service
    out = np.empty(n)
    out[order] = start
    return out


class BucketServer:
    """Bandwidth of a set of servers (L2 slices) in time buckets, with backfill.

    Requests are handed over in lockstep order, not in time order, so a FIFO "next free" per
    server would queue an early request behind a later one. Instead each server can serve
    ``bucket / service`` requests per ``bucket`` cycles; a request takes the first bucket at or
    after its arrival that has room, at ``max(arrival, bucket start + position * service)``.
    Bandwidth is thus exact per bucket and approximate inside one (documented approximation).
    """

    RING = 4096  # buckets remembered per server

    def __init__(self, n_servers: int, service: float, bucket: int = 128):
        self.service, self.bucket = float(service), bucket
        self.cap = max(1, int(bucket / service))
        self.used = np.zeros((n_servers, self.RING), dtype=np.int64)
        self.tag = np.full((n_servers, self.RING), -1, dtype=np.int64)

    def serve(self, keys: np.ndarray, arrive: np.ndarray) -> np.ndarray:
        out = np.empty(arrive.size)
        todo = np.arange(arrive.size)
        t = arrive.astype(np.float64).copy()
        while todo.size:
            k, tt = keys[todo], t[todo]
            b = np.floor(tt / self.bucket).astype(np.int64)
            slot = b & (self.RING - 1)
            stale = self.tag[k, slot] != b
            self.used[k[stale], slot[stale]] = 0
            self.tag[k[stale], slot[stale]] = b[stale]
            order = np.lexsort((np.arange(k.size), tt, b, k))
            ks, bs = k[order], b[order]
            head = np.ones(k.size, dtype=bool)
            head[1:] = (ks[1:] != ks[:-1]) | (bs[1:] != bs[:-1])
            first = np.maximum.accumulate(np.where(head, np.arange(k.size), 0))
            pos = np.empty(k.size, dtype=np.int64)
            pos[order] = np.arange(k.size) - first
            u = self.used[k, slot] + pos
            ok = u < self.cap
            out[todo[ok]] = np.maximum(tt[ok], b[ok] * self.bucket + u[ok] * self.service)
            np.add.at(self.used, (k[ok], slot[ok]), 1)
            t[todo[~ok]] = (b[~ok] + 1) * self.bucket
            todo = todo[~ok]
        return out


class L2:
    def __init__(self, spec, total_words: int):
        self.spec = spec
        self.sector_words = spec.l2_sector_bytes // 4
        self.slices = spec.l2_slices
        self.slice_server = BucketServer(spec.l2_slices, spec.l2_sector_bytes
                                         / spec.l2_bytes_per_cycle_per_slice)
        self.sector_service = spec.l2_sector_bytes / spec.l2_bytes_per_cycle_per_slice
        self.half = spec.l2_hit_latency_cycles / 2.0
        self.dram_extra = max(0.0, spec.dram_latency_cycles - spec.l2_hit_latency_cycles)
        self.dram_service = spec.l2_sector_bytes / (spec.dram_bandwidth_bytes_per_s
                                                    / spec.clock_hz)
        self.dram_free = np.zeros(1)
        n_sectors = -(-total_words // self.sector_words) + 1
        self.touched = np.zeros(n_sectors, dtype=bool)
        self.arrival = np.zeros(total_words + 4)         # cycle each word was last written at L2
        self.atomic_free: dict[int, float] = {}
        self.transactions = {"data": 0, "poll": 0, "atomic": 0, "store": 0}

    def slice_of(self, sector: np.ndarray) -> np.ndarray:
        return (sector ^ (sector // self.slices)) % self.slices

    def requests(self, warps: np.ndarray, flat: np.ndarray, active: np.ndarray, width: int):
        """Distinct (warp, sector) pairs: returns (req_warp, req_sector, lane_req index)."""
        sec = (flat[warps] + 0) // self.sector_words       # first word's sector per lane
        if width > 1:  # an aligned 8/16-byte access never crosses a 32-byte sector
            pass
        act = active[warps]
        key = np.where(act, sec, -1)
        srt = np.sort(key, axis=1)
        new = np.ones(srt.shape, dtype=bool)
        new[:, 1:] = srt[:, 1:] != srt[:, :-1]
        new &= srt >= 0
        rw, col = np.nonzero(new)
        return warps[rw], srt[rw, col], rw, sec, act

    def access(self, issue: np.ndarray, warps: np.ndarray, flat: np.ndarray, active: np.ndarray,
               width: int, kind: str, store: bool):
        """Loads/stores of one warp-instruction per row of ``warps`` issued at ``issue``.

        Returns (per-warp completion cycle, per-lane served cycle (rows x 32)).
        """
        rwarp, rsec, rrow, sec, act = self.requests(warps, flat, active, width)
        self.transactions[kind] += int(rsec.size)
        t_arr = issue[rrow] + self.half
        miss = ~self.touched[rsec]
        start = self.slice_server.serve(self.slice_of(rsec), t_arr)
        if miss.any():
            self.touched[rsec[miss]] = True
            if not store:
                d = fifo(np.zeros(int(miss.sum()), dtype=np.int64), start[miss],
                         self.dram_service, self.dram_free)
                start[miss] = d + self.dram_extra
        done_req = start + self.half
        done = np.full(warps.size, -np.inf)
        np.maximum.at(done, rrow, done_req)
        # per lane: served cycle of its sector
        served = np.full(sec.shape, np.inf)
        lut_key = rrow * (self.touched.size + 1) + rsec
        order = np.argsort(lut_key)
        lane_key = (np.arange(warps.size)[:, None] * (self.touched.size + 1) + sec)
        pos = np.searchsorted(lut_key[order], lane_key)
        pos = np.minimum(pos, order.size - 1)
        served = np.where(act, start[order][pos], np.inf)
        if store:
            for j in range(width):
                w = flat[warps] + j
                np.maximum.at(self.arrival, w[act], np.broadcast_to(served, w.shape)[act])
        return done, served

    def atomic(self, issue: np.ndarray, warps: np.ndarray, flat: np.ndarray,
               active: np.ndarray) -> np.ndarray:
        """Atomics of one warp-instruction: per-warp completion cycle; updates ``arrival``."""
        s = self.spec
        rows, lanes = np.nonzero(active[warps])
        addr = flat[warps][rows, lanes]
        self.transactions["atomic"] += int(addr.size)
        t_arr = issue[rows] + s.l2_atomic_latency_cycles / 2.0
        uniq = np.unique(addr)
        free = np.array([self.atomic_free.get(int(a), 0.0) for a in uniq])
        start = fifo(np.searchsorted(uniq, addr), t_arr, s.l2_atomic_same_address_cycles, free)
        for a, f in zip(uniq.tolist(), free.tolist(), strict=True):
            self.atomic_free[a] = f
        np.maximum.at(self.arrival, addr, start)
        done = np.full(warps.size, -np.inf)
        np.maximum.at(done, rows, start + s.l2_atomic_latency_cycles / 2.0)
        return done
