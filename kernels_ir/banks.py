"""Shared-memory bank arithmetic: wavefronts and conflicts of warp-wide accesses.

This is the one implementation used both by the simulator (to charge shared-memory time) and by
the layout study (to count and minimise conflicts).

The rule (H100, measured: ``measurements/h100/bank_rule.json``, 344 single-instruction
patterns, one Nsight Compute launch each; ``python3 measurements/bank_rule.py --analyse
measurements/h100/bank_rule.json`` prints the comparison, and ``tests/test_bank_rule.py``
asserts that every pattern matches):

- 32 banks of 4 bytes; word ``w`` lives in bank ``w % 32``.
- An access is served in *phases*, groups of consecutive lanes that each cover 32 word slots:
  a 32-bit access is one phase of 32 lanes, a 64-bit access two half-warp phases (16 lanes x
  8 B), a 128-bit access four quarter-warp phases (8 lanes x 16 B) (CUDA C++ Programming Guide,
  shared memory of cc 5.x and later; NVIDIA CUTLASS issue #328).
- A phase costs as many wavefronts as the largest number of *distinct* words that fall into one
  bank (lanes that read the same word share a broadcast), at least one if any lane of the phase
  is active.
- Return packing (loads only): a 64- or 128-bit *load* whose active lanes read the same address
  in every lane pair ``(l, l ^ 1)``, or in every lane pair ``(l, l ^ 2)`` (a pair with one
  inactive lane counts as equal), returns two lanes' registers per slot, so its phases hold
  twice as many lanes: one phase of 32 lanes for 64 bits, two half-warp phases for 128 bits.
  The condition is on the whole warp (one unequal pair anywhere and no phase is merged). This
  is the rule NVIDIA states for cc 7.0-7.5 in developer forum thread 77228 ("the return
  bandwidth of L1 and shared memory is 128 bytes/cycle == 1 register/cycle"); the H100 follows
  it. Stores are never packed.

``bank_conflicts = wavefronts - active phases``, with the phases of the packed or unpacked
grouping: exactly Nsight Compute's ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}``
per instruction. So a packed load that needs more than one wavefront per half-warp has
conflicts even when its lane phases would not (every second lane reading contiguous 16-byte
chunks: 4 wavefronts, 2 conflicts), and an unpacked broadcast has none.

The record's evidence, per width (all usable patterns: kernels' own gathers, structured,
masked and random addresses): 32-bit loads 29/29, 64-bit loads 55/55, 128-bit loads 130/130,
32/64/128-bit stores 21/21, 43/43, 66/66 patterns match in both wavefronts and conflicts.
Before return packing was modelled, 64- and 128-bit loads matched in 50/55 and 122/130
(wavefronts) and 54/55 and 124/130 (conflicts). Whole sparse persistent kernels of the fresh
draw ``measurements/h100/fresh_2026-11-23_s1`` (simulated with the layouts they ran): shared-load
wavefronts and conflicts equal Nsight's in 81 of 90 cases, the rest within 0.01% (38 and 59 with
lane phases only: padded and empty slots of the gathers are packed). Only the wavefronts are
charged as time by the simulator; the conflict counter is compared with Nsight's.
"""

from __future__ import annotations

import numpy as np

from .errors import InputError

WARP = 32
BANKS = 32
ACCESS_WIDTHS = (1, 2, 4)  # 32-bit words per lane: 32-, 64-, 128-bit accesses
OPS = ("ld", "st")
_XOR1 = np.arange(WARP) ^ 1
_XOR2 = np.arange(WARP) ^ 2


def check_width(width: int) -> int:
    """Return ``width`` (words) or raise naming the accepted values."""
    if width not in ACCESS_WIDTHS:
        raise InputError(f"access width={width} words is not supported; accepted: 1 (32-bit), "
                         f"2 (64-bit), 4 (128-bit)")
    return width


def check_op(op: str) -> str:
    """Return ``op`` or raise naming the accepted values."""
    if op not in OPS:
        raise InputError(f"shared access op={op!r} is not known; accepted: 'ld', 'st'")
    return op


def _words(words) -> np.ndarray:
    words = np.asarray(words, dtype=np.int64)
    if words.shape[-1:] != (WARP,):
        raise InputError(f"word addresses must have 32 lanes in the last axis, got {words.shape}")
    return words


