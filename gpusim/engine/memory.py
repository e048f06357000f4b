"""Memory spaces of the functional executor: global buffers and per-CTA shared memory.

Each space is ONE ``uint32`` array with ``float32`` and ``int32`` views of the same words, so a
store of either type and a ``BITCAST`` see the same 32 bits (the Lamport sentinel ``-0.0`` is the
bit pattern ``0x80000000``). Buffers are placed one after another at bases aligned to 4 words
(16 bytes; global buffers to 256 bytes, as ``cudaMalloc`` places them, so that their 128-byte
lines and 32-byte sectors are the GPU's), so the alignment of a vector access relative to its
buffer equals its alignment in the space. Shared memory holds ``n_ctas`` copies of the CTA's
shared layout, CTA-major.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels_ir.errors import InputError
from kernels_ir.ir import F32, Buffer, Kernel

__all__ = ["Space", "global_space", "shared_space", "ALIGN_WORDS"]

ALIGN_WORDS = 4  # 16-byte alignment: the widest access (128 bit)
GLOBAL_ALIGN_WORDS = 64  # 256 bytes: cudaMalloc's alignment, so lines and sectors are the GPU's


@dataclass(slots=True)
class Space:
    """A flat array of 32-bit words holding several buffers."""

    words: np.ndarray          # uint32
    f32: np.ndarray            # float32 view
    i32: np.ndarray            # int32 view
    bases: dict[str, int]      # buffer name -> first word
    buffers: dict[str, Buffer]
    stride: int                # words per copy (one CTA for shared, the whole space for global)

    def view(self, buf: Buffer) -> np.ndarray:
        return self.f32 if buf.dtype is F32 else self.i32

    def read(self, name: str, copy: int = 0) -> np.ndarray:
        buf = self.buffers[name]
        lo = copy * self.stride + self.bases[name]
        return self.view(buf)[lo:lo + buf.size].copy()


def _layout(buffers: tuple[Buffer, ...], align: int) -> tuple[dict[str, int], int]:
    bases, top = {}, 0
    for b in buffers:
        bases[b.name] = top
        top += -(-b.size // align) * align
    return bases, max(top, align)


def _make(buffers: tuple[Buffer, ...], copies: int, align: int = ALIGN_WORDS) -> Space:
    bases, stride = _layout(buffers, align)
    words = np.zeros(stride * copies, dtype=np.uint32)
    return Space(words, words.view(np.float32), words.view(np.int32), bases,
                 {b.name: b for b in buffers}, stride)


def _as_words(buf: Buffer, data) -> np.ndarray:
    """Initial contents of ``buf`` as uint32 words.

    Float arrays are converted by value to the buffer's type; 4-byte integer arrays
    (``int32``/``uint32``) given for an f32 buffer are taken as raw bit patterns; other integer
    arrays are converted by value.
    """
    a = np.asarray(data)
    if a.ndim != 1 or a.size != buf.size:
        raise InputError(f"input {buf.name!r} has shape {a.shape}; the buffer holds "
                         f"{buf.size} words, so expected shape ({buf.size},)")
    if a.dtype.kind == "f":
        typed = a.astype(np.float32 if buf.dtype is F32 else np.int32)
        if buf.dtype is not F32 and not np.all(np.isfinite(a)):
            raise InputError(f"input {buf.name!r}: i32 buffer given non-finite floats")
        return typed.view(np.uint32)
    if a.dtype.kind in "iub":
        if buf.dtype is F32 and a.dtype.itemsize == 4 and a.dtype.kind in "iu":
            return a.view(np.uint32)
        typed = a.astype(np.float32 if buf.dtype is F32 else np.int64)
        if buf.dtype is not F32:
            if typed.size and (typed.min() < -(2 ** 31) or typed.max() >= 2 ** 31):
                raise InputError(f"input {buf.name!r} has values outside the i32 range")
            typed = typed.astype(np.int32)
        return typed.view(np.uint32)
    raise InputError(f"input {buf.name!r} has dtype {a.dtype}; expected float32 or int32")


def global_space(kernel: Kernel, inputs: dict) -> Space:
    """Global memory initialised from ``inputs`` (name -> 1-D array of ``Buffer.size`` words).

    Buffers with role ``"in"`` or ``"inout"`` must be given; ``"out"`` and ``"scratch"`` buffers
    not given start as zeros.
    """
    inputs = dict(inputs or {})
    gbufs = kernel.global_buffers
    names = {b.name for b in gbufs}
    unknown = sorted(set(inputs) - names)
    if unknown:
        raise InputError(f"input {unknown[0]!r} is not a global buffer of kernel {kernel.name}; "
                         f"accepted: {', '.join(sorted(names))}")
    space = _make(gbufs, 1, GLOBAL_ALIGN_WORDS)
    for b in gbufs:
        if b.name in inputs:
            lo = space.bases[b.name]
            space.words[lo:lo + b.size] = _as_words(b, inputs[b.name])
        elif b.role in ("in", "inout"):
            raise InputError(f"kernel {kernel.name}: no input for global buffer {b.name!r} "
                             f"(role {b.role!r}); give an array of {b.size} words")
    return space


def shared_space(kernel: Kernel, n_ctas: int) -> Space:
    """Zero-initialised shared memory for ``n_ctas`` CTAs (hardware leaves it undefined)."""
    return _make(kernel.shared_buffers, n_ctas)
