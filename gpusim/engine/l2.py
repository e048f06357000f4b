"""L2 slices, DRAM behind them, and the per-word arrival clock that drives polling (one unit).

Model (every number from the spec):
- A warp's global access becomes one request per distinct ``l2_sector_bytes`` sector its active
  lanes touch (coalescing); each request is one L2 transaction.
- Sector ``s`` lives in slice ``(s ^ (s // l2_slices)) % l2_slices`` (a simple XOR fold so that
  strided streams spread over slices). A slice serves ``l2_bytes_per_cycle_per_slice`` bytes per
  cycle (:class:`BucketServer`: bandwidth per 128-cycle bucket, with backfill).
- Contention groups (``l2_group_map``, ``l2_group_request_cycles``; the H100's measured map,
  ``measurements/h100/l2_slice_map.json``): every 128-byte line belongs to one of the map's
  groups (40 on the H100: every 1 KiB holds 2 of them, every 32 KiB all 40), and a group serves
  one load request, the sectors of one line of one warp-instruction, every
  ``l2_group_request_cycles`` (:class:`BucketServer`), after the slice's bandwidth. So a small
  region that every SM loads at once in one-sector requests queues at a few groups: lockstep
  loads of all 132 SMs on 32 lines cost the GPU 302 cycles a warp load and SM when the lines
  lie in 32 groups and 9400 when they lie in one, 4 lines a group (32 consecutive lines) 1367.
  The map covers a 2 MiB-aligned 4 MiB region and repeats beyond it (an approximation). Stores
  are not charged there (not measured). What a request costs its group
  (:func:`gpusim.specs.rules.group_request_cost`, served by :class:`BucketServer`) depends on
  two things measured on the H100 (``measurements/l2_slice_map.py``): how many SMs share its
  line (``l2_group_private_request_cycles`` up to ``l2_group_private_sharers``,
  ``l2_group_request_cycles`` from ``l2_group_shared_sharers`` on: the split runs, 0.58 cycles
  at 5.5-8 SMs a line against 0.45-0.53 at 33-132) and how many groups its warp-instruction's
  requests span (``1 + f x l2_group_span_per_doubling x log2(q)``, ``f`` the line's
  fraction of sharing, 0 up to the private sharers and 1 from the shared ones: the queues runs,
  a warp load over 16 groups 14% dearer than over 1 at the same load a group, where the SMs a
  line grew with the span; the H200's ``measurements/l2_group_rate.py`` shows the span costing
  nothing on lines that one or two SMs load, 0.55-0.57 cycles a request over 1 to 32 groups). A
  spec with both at 0 keeps the single rate (the H100's and the V100's today). A line's sharers
  are the SMs whose loads of it reached L2 in the request's window of
  ``l2_group_share_window_cycles`` or the one before (0: every SM that has loaded it so far):
  the H200's ``measurements/l2_sweep_share.py`` has 132 SMs sweep one table, each line loaded
  by every SM over the kernel, and with the SMs spread over the table (about 8 loading a row
  within a round) a group costs the private lines' rate (0.47-0.55 cycles a request).
- A request reaches its slice half its round trip after issue and the reply returns the other
  half later (the round trip splits evenly; documented approximation).
- Split L2 (``l2_partitions = 2``, the H100's 2 x 25 MB): a sector in the SM's far partition
  costs ``l2_far_extra_cycles`` more round trip than one in its near partition, and
  ``l2_hit_latency_cycles`` is the mean of the two (what a one-sector pointer chase over random
  lines measures): near = mean - extra/2, far = mean + extra/2. SM ``i`` is near partition
  ``i % 2``; the ``l2_partition_interleave_bytes`` unit ``u`` of an address lives in the
  partition of :func:`unit_parity` (a multiplicative hash: neighbouring units are independent
  draws, as ``l2_latency_block_k`` suggests; the real hash is not documented). So a warp's
  loads over several units wait for a far one (microbenchmarks ``l2_latency_wide_k``,
  ``l2_latency_block_k``). Benchmarks of one or two addresses are one draw of the hash; the
  calibration averages them over both assignments (``simulate(l2_flip=True)``).
- Not modelled: near copies. The A100 whitepaper says each L2 partition "localizes and caches
  data for memory accesses from SMs in the GPCs directly connected to the partition", and on the
  H100 8 lines read again and again (``l2_latency_wide_8_revisit``) cost less than one line read
  for the first time. A copy must still lose to a store arriving at the sector's home; a first
  version that let copies serve at the near latency whatever the lockstep order (so a poll could
  see a store sooner than without copies) made the campaign worse and was taken out
  (measurements/README.md).
- DRAM: the first touch of a sector is a miss (cold L2; data stays resident afterwards: no
  capacity evictions are modelled). Misses queue on one aggregate DRAM channel at
  ``dram_bandwidth_bytes_per_s / clock_hz`` bytes per cycle and add
  ``dram_latency_cycles - l2_hit_latency_cycles`` to the round trip. The channel serves in time
  buckets with backfill (:class:`StreamServer`), as the slices do: a request handed over later
  in lockstep order takes the channel's idle time at its arrival, so a stream of two arrays
  (the CSR kernel's values, then its column indices, warp by warp) keeps the channel busy as on
  the GPU (``measurements/h200/csr_dram.json``: a single next-free FIFO left it idle 14% of a
  DRAM-bound step, between one array's requests, while the other's waited).
- Atomics execute at the slice; atomics on one word serialise, one every
  ``l2_atomic_same_address_cycles``; their round trip is ``l2_atomic_latency_cycles``.
- ``arrival[word]``: cycle at which the last store or atomic to the word became visible at L2. A
  polling load served at the slice before that cycle returned the old value. A store becomes
  visible ``l2_store_visibility_cycles`` after the slice served it (microbenchmark
  ``store_visibility``: a warp's store is seen by its own strong load about that much later than
  an L2 hit would serve it); an atomic is visible when performed.
- Same-address order within a warp: a load of a word whose last store came from the same warp is
  served no earlier than that store's ``arrival`` (a thread always observes its own earlier store;
  the hardware serves same-address requests in order), so it never needs a poll replay.
  ``writer[word]`` is the warp of the last store or atomic (-1 if never written). An atomic
  counts as a write here: the PTX memory model orders a thread's accesses to one address
  (coherence), so the grid barrier's poll after its own arrive is served after the arrive is
  performed (``grid_barrier_nofence_c1``: one CTA's arrive and spin is one round trip on the
  H100, 470 cycles; with the poll allowed to pass the atomic the simulator needed a second).
- Line hand-over between SMs (``l2_line_handover_cycles``, the IR ring exchange of
  ``measurements/lamport_ring.py``, record ``measurements/h100/lamport_ring_ir.json``): a
  128-byte line that the kernel polls is taken at once by the first SM that writes it; every
  other SM that writes it is handed the line once, by one GPU-wide server that performs a
  hand-over every ``l2_line_handover_cycles`` (first come, first served, in time buckets like
  the slices); the SM's stores to the line are performed once it holds the line, and further
  stores of SMs that hold it pass at once. What the record says: lines whose four sectors
  four SMs write cost the GPU +376 ns a round when all 132 lines are so written, the same
  when the four SMs' words alternate (32 stores a line), nothing measurable when 4 of the 132
  lines are (so the cost is not a latency per line: each line would then delay the round by
  it), +42 and +148 ns for 12 and 32 such lines: a shared server. A store that waits is a
  pending write of its line: the slice serves the line's requests in order, so a load that
  reaches the line after such a store arrived is served once that store is visible (it never
  returns the older value). Only lines that an L2-coherent poll reads are handed over: the
  CSR kernel's output stores (several SMs per line, nobody polling) run at the GPU's measured
  speed without it (``csr-h256-b1`` of the campaign). Holders are never released (the
  Lamport slots are written once per launch); a slot reused round after round by the same
  SMs (``lmech_slot_ring``) pays its hand-overs in the first round only (not measured).
- Requests leaving an SM (``l2_request_cycles_per_sm``): the load requests an SM sends to L2
  (L1 misses, bypassing loads, polls) leave it at most one every ``l2_request_cycles_per_sm``
  cycles, in time order within 128-cycle buckets (a :class:`BucketServer` per SM, like the
  L1TEX stages of ``smem.py``); a request reaches its slice half its round trip after it left.
  Fitted to the L2-bound benchmarks of ``measurements/h100/gather.json`` / ``csr_mech.json``
  (cycles per warp load per SM over the simulator's requests per load). Nsight counts fewer L2
  requests than the simulator sends (about 2 cycles each), and every one of them is one
  sector, so those records do not tell a request from a sector; the coalesced 128-bit loads of
  ``lmech_xb_4096`` (``lamport_mech.json``) show 3.96 sectors per Nsight request, and charging
  per sector made that barrier exchange 24% too slow: the unit is one 128-byte line of one
  warp-instruction. Stores and atomics are not limited (not measured).
- Pollers of a line (``l2_poll_sharer_cycles``, ``measurements/lamport_pollers.py``, records
  ``measurements/h100/lamport_pollers_curve*.json`` and ``lamport_pollers_merge.json``): a word
  written into a line of a polled data buffer (the Lamport slots; not an atomic counter) is seen
  by the polls ``N x l2_poll_sharer_cycles`` after it is visible at L2 (its arrival plus
  ``l2_store_visibility_cycles``), ``N`` the number of distinct SMs whose first polls of the
  line reached L2 before that (:meth:`L2.note_polls`, :meth:`L2.seen_delay`): pollers that come
  after it do not delay it. What the ring with the
  Lamport step's wait shows (``measurements/lamport_pollers.py --wait``, record
  ``measurements/h200/lamport_pollers_wait.json``): when every CTA sleeps after its stores and
  polls only from the next tick, the extra pollers cost nothing (33 lines: 518 ns a round with
  132 pollers, 516 with their 33 writers) and 132 CTAs exchanging 132 lines run a round in 789
  ns, where counting every SM that ever polled the line made the simulator's round 1000 ns (now
  783). Without the wait (the pollers curve) the two counts nearly agree: every poller is
  already spinning when the word arrives (the 132-line ring without a wait: 925 -> 893 ns, GPU
  853). The fit of ``l2_poll_sharer_cycles`` to the curve under this count
  (``measurements/h100/lamport_pollers_fit.json``) ties 1 and 2 cycles (mean |log error| 0.022,
  0.036 under the old count) and keeps 2. What the other probes show: 33 lines polled by 132
  SMs instead of their 33 writers cost the GPU 50-120 ns a round; a quarter of the bytes (one
  sector of each line) costs the same, half the poll rate removes about a fifth of it; the cost
  grows with the pollers of a line and with the lines. The simulator's polls of many SMs were
  latency-bound and cost nothing. Which unit of the L2
  does this is not known: the rule is the probes' shape, charged at the detection. **A probe
  of the rule itself disagrees** (``measurements/poll_count.py``, record
  ``measurements/h200/poll_count_lag.json``): on the GPU a poll sees a store issued up to about
  25 ns after its loop began half the time, with 33 pollers of a line as with 132, while under
  this rule the simulator's first polls see a quarter of what was stored 50-100 ns before them
  and almost nothing stored later (before the count above: nothing stored less than about 100
  ns before).
  With the delay (and the store visibility) at 0 the simulator's polls match the GPU's, but
  its Lamport kernels go 5-32% fast: the rule stands in for time the simulator misses
  elsewhere, above all in the body after the staging barrier, which it prices 25-89 ns short
  in the barrier kernels too (``measurements/h200/barrier_trace.json``). Kept until that time
  is placed. A grid
  barrier's counter keeps the replay phase of ``timing._Timing._phase`` instead (its
  microbenchmarks, ``measurements/h100/fence.json``, grow with the CTAs as the phase does).
"""