def phase_words(words: np.ndarray, width: int, active: np.ndarray | None = None) -> np.ndarray:
    """The word addresses each lane phase touches: shape ``(..., phases, 32)``, -1 where
    inactive (the unpacked grouping: ``width`` phases of ``32 / width`` lanes).

    ``words``: int array ``(..., 32)``, the first word each lane accesses (aligned to ``width``).
    """
    check_width(width)
    words = _words(words)
    lead = words.shape[:-1]
    every = words[..., :, None] + np.arange(width, dtype=np.int64)  # (..., 32, width)
    if active is not None:
        every = np.where(np.asarray(active, dtype=bool)[..., :, None], every, -1)
    return every.reshape(*lead, width, WARP)


def packed(words: np.ndarray, width: int, active: np.ndarray | None = None,
           op: str = "ld") -> np.ndarray:
    """Whether each access is return-packed (module docstring): bool array ``words.shape[:-1]``.

    Only 64- and 128-bit loads can be; 32-bit accesses and stores never are.
    """
    check_width(width)
    check_op(op)
    words = _words(words)
    lead = words.shape[:-1]
    if op != "ld" or width == 1:
        return np.zeros(lead, dtype=bool)
    # lane pairs (l, l ^ x): the two halves of every run of 2 x lanes (equality is symmetric,
    # so one comparison per pair)
    act = None if active is None else np.broadcast_to(np.asarray(active, dtype=bool),
                                                      words.shape)
    out = None
    for x in (1, 2):
        w = words.reshape(*lead, WARP // (2 * x), 2, x)
        same = w[..., 0, :] == w[..., 1, :]
        if act is not None:
            a = act.reshape(*lead, WARP // (2 * x), 2, x)
            same |= ~a[..., 0, :] | ~a[..., 1, :]
        ok = same.reshape(*lead, WARP // 2).all(axis=-1)
        out = ok if out is None else out | ok
    return out


def _busiest(starts: np.ndarray, width: int) -> np.ndarray:
    """Per row of first words (-1 = inactive lane): the largest number of distinct words in one
    bank (0 for a row with no active lane). A lane's ``width`` aligned words fill the ``width``
    banks of its :func:`bank_group`, so this is the largest number of distinct first words in
    one group."""
    n, m = starts.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    groups = BANKS // width
    srt = np.sort(starts, axis=1).reshape(-1)
    # a lane's word is distinct if active and not its sorted row's previous word (each row's
    # first lane: no previous one), over the flat array
    distinct = np.empty(srt.size, dtype=bool)
    np.not_equal(srt[1:], srt[:-1], out=distinct[1:])
    distinct[::m] = True
    distinct &= srt >= 0
    # the bank group (word % 32) // width of a word >= 0, with bit operations (width: 1, 2, 4);
    # distinct words counted per (group, row), the rows contiguous for the max over the groups
    key = ((srt & (BANKS - 1)) >> (width.bit_length() - 1)) * n + np.repeat(np.arange(n), m)
    counts = np.bincount(key[distinct], minlength=groups * n).reshape(groups, n)
    return counts.max(axis=0).astype(np.int64)


_COST_CHUNK = 1 << 12   # accesses costed at a time: their arrays stay in the CPU's caches


def _cost(words, width: int, active, op: str) -> tuple[np.ndarray, np.ndarray]:
    """(wavefronts, ideal) per access: ideal = phases with an active lane."""
    check_width(width)
    check_op(op)
    words = _words(words)
    lead = words.shape[:-1]
    flat = words.reshape(-1, WARP)                                # one row per access
    act = None
    if active is not None:
        act = np.broadcast_to(np.asarray(active, dtype=bool), words.shape).reshape(-1, WARP)
    n = flat.shape[0]
    wf = np.empty(n, dtype=np.int64)
    ideal = np.empty(n, dtype=np.int64)
    for a in range(0, n, _COST_CHUNK):
        b = min(n, a + _COST_CHUNK)
        wf[a:b], ideal[a:b] = _cost_rows(flat[a:b], width, None if act is None else act[a:b], op)
    return wf.reshape(lead), ideal.reshape(lead)


def _cost_rows(words: np.ndarray, width: int, act, op: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_cost` of accesses ``(n, 32)``."""
    # words % width != 0 for width 2 or 4: a low bit set (in the OR of all the words, if all
    # lanes are active)
    if width > 1 and (int(np.bitwise_or.reduce(words, axis=None)) & (width - 1) if act is None
                      else np.any((words & (width - 1) != 0) & act)):
        raise InputError(f"a {32 * width}-bit shared access needs word addresses aligned to "
                         f"{width} words")
    flat = words if act is None else np.where(act, words, -1)
    pk = packed(words, width, act, op)
    wf = np.empty(flat.shape[0], dtype=np.int64)
    ideal = np.empty(flat.shape[0], dtype=np.int64)
    for merged, sel in ((False, ~pk), (True, pk)):
        idx = np.flatnonzero(sel) if pk.any() else None
        if idx is not None and idx.size == 0:
            continue
        phases = width // 2 if merged else width
        rows = (flat if idx is None else flat[idx]).reshape(-1, WARP // phases)
        per = _busiest(rows, width).reshape(-1, phases)
        dest = slice(None) if idx is None else idx
        wf[dest] = per.sum(axis=1)
        ideal[dest] = (per > 0).sum(axis=1)
        if idx is None:
            break
    return wf, ideal


def wavefronts(words: np.ndarray, width: int, active: np.ndarray | None = None,
               op: str = "ld") -> np.ndarray:
    """Wavefronts of each warp-wide shared access: int array of shape ``words.shape[:-1]``.

    ``words``: int ``(..., 32)``, the first word of each lane (aligned to ``width`` words);
    ``active``: bool ``(..., 32)`` or None (all lanes); ``op``: "ld" (default) or "st".
    """
    return _cost(words, width, active, op)[0]


def ideal_wavefronts(words: np.ndarray, width: int, active: np.ndarray | None = None,
                     op: str = "ld") -> np.ndarray:
    """Phases with an active lane (packed or lane phases): Nsight's conflict-free count."""
    return _cost(words, width, active, op)[1]


def cost(words: np.ndarray, width: int, active: np.ndarray | None = None,
         op: str = "ld") -> tuple[np.ndarray, np.ndarray]:
    """``(wavefronts, bank conflicts)`` of each access, computed once."""
    wf, ideal = _cost(words, width, active, op)
    return wf, wf - ideal


def bank_conflicts(words: np.ndarray, width: int, active: np.ndarray | None = None,
                   op: str = "ld") -> np.ndarray:
    """Wavefronts beyond the ideal (one per active phase) for each warp-wide access."""
    return cost(words, width, active, op)[1]


def active_phases(width: int, active: np.ndarray | None, lead_shape: tuple) -> np.ndarray:
    """Number of *lane* phases (unpacked grouping) with at least one active lane."""
    check_width(width)
    if active is None:
        return np.full(lead_shape, width, dtype=np.int64)
    act = np.asarray(active, dtype=bool).reshape(*lead_shape, width, WARP // width)
    return act.any(axis=-1).sum(axis=-1).astype(np.int64)


def wavefronts_bruteforce(words, width: int, active=None, op: str = "ld",
                          ideal: bool = False) -> int:
    """Reference implementation for one access (plain Python; used by tests). With
    ``ideal=True`` it returns the phases with an active lane instead of the wavefronts."""
    check_width(width)
    check_op(op)
    on = [active is None or bool(active[lane]) for lane in range(WARP)]
    merged = op == "ld" and width > 1 and any(
        all(not (on[lane] and on[lane ^ x]) or int(words[lane]) == int(words[lane ^ x])
            for lane in range(WARP)) for x in (1, 2))
    lanes = 2 * WARP // width if merged else WARP // width
    total = 0
    for start in range(0, WARP, lanes):
        per_bank: dict[int, set[int]] = {}
        for lane in range(start, start + lanes):
            if not on[lane]:
                continue
            for j in range(width):
                w = int(words[lane]) + j
                per_bank.setdefault(w % BANKS, set()).add(w)
        busiest = max((len(s) for s in per_bank.values()), default=0)
        total += min(busiest, 1) if ideal else busiest
    return total


def lanes_per_phase(width: int) -> int:
    """Lanes served together in one (unpacked) phase of a ``width``-word access (32, 16, 8)."""
    return WARP // check_width(width)


def bank_group(words: np.ndarray, width: int) -> np.ndarray:
    """The aligned group of ``width`` banks that a ``width``-word access at ``words`` occupies.

    Values are ``0 .. 32/width - 1``. Inside one phase (packed or not), two lanes whose
    (aligned) accesses fall into the same group and start at different words need two
    wavefronts; this is the rule :func:`wavefronts` applies word by word, restated per lane for
    the layout study (a lane's ``width`` words cover exactly the ``width`` banks of its group).
    """
    check_width(width)
    words = np.asarray(words, dtype=np.int64)
    # (words % 32) // width with bit operations: the same for every integer (floor modulo by a
    # power of two keeps the low bits, and width is a power of two)
    return (words & (BANKS - 1)) >> (width.bit_length() - 1)
