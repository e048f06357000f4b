"""The meaning of every op: ONE table from :class:`kernels_ir.ir.Op` to numpy behaviour.

This table is the living definition of the IR (as tinygrad's Python emulator is of its UOps).
Each entry is an :class:`OpSemantics` whose ``kind`` tells the executor how to call ``fn``:

- ``"alu"``: ``fn(attrs) -> f(*srcs) -> result``; pure and elementwise on arrays of shape
  ``(n_warps, 32)`` (or numpy scalars for immediates). Dtypes: ``float32`` for f32, ``int32`` for
  i32 (two's complement, wrapping), ``bool`` for predicates.
- ``"sreg"``: ``fn(attrs) -> name`` of the special register (``lane``, ``warp`` (warp in CTA),
  ``tid``, ``cta``, ``nctas`` (grid size), ``nwarps`` (warps per CTA), ``nthreads`` (block size),
  ``step`` (induction value of the enclosing ``Loop(kind="time")``)); the executor supplies values.
- ``"load"`` / ``"store"``: ``fn(view, flat, ...)`` gather/scatter of 32-bit words.
- ``"atomic"``: ``fn(view, flat, values) -> old`` in lane order (warp-major, then lane).
- ``"warp"``: ``fn(values, arg, active) -> result`` over the 32 lanes of each warp.
- ``"sync"``: ``fn() -> None``; BAR, FENCE and SLEEP have no functional effect in a lockstep
  execution (every warp of a group executes each instruction before any executes the next, so
  a barrier is satisfied within the group and every earlier store is visible; the executor
  holds a group at a barrier that other groups of the CTA have not reached); their cost is in
  the timing.

Numerical choices (documented where the hardware leaves a choice):
- FFMA: the product of two float32 values is exact in float64; the sum is rounded to float64 and
  then to float32. This equals the single-rounded fused result except in rare double-rounding
  ties (the exact ``a*b+c`` can need more than 53 bits); the difference is at most 1 ulp.
- TANH / EXP / SIGMOID: computed in float64 and rounded once to float32 (more accurate than the
  SFU's approximations; the timing model charges the SFU).
- IDIV / IREM: floor division and its remainder (``a - b * floor(a / b)``); a zero divisor in an
  active lane is an error raised by the executor.
- SHL / SHR: arithmetic shift right (signed i32, as CUDA ``>>`` on ``int``); shift counts
  outside ``0..31`` are clamped to 32 (PTX ``shl``/``shr`` semantics): ``x << 32 == 0``,
  ``x >> 32`` is 0 or -1.
- H2F: the IEEE binary16 value in bits 0-15 (``half`` 0) or 16-31 (``half`` 1) of an i32 word,
  converted exactly to float32 (PTX ``cvt.f32.f16``). U16: bits 0-15, zero-extended.
- F2I: truncation toward zero, saturating to the i32 range, NaN -> 0 (PTX ``cvt.rzi.s32.f32``).
- FMAX / FMIN: IEEE maxNum/minNum (a NaN operand yields the other operand), as CUDA ``fmaxf``.
- FSETP: ordered comparisons (false on NaN) except ``ne`` (true on NaN), as CUDA ``!=``.
- SHFL_XOR / SHFL_IDX: a lane whose source lane is inactive (or, for XOR, outside 0..31) gets
  its own value (CUDA leaves the result undefined; the own value is what a masked ``shfl.sync``
  with the lane absent from the member mask commonly returns and keeps reductions well defined).
  SHFL_IDX takes the source lane modulo 32.
- VOTE_ANY / VOTE_ALL: over the active lanes of the warp; the result goes to every active lane.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kernels_ir.ir import Op

__all__ = ["OpSemantics", "SEMANTICS", "atomic_add", "WARP"]

WARP = 32
_LANES = np.arange(WARP, dtype=np.int32)
_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1


@dataclass(frozen=True, slots=True)
class OpSemantics:
    kind: str
    fn: Callable


def _alu(fn: Callable) -> OpSemantics:
    """An elementwise op that ignores attributes."""
    return OpSemantics("alu", lambda attrs: fn)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _ffma(a, b, c):
    return (np.multiply(a, b, dtype=np.float64) + c).astype(np.float32)


def _unary64(fn):
    return lambda a: fn(np.asarray(a, dtype=np.float64)).astype(np.float32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _f2i(a):
    a = np.asarray(a, dtype=np.float64)
    t = np.trunc(np.nan_to_num(a, nan=0.0, posinf=_I32_MAX, neginf=_I32_MIN))
    return np.clip(t, _I32_MIN, _I32_MAX).astype(np.int32)


def _h2f(attrs):
    shift = 16 * int(attrs["half"])

    def f(a):
        bits = (np.asarray(a, dtype=np.int32).view(np.uint32) >> np.uint32(shift)) & 0xFFFF
        return bits.astype(np.uint16).view(np.float16).astype(np.float32)
    return f


def _bitcast(a):
    a = np.asarray(a)
    return a.view(np.int32) if a.dtype == np.float32 else a.view(np.float32)


def _shl(a, b):
    b = np.asarray(b, dtype=np.int32)
    return np.where((b >= 32) | (b < 0), np.int32(0), np.left_shift(a, np.clip(b, 0, 31)))


def _shr(a, b):
    b = np.asarray(b, dtype=np.int32)
    return np.right_shift(a, np.where((b >= 32) | (b < 0), 31, b).astype(np.int32))


def _imad(a, b, c):
    return (np.multiply(a, b, dtype=np.int32) + c).astype(np.int32)


_CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
        "eq": np.equal, "ne": np.not_equal}


def _setp(attrs: dict):
    return _CMP[attrs["cmp"]]


def _gather(view: np.ndarray, flat: np.ndarray) -> np.ndarray:
    return view[flat]


def _scatter(view: np.ndarray, flat: np.ndarray, values: np.ndarray) -> None:
    view[flat] = values


def atomic_add(view: np.ndarray, flat: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sequential-equivalent atomic add of ``values`` at word addresses ``flat`` (1-D, lane order).

    Returns the old value each lane saw when lanes are serviced in array order (warp-major, then
    lane), i.e. the old value plus the sum of the values of earlier lanes on the same address.
    i32 arithmetic wraps.
    """
    flat = np.asarray(flat, dtype=np.int64)
    vals = np.asarray(values, dtype=np.int64)
    if flat.size == 0:
        return np.zeros(0, dtype=np.int32)
    order = np.argsort(flat, kind="stable")
    a_s, v_s = flat[order], vals[order]
    csum = np.cumsum(v_s)
    start = np.ones(a_s.size, dtype=bool)
    start[1:] = a_s[1:] != a_s[:-1]
    grp_first = np.maximum.accumulate(np.where(start, np.arange(a_s.size), 0))
    before = csum - v_s - (csum[grp_first] - v_s[grp_first])  # exclusive prefix within group
    old_s = view[a_s].astype(np.int64) + before
    old = np.empty_like(old_s)
    old[order] = old_s
    totals = np.zeros(a_s.size, dtype=np.int64)
    np.add.at(totals, grp_first, v_s)
    heads = start.nonzero()[0]
    view[a_s[heads]] = (view[a_s[heads]].astype(np.int64) + totals[heads]).astype(np.int32)
    return old.astype(np.int32)


