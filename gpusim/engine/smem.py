"""The shared-memory pipe of each SM (one hardware unit).

Every LDS/STS of a warp costs :func:`kernels_ir.banks.wavefronts` wavefronts (the same function
the layout study uses, with the op's rule: loads can be return-packed, stores not); the SM's
pipe serves ``smem_wavefronts_per_cycle`` wavefronts per cycle, first come first served (FIFO
per SM in order of issue; warps of one SM re-synchronise at every CTA barrier, so the FIFO
order is close to the hardware's); the data is ready ``smem_latency_cycles`` after the last
wavefront. Bank conflicts (wavefronts beyond one per active phase,
:func:`kernels_ir.banks.cost`) are counted per static instruction and per warp.

Warp shuffles (``SHFL``) take the same pipe (:meth:`SharedPipe.shuffle`): the LSU pipe hands
them to L1TEX one warp-instruction a cycle per SM (``shfl_per_cycle_per_sm``).
``measurements/h100/shfl_pipe.json``: from 4 warps per SM up the GPU issues 1.00 shuffle a cycle
per SM whatever the warps (the simulator, with a shuffle pipe per sub-partition, issued up to
3.9), a conflict-free shared load beside every shuffle doubles the cost (1.03 cycles per
instruction: one pipe), an FFMA beside it does not. The shuffles' places are a
:class:`~.l2.BucketServer` per SM (time buckets with backfill) in which every shared access's
wavefronts take places too, so a shuffle waits for the pipe's shared traffic; the shared
accesses keep their FIFO and are not delayed by shuffles (an approximation: charging both
through the FIFO made the kernels' reduction, each warp's next shuffles waiting for its last
results, 9-29% too slow in that record, because the FIFO serves one instruction of every warp
before the next instruction of any). Shuffles are not counted as shared wavefronts (the
bank-conflict cross-check compares those with Nsight).

The data stage of returning global loads (below) takes places in that same unit
(``measurements/h200/data_pipe_share.json``: 132 CTAs of 8 or 16 warps, each link a shuffle,
a conflict-free shared load or a 32-bit global load that hits L1 over 1-8 lines, or two of
them; on the H200 every mix of loads of 2-8 wavefronts costs 1.003-1.025 times the sum of
its parts, one-wavefront loads beside the shuffles 0.95 and 1.07 times it; the engine before,
with the returns in a stage of their own, gave the larger part, 11-50% fast; now -8% to -1%,
the single kinds -1% to +6%). So a warp's gathers and another warp's
reduction shuffles queue for one pipe, which Nsight reflects by counting shuffles as data-pipe
wavefronts.

Global loads (``LDG``, polls) pass two L1TEX stages of the SM:

- :meth:`SharedPipe.tag_stage` at issue, in distinct 128-byte lines the warp's active lanes
  touch (:func:`lines`), ``TAG_SETS_PER_CYCLE`` lines per cycle (Nsight
  ``l1tex__t_set_accesses`` = lines per request);
- :meth:`SharedPipe.global_returns` as the data reaches the SM, in bank wavefronts
  (:meth:`SharedPipe.global_wavefronts`), ``smem_wavefronts_per_cycle`` per cycle (the data
  pipe's rate). The rule is shared memory's (:func:`kernels_ir.banks.wavefronts`: 32 banks of 4
  bytes, distinct words in one bank serialise, one word is broadcast) over the lanes' global word
  addresses at the access's width: a 32-bit load is one phase of 32 lanes, a 64-bit load two
  half-warp phases, a 128-bit load four quarter-warp phases (and the return packing of lane
  pairs that read one address). Lanes on different lines share a wavefront when their words lie
  in different banks.

The data-stage rule is read from Nsight (``l1tex__data_pipe_lsu_wavefronts_mem_lgds`` per
request) in ``measurements/h100/csr_mech.json``, ``measurements/h100/gather.json`` and
``measurements/h200/csr_mech.json``: every L1-hit benchmark matches it within 0.7 (32 lines at
word 0: 32; 32 lines in 32 banks: 1.3; 8 banks x 4 lanes: 4.2; the random words of
``cmech_rand_32``: 3.2, rule 3). The 128-bit gathers at random 16-byte chunks of their lines,
``cmech_rand_32_w4`` (one load a lane) and ``cmech_pair_rand_32_w4`` (two a 32-byte sector, the
CSR kernel's gathers at batch 8), cost the H200 10.6 and 11.1 wavefronts a load, the phase rule
10 and 11, where the warp as one phase (the rule this module used before) gives 7 and 10; their
cycles follow (10.2 and 22.7 cycles per warp load or pair per SM, the simulator 10.0 and 22.6,
before 7.7 and 20.7). The older 16-byte benchmarks (``gather_l1_*_w4``, ``cmech_spread_32_w4``)
leave three words of each load unused, so ptxas narrows them to 32-bit loads (their LSU
writeback is one cycle a request, as for 32-bit gathers, against 4.1-4.4 for the 128-bit ones):
they measured the 32-bit rule. The excess of about 0.2-0.6 is the first lap's cold misses. The
cycles follow: ``cmech_same_32`` 32.2 cycles per warp load per SM, the spread and random ones
7.7-9.2, which the tag stage (8 cycles for 32 lines) binds. ``gather.json``'s benchmarks put the
lanes of every line at the same few word positions, so the k lines' words share banks and the
wavefronts equal the lines.

A load whose sectors miss L1 passes the data stage in pieces as they return
(:meth:`SharedPipe.missed_returns`; ``measurements/h200/l1_miss_pieces.json``: misses over 1-32
lines a warp load, three word patterns, 32- and 128-bit loads, Nsight's data-pipe wavefronts a
request): the lanes L1 has pass under the bank rule; the missed lines, per phase of the width,
two at a time in order of return, each pair one wavefront (two where their lanes read the same
bank position). 32-bit misses at random words of 32 lines: the GPU 15.4 wavefronts a request,
the rule of a hit 3, the pieces 16.0; over 32 spread lines 15.1, pieces 14.4; 128-bit at random
chunks of 32 lines: 18.5, rule 10, pieces 17.9. The pieces over-count 128-bit loads whose phases
touch 4-8 lines each (``cmech_miss_spread_8_w4_p``: 10.5 against 16; the GPU then pairs more
than two lines), and a 128-bit miss is not return-packed (``cmech_miss_same_1_w4_p``: 4.0, the
rule of a packed hit 2; the pieces 4). Lanes waiting on a fill another request has in flight
count as missed (they are served by it); loads of buffers L1 does not cache (the kernel writes
them) keep the rule. The H100 records of the earlier benchmarks agree (``cmech_miss_rand_32``:
15.3 against the rule's 3; ``cmech_miss_same_32``: 31.7, the rule's 32). Not modelled: the pair
that misses costs the H200 67.5 cycles a pair per SM where the simulator gives 49.9 (its second
load asks L2 again for about a quarter of the sectors the first one missed), and the L2 side of
random gathers is dear (``gather_l2_32``: 54.4 cycles against the GPU's 36.6).

The data pipe and the tag stage are :class:`~.l2.BucketServer` s (time order within 128-cycle
buckets), not the FIFO of the shared accesses: their requests are handed over in lockstep
order, and a FIFO would queue a lagging warp's poll behind a leading warp's (the full-grid
``poll_storm`` rounds, held out). Placing the data stage at issue fitted the campaign better
but made those rounds 65% too slow (measurements/README.md). Global wavefronts are not counted
as shared wavefronts (the bank-conflict cross-check compares those with Nsight).

The wavefront count of a static instruction is cached per (per-lane addresses, active mask): the
gathers of the persistent kernels use the same column addresses every step, and a staging loop
cycles through a few address sets (up to ``CACHE_PER_INSTR`` are kept per instruction).
"""