from __future__ import annotations

import functools

import numpy as np

from gpusim.specs import load_group_map
from gpusim.specs.rules import group_request_cost

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
    """Work of a set of servers (L2 slices, contention groups, an SM's request port) in time
    buckets, with backfill.

    Requests are handed over in lockstep order, not in time order, so a FIFO "next free" per
    server would queue an early request behind a later one. Instead a server has ``bucket``
    cycles of work per ``bucket`` cycles, and a request takes its cost (``service`` cycles, or
    a cost of its own, :meth:`serve`'s ``cost``) of the first bucket at or after its arrival
    that has room for it, at ``max(arrival, bucket start + the costs taken before it)``.
    Bandwidth is thus exact per bucket and approximate inside one (documented approximation).
    """

    RING = 4096  # buckets remembered per server

    def __init__(self, n_servers: int, service: float = 1.0, bucket: int = 128):
        self.service, self.bucket = float(service), bucket
        self.used = np.zeros(n_servers * self.RING)
        self.tag = np.full(n_servers * self.RING, -1, dtype=np.int64)

    def serve(self, keys: np.ndarray, arrive: np.ndarray,
              cost: np.ndarray | None = None) -> np.ndarray:
        """Start cycle of each request (server ``keys[i]``, arrival ``arrive[i]``, cost
        ``cost[i]``, default ``service``).

        Rounds: every pending request claims its cost in its current bucket, in order of
        (server, bucket, time, request index); those that do not fit move to the start of the
        next bucket and claim again in the next round. A request alone in an empty bucket
        always fits.
        """
        n = arrive.size
        out = np.empty(n)
        todo = np.arange(n)
        t = arrive.astype(np.float64)  # a copy: the current claim time of each request
        cost = np.full(n, self.service) if cost is None else cost
        bucket, mask = self.bucket, self.RING - 1
        used, tag = self.used, self.tag
        kbase = keys.astype(np.int64) * self.RING
        while todo.size:
            tt = t[todo]
            b = np.floor(tt / bucket).astype(np.int64)
            cell = kbase[todo] + (b & mask)
            stale = tag[cell] != b
            if stale.any():
                used[cell[stale]] = 0.0
                tag[cell[stale]] = b[stale]
            c = cost[todo]
            order = np.lexsort((tt, cell))       # by server and bucket, then time
            cs, cc = cell[order], c[order]
            head = np.empty(todo.size, dtype=bool)
            head[:1] = True
            head[1:] = cs[1:] != cs[:-1]
            run = np.cumsum(cc)
            base = np.maximum.accumulate(np.where(head, run - cc, 0.0))
            before = np.empty(todo.size)
            before[order] = run - cc - base      # costs taken before it in its cell this round
            u = used[cell] + before
            ok = (u + c <= bucket) | ((u == 0) & (before == 0))
            out[todo[ok]] = np.maximum(tt[ok], b[ok] * bucket + u[ok])
            np.add.at(used, cell[ok], c[ok])
            rej = ~ok
            t[todo[rej]] = (b[rej] + 1) * bucket
            todo = todo[rej]
        return out