def _shfl_xor(values: np.ndarray, arg, active: np.ndarray | None) -> np.ndarray:
    src = np.bitwise_xor(_LANES, np.asarray(arg, dtype=np.int32))
    return _from_lanes(values, src, active)


def _shfl_idx(values: np.ndarray, arg, active: np.ndarray | None) -> np.ndarray:
    src = np.mod(np.asarray(arg, dtype=np.int32), WARP)
    return _from_lanes(values, src, active)


def _from_lanes(values: np.ndarray, src: np.ndarray, active: np.ndarray | None) -> np.ndarray:
    values = np.broadcast_to(values, (values.shape[0] if np.ndim(values) == 2 else 1, WARP))
    if np.ndim(src) == 1:  # the same source lane pattern in every warp (an immediate operand)
        valid = (src >= 0) & (src < WARP)
        srcc = np.where(valid, src, _LANES)
        got = values[:, srcc]
        if active is not None:
            return np.where(valid & active[:, srcc], got, values)
        return got if valid.all() else np.where(valid, got, values)
    src = np.broadcast_to(src, values.shape)
    valid = (src >= 0) & (src < WARP)
    srcc = np.where(valid, src, _LANES)
    got = np.take_along_axis(values, srcc, axis=1)
    if active is not None:
        valid = valid & np.take_along_axis(active, srcc, axis=1)
    return np.where(valid, got, values)