from __future__ import annotations

import numpy as np

from kernels_ir.banks import cost as bank_cost

from .l2 import BucketServer

__all__ = ["SharedPipe", "lines"]

CACHE_PER_INSTR = 8  # address sets remembered per static instruction
# L1TEX tag stage: "4 sets x 4 sectors per cycle" (NVIDIA's description for GV100 and later,
# developer forum thread 273699; measurements/h100/csr_mech.json: 32 lines in 32 banks cost
# 8.6 cycles per warp load per SM, Nsight 31.5 set accesses per request)
TAG_SETS_PER_CYCLE = 4


class SharedPipe:
    def __init__(self, spec, n_sms: int, n_warps: int, n_instrs: int):
        self.rate = float(spec.smem_wavefronts_per_cycle)
        self.shfl_cycles = 1.0 / float(spec.shfl_per_cycle_per_sm)
        # the data pipe's places, in time buckets (with backfill): shuffles, the shared accesses'
        # wavefronts and the data stage of returning global loads all take places there, so
        # each waits for the others' traffic (measurements/h200/data_pipe_share.json)
        self.pipe = BucketServer(n_sms, 1.0 / self.rate)
        self.latency = float(spec.smem_latency_cycles)
        self.free = np.zeros(n_sms)
        self._cache: dict[int, list] = {}
        self.wavefronts = np.zeros(n_instrs, dtype=np.int64)
        self.conflicts = np.zeros(n_instrs, dtype=np.int64)
        self.conflicts_per_warp = np.zeros(n_warps, dtype=np.int64)
        # the tag stage of global loads (one-cycle units)
        self.tags = BucketServer(n_sms, 1.0)

    def cost(self, sid: int, words: np.ndarray, active: np.ndarray, width: int,
             op: str = "ld") -> tuple:
        """(wavefronts, conflicts) per warp of all warps for this access (cached; ``op`` "ld"
        or "st" is fixed per static instruction)."""
        entries = self._cache.setdefault(sid, [])
        corner = (words[0, 0], words[-1, -1])
        for i, (c, w, a, wf, bc) in enumerate(entries):
            if c == corner and np.array_equal(w, words) and np.array_equal(a, active):
                if i:
                    entries.insert(0, entries.pop(i))
                return wf, bc
        wf, bc = bank_cost(words, width, active, op)
        entries.insert(0, (corner, words.copy(), active.copy(), wf, bc))
        del entries[CACHE_PER_INSTR:]
        return wf, bc

    def access(self, sid: int, issue: np.ndarray, warps: np.ndarray, sm: np.ndarray,
               words: np.ndarray, active: np.ndarray, width: int, op: str = "ld") -> np.ndarray:
        """Per-warp cycle at which the data is ready (loads) / the access is done (stores)."""
        wf_all, bc_all = self.cost(sid, words, active, width, op)
        wf, bc = wf_all[warps], bc_all[warps]
        self.wavefronts[sid] += int(wf.sum())
        self.conflicts[sid] += int(bc.sum())
        self.conflicts_per_warp[warps] += bc
        done = self._fifo(issue, sm[warps], wf / self.rate) + self.latency
        self._units(self.pipe, issue, warps, sm, wf)
        return done

    def shuffle(self, issue: np.ndarray, warps: np.ndarray, sm: np.ndarray) -> np.ndarray:
        """Per-warp cycle at which a shuffle issued at ``issue`` takes its place in the pipe
        (its result is ready the shuffle latency later), after the places that earlier shuffles
        and the shared accesses' wavefronts took (module docstring)."""
        return self.pipe.serve(sm[warps], issue, np.full(warps.size, self.shfl_cycles))

    def tag_stage(self, issue: np.ndarray, warps: np.ndarray, sm: np.ndarray,
                  lines: np.ndarray) -> np.ndarray:
        """The tag stage of a global load of ``lines`` lines per warp issued at ``issue``.
        Returns the cycle each warp's request leaves for L1/L2 (the start of its last tag
        cycle: a load of up to 4 lines is not delayed when the stage is free)."""
        cycles = -(-lines // TAG_SETS_PER_CYCLE)
        return self._units(self.tags, issue, warps, sm, cycles) - np.minimum(cycles, 1)

    def _units(self, server, t: np.ndarray, warps: np.ndarray, sm: np.ndarray,
               units: np.ndarray) -> np.ndarray:
        """Each warp's ``units`` one-cycle units on its SM's ``server`` (a BucketServer) from
        cycle ``t``: the end of its last unit (``t`` for none)."""
        out = t.astype(np.float64).copy()
        n = int(units.sum())
        if n == 0:
            return out
        owner = np.repeat(np.arange(warps.size), units)
        start = server.serve(np.repeat(sm[warps], units), np.repeat(t, units))
        np.maximum.at(out, owner, start + server.service)
        return out

    def global_wavefronts(self, sid: int, flat: np.ndarray, active: np.ndarray,
                          width: int) -> np.ndarray:
        """Data-stage wavefronts per warp (all warps) of the global load ``sid`` whose lanes'
        first words are ``flat`` (``width`` words a lane, aligned): shared memory's bank rule at
        that width, :func:`kernels_ir.banks.wavefronts` (cached like :meth:`cost`)."""
        return self.cost(sid, flat, active, width)[0]

    def missed_returns(self, warps: np.ndarray, sm: np.ndarray, flat: np.ndarray,
                       active: np.ndarray, missed: np.ndarray, back: np.ndarray,
                       width: int) -> np.ndarray:
        """The data stage of a global load some of whose lanes missed L1, per row (``warps``;
        the rest as :meth:`missed_units`): the cycle each row's last wavefront is through."""
        rows, ts = self.missed_units(flat, active, missed, back, width)
        out = np.full(flat.shape[0], -np.inf)
        start_t = self.pipe.serve(sm[warps[rows]], ts)
        np.maximum.at(out, rows, start_t + self.pipe.service)
        return out

    @staticmethod
    def missed_units(flat: np.ndarray, active: np.ndarray, missed: np.ndarray,
                     back: np.ndarray, width: int) -> tuple:
        """The data-stage wavefronts of a global load some of whose lanes missed L1 (``flat``,
        ``active``, ``missed``, ``back``: rows x 32, the lanes' first words, which are active,
        which L1 did not have, the cycle each lane's data is back at the SM; ``width`` words a
        lane), as ``(row, ready cycle)`` of each. The lanes L1 had pass under the bank rule
        (:func:`kernels_ir.banks.cost` over them alone) once they are all back; the missed ones
        pass in pieces as they return: per phase of the width (32 / 16 / 8 lanes), the lines
        they read in order of return, two lines a piece, a piece one wavefront, or two where the
        two lines' lanes read the same bank position (the same chunk of the width in different
        lines), each as its later line is back (``measurements/h200/l1_miss_pieces.json``)."""
        hits = active & ~missed
        unit_row, unit_t = [], []
        if hits.any():
            n_hit = bank_cost(flat, width, hits, "ld")[0]
            t_hit = np.where(hits, back, -np.inf).max(axis=1)
            unit_row.append(np.repeat(np.arange(flat.shape[0]), n_hit))
            unit_t.append(np.repeat(t_hit, n_hit))
        rr, ll = np.nonzero(missed & active)
        key = rr * 4 + ll // (32 // width)                 # (row, phase)
        f = flat[rr, ll].astype(np.int64)
        line = f >> 5
        bit = np.left_shift(np.int64(1), (f & 31) // width)
        t = back[rr, ll]
        order = np.lexsort((line, key))
        key, line, bit, t = key[order], line[order], bit[order], t[order]
        head = np.r_[True, (key[1:] != key[:-1]) | (line[1:] != line[:-1])]
        at = np.flatnonzero(head)
        ukey, uline = key[at], line[at]
        ut = np.maximum.reduceat(t, at)
        umask = np.bitwise_or.reduceat(bit, at)
        o2 = np.lexsort((uline, ut, ukey))                 # a phase's lines in order of return
        ukey, ut, umask = ukey[o2], ut[o2], umask[o2]
        first = np.r_[True, ukey[1:] != ukey[:-1]]
        start = np.maximum.accumulate(np.where(first, np.arange(ukey.size), 0))
        lead = (np.arange(ukey.size) - start) % 2 == 0     # the first line of each piece
        pair = np.r_[ukey[1:] == ukey[:-1], False]         # ... has a second line
        piece_t = np.where(pair, np.r_[ut[1:], 0.0], ut)   # the piece is through when both are
        clash = lead & pair & (umask & np.r_[umask[1:], 0] != 0)
        for sel in (lead, clash):
            unit_row.append(ukey[sel] // 4)
            unit_t.append(piece_t[sel])
        return np.concatenate(unit_row), np.concatenate(unit_t)

    def global_returns(self, done: np.ndarray, warps: np.ndarray, sm: np.ndarray,
                       wavefronts: np.ndarray) -> np.ndarray:
        """The data stage of a global load whose data reaches the SM at ``done`` (per warp),
        ``wavefronts`` one-cycle units per warp (:meth:`global_wavefronts`). Returns the cycle
        each warp's last wavefront is through."""
        return self._units(self.pipe, done, warps, sm, wavefronts)

    def _fifo(self, issue: np.ndarray, smw: np.ndarray, d: np.ndarray) -> np.ndarray:
        """End cycle of each access (issue cycle, SM, service ``d`` cycles) served first come
        first served per SM after ``self.free``, which is updated."""
        order = np.lexsort((issue, smw))   # by SM, then issue cycle, then warp (warps ascend)
        done = np.empty(smw.size)
        s_sorted = smw[order]
        t_sorted = issue[order].astype(np.float64)
        d_sorted = d[order].astype(np.float64)
        # start_k = max(t_k, end_{k-1}); with variable d: end_k = max_j<=k(t_j + sum_{j..k} d)
        head = np.ones(order.size, dtype=bool)
        head[1:] = s_sorted[1:] != s_sorted[:-1]
        seg = np.cumsum(head) - 1
        csum = np.cumsum(d_sorted)
        base = np.maximum.accumulate(np.where(head, np.arange(order.size), 0))
        prior = (csum - d_sorted)[base]                   # sum of d before the segment
        S = csum - prior                                  # inclusive sum within segment
        v = np.maximum(t_sorted, 0.0) - (S - d_sorted)    # t_j - sum_{<j} d
        v0 = self.free[s_sorted]                           # server free time as a j=-1 term
        big = float(2 ** 44)
        run = np.maximum.accumulate(np.maximum(v, v0) + seg * big) - seg * big
        end = run + S
        last = np.append(np.flatnonzero(head)[1:], order.size) - 1
        self.free[s_sorted[last]] = end[last]
        done[order] = end
        return done


def lines(flat: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Distinct 128-byte lines (32 words) per row among the active lanes (an aligned access of
    up to 16 bytes never crosses a line, so a lane's first word names its line)."""
    key = np.where(active, flat >> 5, -1)
    if not (key[:, 1:] >= key[:, :-1]).all():
        key = np.sort(key, axis=1)
    new = np.empty(key.shape, dtype=bool)
    new[:, 0] = True
    np.not_equal(key[:, 1:], key[:, :-1], out=new[:, 1:])
    new &= key >= 0
    return new.sum(axis=1)
