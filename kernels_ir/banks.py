"""Shared-memory bank arithmetic: wavefronts and conflicts of warp-wide accesses.

This is the one implementation used both by the simulator (to charge shared-memory time) and by
the layout study (to count and minimise conflicts).

Hardware rules (``docs/hardware_sources.md`` s4; CUDA Programming Guide shared memory section
for cc 5.x+; NVIDIA CUTLASS issue #328; NVIDIA forum 77228):

- 32 banks of 4 bytes; word ``w`` lives in bank ``w % 32``.
- Lanes that read the same 32-bit word are served by one broadcast: no conflict.
- A 32-bit access is one phase of 32 lanes. A 64-bit access is processed as two half-warp phases
  (16 lanes x 8 B), a 128-bit access as four quarter-warp phases (8 lanes x 16 B). Every phase
  covers exactly 32 word slots, and conflicts only count inside a phase.
- A phase costs as many wavefronts as the largest number of *distinct* words that fall into one
  bank (at least one if any lane of the phase is active).

``bank_conflicts = wavefronts - active phases`` (the Nsight Compute definition: wavefronts beyond
the ideal count).

Not modelled: the cc 7.x "return packing" that lets some 128-bit accesses whose lane pairs share
an address complete in 2 wavefronts (stated only for 7.0-7.5 in the forum answer).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError

WARP = 32
BANKS = 32
ACCESS_WIDTHS = (1, 2, 4)  # 32-bit words per lane: 32-, 64-, 128-bit accesses


def check_width(width: int) -> int:
    """Return ``width`` (words) or raise naming the accepted values."""
    if width not in ACCESS_WIDTHS:
        raise InputError(f"access width={width} words is not supported; accepted: 1 (32-bit), "
                         f"2 (64-bit), 4 (128-bit)")
    return width


def phase_words(words: np.ndarray, width: int, active: np.ndarray | None = None) -> np.ndarray:
    """The word addresses each phase touches: shape ``(..., phases, 32)``, -1 where inactive.

    ``words``: int array ``(..., 32)``, the first word each lane accesses (aligned to ``width``).
    """
    check_width(width)
    words = np.asarray(words, dtype=np.int64)
    if words.shape[-1] != WARP:
        raise InputError(f"word addresses must have 32 lanes in the last axis, got {words.shape}")
    lead = words.shape[:-1]
    every = words[..., :, None] + np.arange(width, dtype=np.int64)  # (..., 32, width)
    if active is not None:
        every = np.where(np.asarray(active, dtype=bool)[..., :, None], every, -1)
    phases = width  # 32 / (32 / width)
    return every.reshape(*lead, phases, WARP)


def wavefronts(words: np.ndarray, width: int, active: np.ndarray | None = None) -> np.ndarray:
    """Wavefronts of each warp-wide shared access: int array of shape ``words.shape[:-1]``."""
    pw = phase_words(words, width, active)
    lead = pw.shape[:-2]
    flat = pw.reshape(-1, WARP)  # one row per (instruction, phase)
    srt = np.sort(flat, axis=1)
    valid = srt >= 0
    distinct = valid.copy()
    distinct[:, 1:] &= srt[:, 1:] != srt[:, :-1]
    rows = np.arange(flat.shape[0], dtype=np.int64)[:, None]
    key = rows * BANKS + np.where(valid, srt % BANKS, 0)
    counts = np.bincount(key.ravel(), weights=distinct.ravel(),
                         minlength=flat.shape[0] * BANKS).reshape(-1, BANKS)
    per_phase = counts.max(axis=1).astype(np.int64)  # 0 for a phase with no active lane
    return per_phase.reshape(*lead, pw.shape[-2]).sum(axis=-1)


def active_phases(width: int, active: np.ndarray | None, lead_shape: tuple) -> np.ndarray:
    """Number of phases with at least one active lane (the ideal wavefront count)."""
    check_width(width)
    if active is None:
        return np.full(lead_shape, width, dtype=np.int64)
    act = np.asarray(active, dtype=bool).reshape(*lead_shape, width, WARP // width)
    return act.any(axis=-1).sum(axis=-1).astype(np.int64)


def bank_conflicts(words: np.ndarray, width: int, active: np.ndarray | None = None) -> np.ndarray:
    """Wavefronts beyond the ideal (one per active phase) for each warp-wide access."""
    words = np.asarray(words)
    return wavefronts(words, width, active) - active_phases(width, active, words.shape[:-1])


def wavefronts_bruteforce(words, width: int, active=None) -> int:
    """Reference implementation for one access (plain Python; used by tests)."""
    check_width(width)
    lanes_per_phase = WARP // width
    total = 0
    for p in range(width):
        per_bank: dict[int, set[int]] = {}
        for lane in range(p * lanes_per_phase, (p + 1) * lanes_per_phase):
            if active is not None and not active[lane]:
                continue
            for j in range(width):
                w = int(words[lane]) + j
                per_bank.setdefault(w % BANKS, set()).add(w)
        total += max((len(s) for s in per_bank.values()), default=0)
    return total


def lanes_per_phase(width: int) -> int:
    """Lanes served together in one phase of a ``width``-word access (32, 16 or 8)."""
    return WARP // check_width(width)


def bank_group(words: np.ndarray, width: int) -> np.ndarray:
    """The aligned group of ``width`` banks that a ``width``-word access at ``words`` occupies.

    Values are ``0 .. 32/width - 1``. Inside one phase, two lanes whose (aligned) accesses fall
    into the same group and start at different words need two wavefronts; this is the rule
    :func:`wavefronts` applies word by word, restated per lane for the layout study (a lane's
    ``width`` words cover exactly the ``width`` banks of its group).
    """
    check_width(width)
    words = np.asarray(words, dtype=np.int64)
    return (words % BANKS) // width