def _vote_any(values, arg, active):
    p = values if active is None else (values & active)
    return np.broadcast_to(p.any(axis=1, keepdims=True), p.shape)


def _vote_all(values, arg, active):
    p = values if active is None else (values | ~active)
    return np.broadcast_to(p.all(axis=1, keepdims=True), p.shape)


def _nothing() -> None:
    return None


SEMANTICS: dict[Op, OpSemantics] = {
    # data movement
    Op.MOV: _alu(lambda a: a),
    Op.SREG: OpSemantics("sreg", lambda attrs: attrs["kind"]),
    Op.BITCAST: _alu(_bitcast),
    Op.I2F: _alu(lambda a: np.asarray(a).astype(np.float32)),
    Op.F2I: _alu(_f2i),
    Op.H2F: OpSemantics("alu", _h2f),
    Op.U16: _alu(lambda a: np.bitwise_and(a, 0xFFFF, dtype=np.int32)),
    # float arithmetic (float32 in, float32 out; numpy float32 ops round once)
    Op.FADD: _alu(lambda a, b: np.add(a, b, dtype=np.float32)),
    Op.FSUB: _alu(lambda a, b: np.subtract(a, b, dtype=np.float32)),
    Op.FMUL: _alu(lambda a, b: np.multiply(a, b, dtype=np.float32)),
    Op.FFMA: _alu(_ffma),
    Op.FMAX: _alu(lambda a, b: np.fmax(a, b, dtype=np.float32)),
    Op.FMIN: _alu(lambda a, b: np.fmin(a, b, dtype=np.float32)),
    Op.TANH: _alu(_unary64(np.tanh)),
    Op.EXP: _alu(_unary64(np.exp)),
    Op.SIGMOID: _alu(_unary64(_sigmoid)),
    # integer arithmetic (int32, wrapping)
    Op.IADD: _alu(lambda a, b: np.add(a, b, dtype=np.int32)),
    Op.ISUB: _alu(lambda a, b: np.subtract(a, b, dtype=np.int32)),
    Op.IMUL: _alu(lambda a, b: np.multiply(a, b, dtype=np.int32)),
    Op.IMAD: _alu(_imad),
    Op.IDIV: _alu(lambda a, b: np.floor_divide(a, b, dtype=np.int32)),
    Op.IREM: _alu(lambda a, b: np.mod(a, b, dtype=np.int32)),
    Op.IMIN: _alu(lambda a, b: np.minimum(a, b, dtype=np.int32)),
    Op.IMAX: _alu(lambda a, b: np.maximum(a, b, dtype=np.int32)),
    Op.SHL: _alu(_shl),
    Op.SHR: _alu(_shr),
    Op.AND: _alu(lambda a, b: np.bitwise_and(a, b, dtype=np.int32)),
    Op.OR: _alu(lambda a, b: np.bitwise_or(a, b, dtype=np.int32)),
    Op.XOR: _alu(lambda a, b: np.bitwise_xor(a, b, dtype=np.int32)),
    # compare / select / predicates
    Op.FSETP: OpSemantics("alu", _setp),
    Op.ISETP: OpSemantics("alu", _setp),
    Op.SEL: _alu(np.where),
    Op.PAND: _alu(np.logical_and),
    Op.POR: _alu(np.logical_or),
    Op.PNOT: _alu(np.logical_not),
    # memory
    Op.LDS: OpSemantics("load", _gather),
    Op.STS: OpSemantics("store", _scatter),
    Op.LDG: OpSemantics("load", _gather),
    Op.LDG_VOLATILE: OpSemantics("load", _gather),
    Op.STG: OpSemantics("store", _scatter),
    Op.ATOM_ADD: OpSemantics("atomic", atomic_add),
    Op.FENCE: OpSemantics("sync", _nothing),
    Op.SLEEP: OpSemantics("sync", _nothing),
    # warp
    Op.SHFL_XOR: OpSemantics("warp", _shfl_xor),
    Op.SHFL_IDX: OpSemantics("warp", _shfl_idx),
    Op.VOTE_ANY: OpSemantics("warp", _vote_any),
    Op.VOTE_ALL: OpSemantics("warp", _vote_all),
    # CTA
    Op.BAR: OpSemantics("sync", _nothing),
}

assert set(SEMANTICS) == set(Op), "every op needs a semantics entry"
