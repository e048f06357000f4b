"""What every microbenchmark shares: the :class:`Microbench` record, the warp and line sizes,
the argument check and the small builder helpers of the families.

Each builder returns a :class:`Microbench`: a kernel, its initial global buffers, and ``ops``,
the number of timed operations one launch performs. A benchmark is run at two sizes (``rounds``)
and the cost of one operation is the slope ``(t2 - t1) / (ops2 - ops1)``, which removes the launch
and set-up cost on the GPU and the fill/drain in the simulator alike.

Every kernel stores a result that depends on every timed operation (so no compiler removes them),
and :meth:`Microbench.check` validates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...builder import Builder
from ...codegen_cuda import POLL_MODES
from ...errors import InputError
from ...ir import I32, Kernel

__all__ = ["Microbench", "WARP", "LINE_WORDS", "SPIN"]

WARP = 32
LINE_WORDS = 32  # 128-byte L2 line
SPIN = 1 << 22   # spin limit of the lmech_* poll loops


@dataclass(frozen=True, eq=False)
class Microbench:
    """One microbenchmark launch: kernel, initial buffers, and how many timed ops it performs."""

    name: str
    kernel: Kernel
    inputs: dict
    ops: int
    unit: str                      # what one op is
    params: dict = field(default_factory=dict)
    check: Callable[[dict], bool] | None = None

    def verify_result(self, globals_: dict) -> bool:
        return True if self.check is None else bool(self.check(globals_))


def _positive(name: str, v: int) -> int:
    if int(v) < 1:
        raise InputError(f"{name}={v} must be >= 1")
    return int(v)


def _chase(nxt: np.ndarray, steps: int, p: int = 0) -> int:
    """Where a pointer chase over ``nxt`` starting at word ``p`` ends after ``steps`` loads."""
    for _ in range(steps):
        p = int(nxt[p])
    return p


def _thread_ids(b: Builder, threads: int):
    """``tid``, ``cta``, the global thread id ``gt``, ``tid * 4`` (a 16-byte chunk's word) and a
    zeroed accumulator, in the order the full-grid benchmarks declare them."""
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    return tid, cta, gt, tid4, acc


def _poll_meta(poll: str) -> dict:
    """Builder meta for a poll mode: nothing for the default, else ``poll=...``."""
    if poll not in POLL_MODES:
        raise InputError(f"poll={poll!r} is unknown; accepted: {', '.join(POLL_MODES)}")
    return {} if poll == "relaxed_gpu" else {"poll": poll}


def _suffix(poll: str) -> str:
    return "" if poll == "relaxed_gpu" else "_sys"
