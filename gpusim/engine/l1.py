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
  SM. The read-only buffers are admitted smallest first while their sum fits, and are kept
  whole: there is no eviction among admitted buffers.
- **What does not fit still passes through L1**: the sectors of the other read-only buffers
  (a large streamed array, or an h too large to be kept beside the rest) share the capacity
  left over, as a direct-mapped cache of that many sectors per SM (sector ``s`` in slot
  ``s mod slots``; a fill replaces the slot's sector). So a sector loaded again soon after, as
  the CSR kernel's two 128-bit loads of one column's h at batch 8 do, hits, and one that comes
  back after many others were filled misses (an approximation of the GPU's LRU:
  ``measurements/h100/l1_pair.json``, two 16-byte loads per sector of a 17 MB buffer cost the
  L2 what one does, the second a hit in L1).
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
        # the buffers L1 cannot keep: a direct-mapped share of the capacity left over
        size = {b.name: b.size * 4 for b in kernel.global_buffers}
        left = capacity - sum(size[b] for b in self.buffers)
        self.n_slots = max(0, left // spec.l2_sector_bytes)
        self.passing = np.zeros(n_sectors, dtype=bool)
        for name in read_only_loaded(kernel):
            if name not in self.buffers and self.n_slots:
                lo = gspace.bases[name] // sector_words
                hi = -(-(gspace.bases[name] + gspace.buffers[name].size) // sector_words)
                self.passing[lo:hi] = True
        self.n_sectors = n_sectors
        self.slot_tag = np.full((n_sms, max(self.n_slots, 1)), -1, dtype=np.int64)
        self.slot_fill = np.full((n_sms, max(self.n_slots, 1)), np.inf)
        self.hits = 0

    @property
    def active(self) -> bool:
        return self.n_local > 0 or bool(self.passing.any())

    def lookup(self, warp: np.ndarray, sector: np.ndarray, t_issue: np.ndarray):
        """Per request: ``(served, miss, key)``. ``served`` is the cycle the data reaches the
        warp for requests L1 serves (NaN for misses); ``miss`` marks requests that go to L2;
        ``key`` of the misses that fill L1 (-1 otherwise): (SM, local sector) of a kept buffer,
        or past those, (SM, sector) of a buffer passing through."""
        loc = self.local[sector]
        tracked = loc >= 0
        passing = self.passing[sector]
        served = np.full(sector.size, np.nan)
        key = np.full(sector.size, -1, dtype=np.int64)
        if not tracked.any() and not passing.any():
            return served, np.ones(sector.size, bool), key
        sm = self.sm_of_warp[warp]
        f = np.full(sector.size, np.inf)
        f[tracked] = self.fill[sm[tracked], loc[tracked]]
        if passing.any():
            slot = sector[passing] % self.n_slots
            hit = self.slot_tag[sm[passing], slot] == sector[passing]
            f[passing] = np.where(hit, self.slot_fill[sm[passing], slot], np.inf)
        held = np.isfinite(f)
        served[held] = np.maximum(t_issue[held] + self.lat, f[held])
        cold = tracked & ~held
        key[cold] = sm[cold] * self.n_local + loc[cold]
        cold_p = passing & ~held
        key[cold_p] = self._passing_base + sm[cold_p] * self.n_sectors + sector[cold_p]
        cold |= cold_p
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
        kept = filled & (key < self._passing_base)
        if kept.any():
            self.fill.reshape(-1)[key[kept]] = done[kept]
        through = filled & ~kept
        if through.any():
            sm, sec = np.divmod(key[through] - self._passing_base, self.n_sectors)
            slot = sec % self.n_slots
            self.slot_tag[sm, slot] = sec
            self.slot_fill[sm, slot] = done[through]
        wait = np.isnan(served) & np.isnan(done)
        if wait.any():   # they wait for the fill of this instruction's miss of their sector
            sm = self.sm_of_warp[warp]
            loc = self.local[sector]
            k = np.where(loc >= 0, sm * self.n_local + loc,
                         self._passing_base + sm * self.n_sectors + sector)
            first = {int(a): float(b) for a, b in zip(k[filled], done[filled], strict=True)}
            f = np.array([first[int(x)] for x in k[wait]])
            served[wait] = np.maximum(t_issue[wait] + self.lat, f)
        return served

    @property
    def _passing_base(self) -> int:
        """Keys at or past this are (SM, sector) of a buffer passing through."""
        return self.fill.size
