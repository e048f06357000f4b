"""Warp schedulers and execution pipes of the sub-partitions (one hardware unit).

Each SM has ``subpartitions_per_sm`` schedulers; warp ``w`` of a CTA lives on sub-partition
``w % subpartitions_per_sm``. A scheduler issues at most ``issue_per_cycle_per_subpartition``
(1 on V100/H100) warp-instructions per cycle; an instruction also occupies its pipe (FP32, INT32,
SFU, or the memory-issue port) for ``32 / lanes`` cycles, during which the pipe accepts no other
warp-instruction of the sub-partition.

Backfill: the lockstep executor hands instructions over in program order across warps, so a warp
that has run ahead may already have reserved cycles *later* than the cycle at which a lagging
warp becomes ready. Reservations are therefore kept in per-sub-partition ring buffers that store
the cycle number occupying each slot; an instruction takes the first cycle ``>= ready`` whose
issue slot and pipe cycles are free. Approximation: reservations more than ``RING`` cycles apart
alias (the older one is forgotten), i.e. warps of one sub-partition that drift more than
``RING`` cycles apart do not contend (they re-synchronise at every CTA barrier in the RNN kernels).
"""

from __future__ import annotations

import numpy as np

__all__ = ["IssueUnit", "PIPES", "RING"]

RING = 2048            # cycles of reservations kept per sub-partition (power of two)
WINDOW = 16            # cycles searched per pass for a free slot
PIPES = ("fp32", "int", "sfu", "mem")


class IssueUnit:
    """Issue slots and pipe occupancy of every sub-partition of every simulated SM."""

    def __init__(self, n_groups: int, issue_per_cycle: int):
        # slot k of ring r holds the cycle that reserved it (-1: free)
        self.issue = np.full((issue_per_cycle, n_groups, RING), -1, dtype=np.int64)
        self.pipe = np.full((len(PIPES), n_groups, RING), -1, dtype=np.int64)
        self._win = np.arange(WINDOW, dtype=np.int64)

    def reserve(self, groups: np.ndarray, ready: np.ndarray, pipe: int, occ: int) -> np.ndarray:
        """Issue cycle for one instruction per row (``groups`` must be distinct).

        ``ready``: int64 earliest cycle per row; ``occ``: cycles the pipe is busy.
        """
        out = np.empty_like(ready)
        todo = np.arange(ready.size)
        start = ready.copy()
        mask = RING - 1
        pipe_ring = self.pipe[pipe]
        while todo.size:
            g = groups[todo][:, None]
            cand = start[todo][:, None] + self._win
            pfree = np.ones(cand.shape, dtype=bool)
            for j in range(occ):
                c = cand + j
                pfree &= pipe_ring[g, c & mask] != c
            ok = np.zeros(cand.shape, dtype=bool)
            slot = np.zeros(cand.shape, dtype=np.int8)
            for k in range(self.issue.shape[0] - 1, -1, -1):
                f = self.issue[k][g, cand & mask] != cand
                slot = np.where(f, k, slot)
                ok |= f
            ok &= pfree
            found = ok.any(axis=1)
            first = ok.argmax(axis=1)
            rows = todo[found]
            c = cand[found, first[found]]
            out[rows] = c
            gg = groups[rows]
            ks = slot[found, first[found]]
            self.issue[ks, gg, c & mask] = c
            for j in range(occ):
                pipe_ring[gg, (c + j) & mask] = c + j
            start[todo[~found]] += WINDOW
            todo = todo[~found]
        return out