class StreamServer:
    """One server of a stream (DRAM) in time buckets, with backfill, in one pass.

    Like :class:`BucketServer`, a bucket of ``bucket`` cycles holds that much work, and work
    booked by earlier calls sits at the bucket's start; unlike it, one call's requests are
    served first come, first served: the free part of each bucket (its end) is laid end to end
    on one axis, the requests are served there in order of arrival, each no earlier than its
    arrival and one service after the one before (the FIFO's running maximum), and each start
    is mapped back into its bucket, which books one service. So a request handed over in a
    later call takes idle time before the work of an earlier one. A request may overrun its
    bucket's end by less than one service, and times inside a bucket are approximate across
    calls (documented approximation). The server remembers ``RING`` buckets: a call whose
    requests need more than half of them, or arrive more than half of them before the latest
    bucket booked, raises rather than book two requests at once in a shared ring cell."""

    RING = 1 << 16  # buckets remembered

    def __init__(self, service: float, bucket: int = 128):
        self.service, self.bucket = float(service), bucket
        self.used = np.zeros(self.RING)
        self.tag = np.full(self.RING, -1, dtype=np.int64)
        self.newest = -1             # the latest bucket booked

    def serve(self, arrive: np.ndarray) -> np.ndarray:
        """Start cycle of each request (arrival ``arrive[i]``, ``service`` cycles each)."""
        n = arrive.size
        if n == 0:
            return np.zeros(0)
        B, svc, mask = float(self.bucket), self.service, self.RING - 1
        order = np.argsort(arrive, kind="stable")
        a = arrive[order].astype(np.float64)
        b0 = int(a[0] // B)
        span, limit = int(a[-1] // B) - b0 + 2 + int(np.ceil(n * svc / B)), self.RING // 2
        while True:
            if span > limit:
                raise RuntimeError(
                    f"DRAM channel: {n} requests from cycle {a[0]:.0f} need more than {limit} "
                    f"buckets of {self.bucket} cycles; the server remembers {self.RING}")
            idx = b0 + np.arange(span, dtype=np.int64)
            cell = idx & mask
            used = np.where(self.tag[cell] == idx, self.used[cell], 0.0)
            free = np.maximum(B - used, 0.0)
            cum = np.concatenate(([0.0], np.cumsum(free)))
            k = (a // B).astype(np.int64) - b0
            va = cum[k] + np.clip(a - (idx[k] * B + used[k]), 0.0, free[k])
            pos = np.arange(n) * svc
            vs = np.maximum.accumulate(va - pos) + pos          # FIFO on the free axis
            if vs[-1] < cum[-1]:
                break
            span = limit + 1 if span == limit else min(2 * span, limit)   # (raises at limit)
        kb = np.clip(np.searchsorted(cum, vs, side="right") - 1, 0, span - 1)
        newest = max(self.newest, int(idx[kb].max()))
        if b0 <= newest - self.RING // 2:
            raise RuntimeError(
                f"DRAM channel: a request arriving at cycle {a[0]:.0f} is more than "
                f"{self.RING // 2} buckets of {self.bucket} cycles before the latest booked "
                f"(bucket {newest}); the server remembers {self.RING}")
        self.newest = newest
        start = np.maximum(a, idx[kb] * B + used[kb] + (vs - cum[kb]))
        self.tag[cell] = idx
        self.used[cell] = used
        np.add.at(self.used, cell[kb], svc)
        out = np.empty(n)
        out[order] = start
        return out


def unit_parity(u: np.ndarray) -> np.ndarray:
    """The partition hash: parity of the upper 16 bits of ``u`` times a Fibonacci constant
    (mod 2**32), so neighbouring units land in the two partitions independently."""
    x = ((u.astype(np.int64) * 0x9E3779B1) & 0xFFFFFFFF) >> 16
    for sh in (8, 4, 2, 1):
        x = x ^ (x >> sh)
    return x & 1


@functools.lru_cache(maxsize=4)
def group_map(name: str) -> np.ndarray:
    """The line -> contention group table of the spec's map file ``name`` (read-only)."""
    table = np.asarray(load_group_map(name), dtype=np.int64)
    table.flags.writeable = False
    return table


class L2:
    def __init__(self, spec, total_words: int, sm_of_warp: np.ndarray | None = None,
                 flip: bool = False):
        """``sm_of_warp``: the SM of every warp (needed for the near/far partitions; without it
        every request costs the mean). ``flip``: swap the partitions the SMs are near (the
        other half of the unknown hash, for averaging one-address benchmarks over both)."""
        self.spec = spec
        self.sector_words = spec.l2_sector_bytes // 4
        self.slices = spec.l2_slices
        self.slice_server = BucketServer(spec.l2_slices, spec.l2_sector_bytes
                                         / spec.l2_bytes_per_cycle_per_slice)
        self.sector_service = spec.l2_sector_bytes / spec.l2_bytes_per_cycle_per_slice
        self.half = spec.l2_hit_latency_cycles / 2.0
        extra = spec.l2_far_extra_cycles if spec.l2_partitions > 1 else 0
        self.near_half = (spec.l2_hit_latency_cycles - extra / 2.0) / 2.0
        self.far_half = (spec.l2_hit_latency_cycles + extra / 2.0) / 2.0
        self.unit_sectors = max(1, spec.l2_partition_interleave_bytes // spec.l2_sector_bytes)
        self.sm_part = (None if sm_of_warp is None or not extra
                        else (np.asarray(sm_of_warp) + int(flip)) % spec.l2_partitions)
        self.dram_extra = max(0.0, spec.dram_latency_cycles - spec.l2_hit_latency_cycles)
        self.dram_service = spec.l2_sector_bytes / (spec.dram_bandwidth_bytes_per_s
                                                    / spec.clock_hz)
        self.dram = StreamServer(self.dram_service)
        n_sectors = -(-total_words // self.sector_words) + 1
        self.touched = np.zeros(n_sectors, dtype=bool)
        self.arrival = np.zeros(total_words + 4)         # cycle each word was last written at L2
        self.writer = np.full(total_words + 4, -1, dtype=np.int64)  # warp of the last store
        self.visibility = float(spec.l2_store_visibility_cycles)
        self.atomic_free: dict[int, float] = {}
        # line hand-over: the SMs that have written each polled 128-byte line (a line's first
        # writer takes it at once, every other SM through the GPU-wide hand-over server), and
        # the slice arrival / visible cycle of the line's last store that waited for a
        # hand-over (loads reaching the line after it wait for it)
        self.sectors_per_line = max(1, 128 // int(spec.l2_sector_bytes))
        self.line_words = self.sector_words * self.sectors_per_line
        self.handover = float(getattr(spec, "l2_line_handover_cycles", 0))
        self.sm_of_warp = None if sm_of_warp is None else np.asarray(sm_of_warp, dtype=np.int64)
        if self.handover > 0 and self.sm_of_warp is not None:
            n_lines = -(-n_sectors // self.sectors_per_line) + 1
            self.n_sms = int(self.sm_of_warp.max()) + 1 if self.sm_of_warp.size else 1
            # the cycle from which each (line * n_sms + SM) holds its line (-inf: first writer)
            self.holds: dict[int, float] = {}
            self.line_written = np.zeros(n_lines, dtype=bool)
            self.held_arr = np.full(n_lines, np.inf)
            self.held_vis = np.full(n_lines, -np.inf)
            self.polled = np.zeros(n_lines, dtype=bool)   # lines an L2-coherent poll reads
            self.handover_server = BucketServer(1, self.handover)
        else:
            self.handover = 0.0
        self.held_any = False
        self.missed_lanes = self.lanes_back = None
        self.handovers = 0
        rc = float(getattr(spec, "l2_request_cycles_per_sm", 0.0) or 0.0)
        self.req_server = (BucketServer(int(self.sm_of_warp.max()) + 1, rc)
                           if rc > 0 and self.sm_of_warp is not None and self.sm_of_warp.size
                           else None)
        gname = getattr(spec, "l2_group_map", "")
        gc = float(getattr(spec, "l2_group_request_cycles", 0.0) or 0.0)
        self.groups = group_map(gname) if gname and gc > 0 else None
        self.n_groups = int(self.groups.max()) + 1 if self.groups is not None else 0
        self.group_server = BucketServer(self.n_groups, gc) if self.groups is not None else None
        # a group's cost per request by the SMs that share the line and the groups its
        # warp-instruction spans (l2_group_private_request_cycles ...; 0: the one rate above)
        self.group_private = float(getattr(spec, "l2_group_private_request_cycles", 0.0) or 0.0)
        self.group_span = float(getattr(spec, "l2_group_span_per_doubling", 0.0) or 0.0)
        self.group_cost = None
        if self.groups is not None and (self.group_private > 0 or self.group_span > 0):
            self.group_cost = BucketServer(self.n_groups)
            n_lines = -(-n_sectors // self.sectors_per_line) + 1
            self.line_sms = np.zeros(n_lines, dtype=np.uint64)
            # sharers at once: the SMs of the line's current and previous window
            # (l2_group_share_window_cycles; 0: every SM that has loaded it so far)
            self.share_window = float(getattr(spec, "l2_group_share_window_cycles", 0.0) or 0.0)
            if self.share_window > 0:
                self.line_prev = np.zeros(n_lines, dtype=np.uint64)
                self.line_epoch = np.zeros(n_lines, dtype=np.int64)
        self.transactions = {"data": 0, "poll": 0, "atomic": 0, "store": 0}
        # pollers of the lines of polled data buffers: per buffer's line range, the cycle at
        # which each SM's first poll of each line reached L2 (:meth:`note_polls`)
        self.sharer = float(getattr(spec, "l2_poll_sharer_cycles", 0.0) or 0.0)
        self.sharer_ranges: list[tuple[int, int, np.ndarray]] = []

    def half_trip(self, warp: np.ndarray, sector: np.ndarray) -> np.ndarray:
        """One-way cycles (half the round trip) of each request (``warp``, ``sector``): near or
        far by partition; the mean's half when the L2 has one partition."""
        if self.sm_part is None:
            return np.full(sector.size, self.half)
        far = unit_parity(sector // self.unit_sectors) != self.sm_part[warp]
        return np.where(far, self.far_half, self.near_half)

    def slice_of(self, sector: np.ndarray) -> np.ndarray:
        return (sector ^ (sector // self.slices)) % self.slices

    def requests(self, warps: np.ndarray, flat: np.ndarray, active: np.ndarray):
        """Distinct (warp, sector) pairs of the rows ``warps`` (an aligned 8/16-byte access never
        crosses a 32-byte sector, so a lane's first word names its sector).

        Returns ``(req_sector, req_row, lane_req, act)``: the requests in order of (row, sector);
        for every lane whether it is active (``act``) and the index of its request
        (``lane_req``, 0 for inactive lanes).
        """
        act = active[warps]
        key = np.where(act, flat[warps] // self.sector_words, -1)
        if (key[:, 1:] >= key[:, :-1]).all():   # sorted lanes (coalesced): no sort needed
            srt, perm = key, None
        else:
            perm = np.argsort(key, axis=1, kind="stable")
            srt = np.take_along_axis(key, perm, axis=1)
        new = np.empty(srt.shape, dtype=bool)
        new[:, 0] = True
        np.not_equal(srt[:, 1:], srt[:, :-1], out=new[:, 1:])
        new &= srt >= 0
        rrow, col = np.nonzero(new)
        rsec = srt[rrow, col]
        req = np.cumsum(new, axis=None).reshape(new.shape) - 1   # request of each sorted lane
        np.maximum(req, 0, out=req)
        if perm is not None:
            lane_req = np.empty_like(req)
            np.put_along_axis(lane_req, perm, req, axis=1)
        else:
            lane_req = req
        return rsec, rrow, np.where(act, lane_req, 0), act

    def _line_requests(self, warp: np.ndarray, rsec: np.ndarray):
        """The load requests of sectors ``rsec`` of warps ``warp``: one per (warp, 128-byte
        line), ``(first, inv)``: the index of each request's first sector and the request of
        every sector."""
        key = warp.astype(np.int64) * (1 << 40) + rsec // self.sectors_per_line
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.reshape(-1), warp[first]

    def _serve(self, rsec: np.ndarray, t_arr: np.ndarray, store: bool, reqs=None) -> np.ndarray:
        """Cycle each request (sector ``rsec`` arriving at L2 at ``t_arr``) is served at L2:
        the slice's bandwidth, then for a load (``reqs``: its :meth:`_line_requests`) its
        line's contention group, one request per line and warp-instruction, then DRAM for a
        load of a sector L2 does not hold yet."""
        miss = ~self.touched[rsec]
        start = self.slice_server.serve(self.slice_of(rsec), t_arr)
        if self.group_server is not None and reqs is not None and not store and rsec.size:
            first, inv = reqs[:2]
            ln = rsec[first] // self.sectors_per_line
            g = self.groups[ln % self.groups.size]
            if self.group_cost is None:
                start = np.maximum(start, self.group_server.serve(g, t_arr[first])[inv])
            else:
                cost = self._group_costs(ln, g, reqs[2], t_arr[first])
                start = np.maximum(start, self.group_cost.serve(g, t_arr[first], cost)[inv])
        if miss.any():
            self.touched[rsec[miss]] = True
            if not store:
                start[miss] = self.dram.serve(start[miss]) + self.dram_extra
        return start

    def _group_costs(self, line: np.ndarray, g: np.ndarray, rwarp: np.ndarray,
                     t: np.ndarray) -> np.ndarray:
        """Cycles each load request (``line``, its group ``g``, warp ``rwarp``, reaching L2 at
        ``t``) costs its group: ``l2_group_private_request_cycles`` for a line that at most
        ``l2_group_private_sharers`` SMs share, ``l2_group_request_cycles`` from
        ``l2_group_shared_sharers`` on (log-linear between), times ``1 + f x
        l2_group_span_per_doubling x log2(q)``, ``q`` the groups that the warp-instruction's
        requests span and ``f`` the same fraction of sharing
        (:func:`gpusim.specs.rules.group_request_cost`). The sharers: the SMs whose loads of the
        line reached L2 in the request's window of ``l2_group_share_window_cycles`` or the one
        before (:meth:`_sharers`); every SM that has loaded it so far where that is 0."""
        sm = self.sm_of_warp[rwarp] if self.sm_of_warp is not None else np.zeros_like(rwarp)
        bit = np.left_shift(np.uint64(1), (sm % 64).astype(np.uint64))
        if self.share_window > 0:
            n = self._sharers(line, bit, t)
        else:
            np.bitwise_or.at(self.line_sms, line, bit)
            n = np.bitwise_count(self.line_sms[line]).astype(np.float64)
        ng = self.n_groups
        uk = np.unique(rwarp.astype(np.int64) * ng + g)
        wq, q = np.unique(uk // ng, return_counts=True)
        return group_request_cost(self.spec, n, q[np.searchsorted(wq, rwarp)])

    def _sharers(self, line: np.ndarray, bit: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The SMs sharing each request's line at once: the line's SMs (``bit``: each request's
        SM as a bit of 64) of the window of ``l2_group_share_window_cycles`` that holds the
        request's arrival ``t`` and of the window before it. The windows of a batch are taken
        in order; a request that arrives in a window older than the line's latest counts in
        the latest (the executor hands requests over in lockstep order, not always in time
        order). What the H200 shows (``measurements/l2_sweep_share.py``): 132 SMs sweeping
        one table of random lines cost a group 0.47-0.55 cycles a request when they are spread
        over the table (about 8 load a row within a round), the private lines' rate, though
        every SM loads every line over the kernel."""
        ep = np.floor(np.asarray(t, dtype=np.float64) / self.share_window).astype(np.int64)
        n = np.empty(line.size, dtype=np.float64)
        for e in np.unique(ep).tolist():
            sel = ep == e
            ln = line[sel]
            u = np.unique(ln)
            old = self.line_epoch[u]
            move = old < e
            if move.any():
                um = u[move]
                self.line_prev[um] = np.where(old[move] == e - 1, self.line_sms[um], 0)
                self.line_sms[um] = 0
                self.line_epoch[um] = e
            np.bitwise_or.at(self.line_sms, ln, bit[sel])
            n[sel] = np.bitwise_count(self.line_sms[ln] | self.line_prev[ln])
        return n

    def _hand_over(self, rsec: np.ndarray, start: np.ndarray, sm: np.ndarray) -> np.ndarray:
        """Cycle each store request (sector ``rsec``, from SM ``sm``, served by its slice at
        ``start``) is performed. A 128-byte line that SMs poll (an L2-coherent load reads it)
        is taken at once by its first writer SM; every other SM that writes it is handed the
        line once, by one GPU-wide server that performs a hand-over every
        ``l2_line_handover_cycles`` (first come, first served); the SM's stores to the line
        are performed once it holds the line. Lines nobody polls (the CSR kernel's outputs)
        pay nothing: several SMs storing into them are not slowed on the GPU."""
        out = start.copy()
        ln = rsec // self.sectors_per_line
        polled = self.polled[ln]
        if not polled.any():
            return out
        idx = np.nonzero(polled)[0]
        idx = idx[np.lexsort((idx, start[idx]))]          # in time order
        key = ln[idx] * self.n_sms + sm[idx]
        _, first = np.unique(key, return_index=True)
        first.sort()
        need = np.zeros(idx.size, dtype=bool)              # the request that takes the line
        for j, k in zip(first.tolist(), key[first].tolist(), strict=True):
            if k not in self.holds:
                line = k // self.n_sms
                need[j] = self.line_written[line]
                self.line_written[line] = True
                self.holds[k] = -np.inf
        if need.any():
            j = np.nonzero(need)[0]
            t = start[idx[j]]
            got = self.handover_server.serve(np.zeros(j.size, dtype=np.int64), t) \
                + self.handover
            self.handovers += int(j.size)
            self.holds.update(zip(key[j].tolist(), got.tolist(), strict=True))
        done = np.array([self.holds[k] for k in key.tolist()])
        p = np.maximum(start[idx], done)
        out[idx] = p
        wait = p > start[idx]
        if wait.any():
            w = ln[idx[wait]]
            self.held_arr[w] = start[idx[wait]]
            self.held_vis[w] = p[wait] + self.visibility
            self.held_any = True
        return out

    def _held(self, rsec: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Load requests served in order behind a line's held store: served when it is
        visible if they reach the line after it arrived and before that."""
        ln = rsec // self.sectors_per_line
        ha, hv = self.held_arr[ln], self.held_vis[ln]
        wait = (start >= ha) & (start < hv)
        return np.where(wait, hv, start)

    def _leave(self, warp: np.ndarray, t: np.ndarray, reqs) -> np.ndarray:
        """Cycle each load request (``warp``, its sectors' :meth:`_line_requests` ``reqs``)
        ready at ``t`` leaves its SM for L2: at most one request per
        ``l2_request_cycles_per_sm`` per SM, a request being the sectors of one 128-byte line
        of one warp-instruction (Nsight counts 3.96 sectors per L2 request for the coalesced
        loads of ``lmech_xb_4096`` and one for the one-sector gathers the value is fitted to);
        ``t`` itself without the limit."""
        if self.req_server is None or not t.size:
            return t
        first, inv = reqs[:2]
        dep = self.req_server.serve(self.sm_of_warp[warp[first]], t[first])
        return dep[inv]

    def mark_polled(self, lo_word: int, n_words: int) -> None:
        """Words ``[lo_word, lo_word + n_words)`` belong to a buffer the kernel polls (reads
        with L2-coherent loads): their sectors are handed over between writer SMs. A property of
        the buffer, not of the order in which the executor happens to take stores and polls:
        in lockstep every CTA's stores of a round are taken before any CTA's polls of it, while
        on the GPU the early CTAs already poll the sectors the late ones still write."""
        if self.handover:
            lw = self.line_words
            self.polled[lo_word // lw:-(-(lo_word + n_words) // lw)] = True

    def track_pollers(self, lo_word: int, n_words: int) -> None:
        """Words ``[lo_word, lo_word + n_words)`` belong to a data buffer the kernel polls: note
        when each SM's polls first reach each of its lines (:meth:`note_polls`)."""
        if self.sharer <= 0 or self.sm_of_warp is None or n_words <= 0:
            return
        lw = self.line_words
        lo, hi = lo_word // lw, -(-(lo_word + n_words) // lw)
        n_sms = int(self.sm_of_warp.max()) + 1
        self.sharer_ranges.append((lo, hi, np.full((hi - lo, n_sms), np.inf, dtype=np.float32)))

    def relabel(self, wp: np.ndarray) -> None:
        """Warp ``w`` becomes what warp ``wp[w]`` was (``wp`` a permutation: the timing model's
        slots relabelled between waves of a launch): its SM, near partition, and the warp of
        each word's last store."""
        if self.sm_of_warp is not None:
            self.sm_of_warp = self.sm_of_warp[wp]
        if self.sm_part is not None:
            self.sm_part = self.sm_part[wp]
        inv = np.empty_like(wp)
        inv[wp] = np.arange(wp.size)
        seen = self.writer >= 0
        self.writer[seen] = inv[self.writer[seen]]

    def note_polls(self, warps: np.ndarray, flat: np.ndarray, active: np.ndarray,
                   served: np.ndarray) -> None:
        """The first polls of rows ``warps`` (word addresses ``flat``, lanes ``active``, served
        at L2 at ``served``, rows x 32): the earliest cycle at which each SM's polls reached
        each line of a tracked buffer."""
        if not self.sharer_ranges:
            return
        act = active[warps]
        lw = self.line_words
        lines = (flat[warps] // lw)[act]
        sms = np.broadcast_to(self.sm_of_warp[warps][:, None], act.shape)[act]
        at = np.asarray(served, dtype=np.float64)[act]
        for lo, hi, first in self.sharer_ranges:
            inside = (lines >= lo) & (lines < hi)
            if inside.any():
                np.minimum.at(first, (lines[inside] - lo, sms[inside]), at[inside])

    def seen_delay(self, flat: np.ndarray, arrival: np.ndarray) -> np.ndarray:
        """Cycles after it is visible at L2 (``arrival``, the store visibility included) that a
        word at ``flat`` is seen by the polls: ``l2_poll_sharer_cycles`` times the SMs whose
        first polls of its line reached L2 before that (0 outside tracked buffers). The first
        poll cycles are kept in float32 (``track_pollers``: lines x SMs, 4 bytes each, about 20
        MB for a sampled hidden-8192 batch-8 launch): exact to the cycle up to 2**24 cycles, far
        beyond a simulated launch."""
        out = np.zeros(flat.shape)
        lw = self.line_words
        lines = flat // lw
        for lo, hi, first in self.sharer_ranges:
            inside = (lines >= lo) & (lines < hi)
            if inside.any():
                f = first[lines[inside] - lo]
                out[inside] = self.sharer * (f < arrival[inside][:, None]).sum(axis=1)
        return out

    def warm(self, lo_word: int, n_words: int) -> None:
        """Mark words ``[lo_word, lo_word + n_words)`` as resident in L2 (no DRAM on first use)."""
        sw = self.sector_words
        self.touched[lo_word // sw:-(-(lo_word + n_words) // sw)] = True

    def access(self, issue: np.ndarray, warps: np.ndarray, flat: np.ndarray, active: np.ndarray,
               width: int, kind: str, store: bool, l1=None):
        """Loads/stores of one warp-instruction per row of ``warps`` issued at ``issue``;
        loads go through ``l1`` (an :class:`~.l1.L1`) first when one is given.

        Returns (per-warp completion cycle, per-lane served cycle (rows x 32), ``inf`` for
        inactive lanes). After a load through ``l1``, :attr:`missed_lanes` marks the lanes whose
        sector L1 did not have (rows x 32: sent to L2, or waiting on a fill in flight) and
        :attr:`lanes_back` holds the cycle each lane's data is back at the SM; None after any
        other access.
        """
        self.missed_lanes = None
        rsec, rrow, lane_req, act = self.requests(warps, flat, active)
        half = self.half_trip(warps[rrow], rsec)
        if l1 is None or store or not rsec.size:
            self.transactions[kind] += int(rsec.size)
            reqs = None if store or not rsec.size else self._line_requests(warps[rrow], rsec)
            t0 = issue[rrow] if store else self._leave(warps[rrow], issue[rrow], reqs)
            start = self._serve(rsec, t0 + half, store, reqs)
            if self.handover:
                if store:
                    start = self._hand_over(rsec, start, self.sm_of_warp[warps[rrow]])
                elif self.held_any:
                    start = self._held(rsec, start)
        else:
            t_issue = issue[rrow]
            rwarp = warps[rrow]
            l1_served, go, key = l1.lookup(rwarp, rsec, t_issue)
            self.transactions[kind] += int(go.sum())
            done_req = np.full(rsec.size, np.nan)
            reqs = self._line_requests(rwarp[go], rsec[go])
            t_go = self._leave(rwarp[go], t_issue[go], reqs)
            got = self._serve(rsec[go], t_go + half[go], store, reqs)
            if self.held_any:
                got = self._held(rsec[go], got)
            done_req[go] = got + half[go]
            served_l1 = l1.complete(key, done_req, l1_served, t_issue, rwarp, rsec)
            done_req[~go] = served_l1[~go]
            # lanes of a buffer L1 caches served by a fill (their own or one in flight): the data
            # stage takes them in pieces (SharedPipe.missed_returns); loads of the buffers it
            # does not cache (the kernel writes them) keep the bank rule
            cached = (l1.local[rsec] >= 0) | l1.passing[rsec]
            late = cached & (go | (served_l1 > t_issue + l1.lat))
            self.missed_lanes = act & late[lane_req]
            self.lanes_back = np.where(act, done_req[lane_req], -np.inf)
            start = done_req - half
        done_req = start + half
        head = np.empty(rrow.size, dtype=bool)
        head[:1] = True
        np.not_equal(rrow[1:], rrow[:-1], out=head[1:])
        starts = np.flatnonzero(head)
        if starts.size == warps.size:  # every row has a request: rows are contiguous runs
            done = np.maximum.reduceat(done_req, starts) if starts.size else np.zeros(0)
        else:
            done = np.full(warps.size, -np.inf)
            np.maximum.at(done, rrow, done_req)
        if not start.size:
            return done, np.full(act.shape, np.inf)
        served = np.where(act, start[lane_req], np.inf)
        fw = flat[warps]
        if store:
            got = start[lane_req[act]] + self.visibility
            wid = np.broadcast_to(warps[:, None], act.shape)[act]
            for j in range(width):
                w = (fw + j)[act]
                np.maximum.at(self.arrival, w, got)
                self.writer[w] = wid
        else:
            own = self._own_pending(warps, fw, act, width, served)
            if own is not None:
                rows, need = own
                served = np.maximum(served, need)
                np.maximum.at(done, rows, (need + half[lane_req]).max(axis=1)[rows])
        return done, served

    def _own_pending(self, warps: np.ndarray, fw: np.ndarray, act: np.ndarray, width: int,
                     served: np.ndarray):
        """Lanes loading a word that their own warp stored and that is not yet visible when the
        load is served: ``(rows, need)`` with ``need`` (rows x 32) the cycle each lane's load
        must wait for (``-inf`` elsewhere); None when no lane does."""
        need = None
        wcol = warps[:, None]
        for j in range(width):
            w = fw + j
            mine = (self.writer[w] == wcol) & act
            if not mine.any():
                continue
            a = np.where(mine, self.arrival[w], -np.inf)
            need = a if need is None else np.maximum(need, a)
        if need is None:
            return None
        late = (need > served).any(axis=1)
        if not late.any():
            return None
        return np.flatnonzero(late), need

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
        self.writer[addr] = warps[rows]
        done = np.full(warps.size, -np.inf)
        np.maximum.at(done, rows, start + s.l2_atomic_latency_cycles / 2.0)
        return done
