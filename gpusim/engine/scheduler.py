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
PROBE = 4              # cycles tried one at a time before searching windows
PIPES = ("fp32", "int", "sfu", "mem")
_MASK = RING - 1


class IssueUnit:
    """Issue slots and pipe occupancy of every sub-partition of every simulated SM."""

    def __init__(self, n_groups: int, issue_per_cycle: int):
        # slot k of ring r holds the cycle that reserved it (-1: free)
        self.issue = np.full((issue_per_cycle, n_groups, RING), -1, dtype=np.int64)
        self.pipe = np.full((len(PIPES), n_groups, RING), -1, dtype=np.int64)
        # flat views (one per issue slot / pipe), indexed by ``group * RING + cycle % RING``
        self._issue_flat = [self.issue[k].reshape(-1) for k in range(issue_per_cycle)]
        self._pipe_flat = [self.pipe[p].reshape(-1) for p in range(len(PIPES))]
        self._win = np.arange(WINDOW, dtype=np.int64)
        # reserve_rounds: each group's cycle in the round stamped ``_stamp[group]``
        self._prev = np.zeros(n_groups, dtype=np.int64)
        self._stamp = np.zeros(n_groups, dtype=np.int64)
        self._round = 0

    def reserve_rounds(self, rounds, ready: np.ndarray, pipe: int, occ: int) -> np.ndarray:
        """:meth:`reserve` for rows in rounds: ``rounds`` lists ``(rows, groups, partner)`` with
        distinct groups per round; round ``r`` reserves after round ``r - 1``. ``partner``:
        ``None``, or for each row of round ``r > 0`` the position in round ``r - 1`` of the row
        of the same group (every group of round ``r`` must be in round ``r - 1``).

        A row whose group took cycle ``c`` in the round just before cannot issue in
        ``[c - occ + 1, c + occ)`` (the pipe is busy; the issue slot too at ``c``), so it starts
        its search at ``c + occ`` when its ready cycle falls inside: the same result, found
        without trying those cycles.
        """
        out = np.empty_like(ready)
        prev, stamp = self._prev, self._stamp
        got = None
        for r, (rows, groups, partner) in enumerate(rounds):
            t = ready[rows]
            if r:
                if partner is not None:
                    c = got[partner]
                    jump = (t > c - occ) & (t < c + occ)
                else:
                    c = prev[groups]
                    jump = (t > c - occ) & (t < c + occ) & (stamp[groups] == self._round)
                t = np.where(jump, c + occ, t)
            got = self.reserve(groups, t, pipe, occ)
            out[rows] = got
            if r + 1 < len(rounds) and rounds[r + 1][2] is None:
                self._round += 1
                prev[groups] = got
                stamp[groups] = self._round
        return out

    def reserve(self, groups: np.ndarray, ready: np.ndarray, pipe: int, occ: int) -> np.ndarray:
        """Issue cycle for one instruction per row (``groups`` must be distinct).

        ``ready``: int64 earliest cycle per row; ``occ``: cycles the pipe is busy. Each row
        takes the first cycle ``>= ready`` whose issue slot and pipe cycles are free: the
        cycles ``ready``, ``ready + 1``, ... are tried one at a time for ``PROBE`` cycles (most
        rows succeed at once), then ``WINDOW`` cycles at a time. Rows have distinct groups, so
        they never compete with each other and the order of the tries does not matter.
        """
        pipe_ring = self._pipe_flat[pipe]
        base = groups * RING
        if len(self._issue_flat) == 1:
            out, todo = self._probe1(base, ready, pipe_ring, occ)
            if todo is None:
                return out
        else:
            out, todo = np.empty_like(ready), np.arange(ready.size)
        self._search(out, todo, base, ready, pipe_ring, occ)
        return out

    def _probe1(self, base: np.ndarray, ready: np.ndarray, pipe_ring: np.ndarray, occ: int):
        """One issue slot per cycle: try ``ready + d`` for ``d < PROBE``; returns the issue
        cycles found and the rows still to search (``None`` when all were found)."""
        issue_ring = self._issue_flat[0]
        out = np.empty_like(ready)
        todo = None
        b, cand = base, ready
        for d in range(PROBE):
            if d:
                b, cand = base[todo], ready[todo] + d
            lin = b + (cand & _MASK)
            ok = issue_ring[lin] != cand
            ok &= pipe_ring[lin] != cand
            lins = [lin]
            for j in range(1, occ):
                cj = cand + j
                lj = b + (cj & _MASK)
                ok &= pipe_ring[lj] != cj
                lins.append(lj)
            if ok.all():
                if todo is None:
                    out[:] = cand
                else:
                    out[todo] = cand
                issue_ring[lin] = cand
                for j, lj in enumerate(lins):
                    pipe_ring[lj] = cand + j if j else cand
                return out, None
            c = cand[ok]
            if todo is None:
                out[ok] = c
                todo = np.flatnonzero(~ok)
            else:
                out[todo[ok]] = c
                todo = todo[~ok]
            issue_ring[lin[ok]] = c
            for j, lj in enumerate(lins):
                pipe_ring[lj[ok]] = c + j if j else c
        return out, todo

    def _search(self, out: np.ndarray, todo: np.ndarray, base: np.ndarray, ready: np.ndarray,
                pipe_ring: np.ndarray, occ: int) -> None:
        """Rows ``todo``: first free cycle ``>= ready + PROBE`` (one issue slot: the earlier
        cycles were tried) or ``>= ready``, ``WINDOW`` cycles per pass."""
        start = ready[todo] + (PROBE if len(self._issue_flat) == 1 else 0)
        n_issue = len(self._issue_flat)
        while todo.size:
            b = base[todo][:, None]
            cand = start[:, None] + self._win
            lin = b + (cand & _MASK)
            ok = pipe_ring[lin] != cand
            for j in range(1, occ):
                c = cand + j
                ok &= pipe_ring[b + (c & _MASK)] != c
            anyf = np.zeros(cand.shape, dtype=bool)
            slot = np.zeros(cand.shape, dtype=np.int8)
            for k in range(n_issue - 1, -1, -1):   # the lowest free issue slot of the cycle
                f = self._issue_flat[k][lin] != cand
                slot = np.where(f, k, slot)
                anyf |= f
            ok &= anyf
            found = ok.any(axis=1)
            first = ok.argmax(axis=1)[found]
            c = cand[found, first]
            out[todo[found]] = c
            bf, ks = base[todo[found]], slot[found, first]
            for k in range(n_issue):
                sel = ks == k
                self._issue_flat[k][bf[sel] + (c[sel] & _MASK)] = c[sel]
            for j in range(occ):
                cj = c + j
                pipe_ring[bf + (cj & _MASK)] = cj
            start = start[~found] + WINDOW
            todo = todo[~found]
