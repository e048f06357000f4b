"""Per-SM L1 data cache for plain global loads, and which buffers L1/L2 hold at launch.

Volta and later cache plain global loads (``LDG``, PTX ``ld.global``) in the SM's L1, a
sectored cache carved out of the same SRAM as shared memory (docs/hardware_sources.md s5): a load
whose 32-byte sector the SM already holds (or has in flight) is served after
``l1_hit_latency_cycles`` and never reaches L2. Polling loads (``LDG_VOLATILE``, ``ld.relaxed``)
and atomics bypass L1.

The model, and what it leaves out:

- Only **read-only buffers** are cached: buffers the kernel never stores to or updates
  atomically (weights, indices, h of a one-step launch, x). Hardware L1 is not coherent, so
  the generated kernels read every buffer they write through L2 anyway.
- **Capacity**: L1 gets the unified SRAM minus the shared memory of the CTAs resident on the
  SM. The read-only buffers are admitted smallest first while their sum fits; a buffer that does
  not fit is never cached (a large streamed array - a weight or index array read once - gains
  nothing from L1 and under LRU would be the one evicted). There is no eviction among admitted
  buffers.
- **In-flight merging**: a request for a sector another warp of the same SM has already missed
  on waits for that fill (``max(issue + l1_hit_latency, fill)``) instead of going to L2.
- Throughput is not modelled here: every global load (hit or miss) passes the SM's L1TEX tag
  and data stages in :mod:`.smem` (lines at the tag stage, bank wavefronts at the data stage).

:func:`resident_buffers` is the same rule for L2 at launch (``simulate(l2_warm=True)``): a launch
that repeats the previous one (a per-step kernel in a sequence) finds every buffer the previous
launch touched in L2, smallest first while they fit in ``l2_size_bytes``.
"""

from __future__ import annotations

import numpy as np

from kernels_ir.ir import Op, instructions

__all__ = ["L1", "read_only_loaded", "resident_buffers"]


def read_only_loaded(kernel) -> list[str]:
    """Global buffers read by plain ``LDG`` and never written by the kernel (store or atomic)."""
    loaded, written = set(), set()
    for ins in instructions(kernel):
        if ins.op is Op.LDG:
            loaded.add(ins.srcs[0].buffer.name)
        elif ins.op in (Op.STG, Op.ATOM_ADD):
            written.add(ins.srcs[0].buffer.name)
    return sorted(loaded - written)


def resident_buffers(kernel, names, capacity_bytes: int) -> list[str]:
    """``names`` (global buffers of ``kernel``) admitted smallest first while their bytes fit
    in ``capacity_bytes``."""
    size = {b.name: b.size * 4 for b in kernel.global_buffers}
    out, used = [], 0
    for n in sorted(names, key=lambda n: (size[n], n)):
        if used + size[n] > capacity_bytes:
            break
        out.append(n)
        used += size[n]
    return out


class L1:
    """Sector fill cycles per SM for the cached buffers (``inf``: not held)."""

    def __init__(self, spec, kernel, gspace, sm_of_warp: np.ndarray, n_sms: int,
                 ctas_per_sm: int):
        self.lat = float(spec.l1_hit_latency_cycles)
        sector_words = spec.l2_sector_bytes // 4
        smem = sum(b.size * 4 for b in kernel.shared_buffers) * ctas_per_sm
        capacity = max(0, spec.l1_unified_bytes_per_sm - smem)
        self.buffers = resident_buffers(kernel, read_only_loaded(kernel), capacity)
        n_sectors = -(-gspace.words.size // sector_words) + 1
        self.local = np.full(n_sectors, -1, dtype=np.int64)
        n = 0
        for name in self.buffers:
            lo = gspace.bases[name] // sector_words
            hi = -(-(gspace.bases[name] + gspace.buffers[name].size) // sector_words)
            self.local[lo:hi] = np.arange(n, n + hi - lo)
            n += hi - lo
        self.n_local = n
        self.sm_of_warp = sm_of_warp
        self.fill = np.full((n_sms, max(n, 1)), np.inf)
        self.hits = 0

    @property
    def active(self) -> bool:
        return self.n_local > 0

    def lookup(self, warp: np.ndarray, sector: np.ndarray, t_issue: np.ndarray):
        """Per request: ``(served, miss, key)``. ``served`` is the cycle the data reaches the
        warp for requests L1 serves (NaN for misses); ``miss`` marks requests that go to L2;
        ``key`` (SM, local sector) of the tracked misses that fill L1 (-1 otherwise)."""
        loc = self.local[sector]
        tracked = loc >= 0
        served = np.full(sector.size, np.nan)
        key = np.full(sector.size, -1, dtype=np.int64)
        if not tracked.any():
            return served, np.ones(sector.size, bool), key
        sm = self.sm_of_warp[warp]
        f = np.full(sector.size, np.inf)
        f[tracked] = self.fill[sm[tracked], loc[tracked]]
        held = np.isfinite(f)
        served[held] = np.maximum(t_issue[held] + self.lat, f[held])
        cold = tracked & ~held
        key[cold] = sm[cold] * self.n_local + loc[cold]
        # of the cold requests for one (SM, sector), the earliest goes to L2, the rest wait on it
        idx = np.flatnonzero(cold)
        first = np.ones(sector.size, bool)
        if idx.size > 1:
            order = idx[np.lexsort((t_issue[idx], key[idx]))]
            ks = key[order]
            dup = np.r_[False, ks[1:] == ks[:-1]]
            first[order[dup]] = False
        miss = ~held & first
        key[~miss] = -1
        self.hits += int(sector.size - miss.sum())
        return served, miss, key

    def complete(self, key: np.ndarray, done: np.ndarray, served: np.ndarray,
                 t_issue: np.ndarray, warp: np.ndarray, sector: np.ndarray) -> np.ndarray:
        """Record the fills of the misses (``key`` >= 0, data back at the SM at ``done``; NaN for
        requests that did not go to L2) and serve the requests that waited on a fill of this
        same instruction. Returns ``served`` completed."""
        filled = key >= 0
        if filled.any():
            k = key[filled]
            self.fill.reshape(-1)[k] = done[filled]
        wait = np.isnan(served) & np.isnan(done)
        if wait.any():
            loc = self.local[sector[wait]]
            f = self.fill[self.sm_of_warp[warp[wait]], loc]
            served[wait] = np.maximum(t_issue[wait] + self.lat, f)
        return served
