"""What a loop's own control costs a warp: the compare, the vote and the branch that end an
iteration, with nothing else to wait for (:mod:`gpusim.engine.timing`, "Loop edges").

In the SASS, a compare that writes a predicate a branch reads carries a stall count of 13, a
``VOTE`` that a branch reads 13 as well, and a branch 5 or 6 (nvcc 13, sm_90; the control bits).
Inside a row body these stalls hide behind loads and shuffles; at a loop's edge nothing covers
them: a Lamport poll's exit test follows its load, and a time step's counter follows its last
store.

- :func:`spin_count` - one warp, one spin loop (``While``) of ``rounds`` iterations whose
  body is ``k = k + 1; p = k < n`` (``n`` from global memory, so nothing folds it) and,
  with ``vote``, ``p = any(p)``, the Lamport poll's form. Op = one iteration. The generated
  loop keeps its guards (the spin limit and the error poll every 1024 iterations), as every
  spin loop of the kernels does.
- :func:`seq_count` - one warp, a counted loop (``Loop(kind="seq")``, kept rolled as the time
  loop is) of ``rounds`` iterations of one dependent ``IMAD``. Op = one iteration.
- :func:`sleep_latency` - ``warps`` warps of each of ``ctas`` CTAs, a counted loop of
  ``rounds`` iterations of ``__nanosleep(ns)`` and one dependent ``IMAD`` (what the Lamport
  kernel's step wait costs a warp that has nothing else to do). Op = one iteration; its cost
  less ``seq_count``'s is the wait as the GPU keeps it. With ``work``, ``work`` more dependent
  IMADs follow the sleep (``ns`` None: the IMADs alone): what the wait costs a warp that
  has that much to do between two waits.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32, PRED
from ...verify import verify
from .core import WARP, Microbench, _positive
from .pipes import _C, _M, _reference

__all__ = ["spin_count", "seq_count", "sleep_latency"]


def _one_warp(name: str, rounds: int, buf: str, first: str, second: str):
    """A one-warp kernel's head: ``(builder, out buffer, lane, first, second)``, the two i32
    words of the input buffer ``buf`` loaded into registers named ``first`` and ``second``
    (from memory, so that no compiler folds the loop they drive)."""
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds)
    g_in = b.global_buffer(buf, I32, 2)
    g_out = b.global_buffer("out", I32, WARP, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    return (b, g_out, lane, b.ldg(g_in, zero, dst=b.reg(I32, first)),
            b.ldg(g_in, zero, offset=1, dst=b.reg(I32, second)))


def spin_count(rounds: int = 8, vote: bool = False) -> Microbench:
    """One warp, a spin loop of ``rounds`` iterations of a register-only test (module
    docstring)."""
    rounds = _positive("rounds", rounds)
    name = "spin_count" + ("_vote" if vote else "")
    b, g_out, lane, n, k = _one_warp(name, rounds, "n", "n", "k")
    with b.while_(spin_limit=rounds + 1, label="count") as w:
        b.iadd(k, 1, dst=k)
        p = b.isetp("lt", k, n, dst=b.reg(PRED, "p"))
        w.cond = b.vote_any(p, dst=b.reg(PRED, "q")) if vote else p
    b.stg(g_out, lane, k)
    kernel = verify(b.build())

    def check(g) -> bool:
        return bool(np.array_equal(np.asarray(g["out"]), np.full(WARP, rounds, np.int32)))

    inputs = {"n": np.array([rounds, 0], np.int32), "out": np.zeros(WARP, np.int32)}
    return Microbench(name, kernel, inputs, rounds, "one spin-loop iteration: add, compare"
                      + (", vote" if vote else "") + ", branch", {"rounds": rounds, "vote": vote},
                      check)


def seq_count(rounds: int = 8) -> Microbench:
    """One warp, a rolled counted loop of ``rounds`` iterations of one dependent ``IMAD``
    (module docstring)."""
    rounds = _positive("rounds", rounds)
    b, g_out, lane, m, c = _one_warp("seq_count", rounds, "k", "m", "c")
    v = b.imad(lane, 3, b.mov(1, I32, dst=b.reg(I32, "v0")), dst=b.reg(I32, "v"))
    with b.loop("r", 0, rounds, kind="seq"):
        b.imad(v, m, c, dst=v)
    b.stg(g_out, lane, v)
    kernel = verify(b.build())
    expect = _reference("imad", rounds, 1)   # pipes.chain_latency's IMAD chain, one a round

    def check(g) -> bool:
        return bool(np.array_equal(np.asarray(g["out"]).astype(np.int32), expect))

    inputs = {"k": np.array([_M, _C], np.int32), "out": np.zeros(WARP, np.int32)}
    return Microbench("seq_count", kernel, inputs, rounds,
                      "one iteration of a rolled loop: a dependent IMAD, the count, the branch",
                      {"rounds": rounds}, check)


def sleep_latency(rounds: int = 8, ns: int | None = 200, warps: int = 1, ctas: int = 1,
                  work: int = 0) -> Microbench:
    """``rounds`` iterations of ``__nanosleep(ns)`` and ``1 + work`` dependent IMADs on
    ``warps`` warps of ``ctas`` CTAs (module docstring); ``ns`` None: the IMADs alone."""
    rounds, warps, ctas = (_positive(n, v) for n, v in
                           (("rounds", rounds), ("warps", warps), ("ctas", ctas)))
    if warps > 32:
        raise InputError(f"warps={warps!r}: accepted 1 to 32 (one CTA)")
    if isinstance(work, bool) or not isinstance(work, int) or work < 0:
        raise InputError(f"work={work!r}: accepted whole numbers >= 0 (extra dependent IMADs)")
    ns = None if ns is None else int(ns)
    name = ("work" if ns is None else f"sleep{ns}") + "_latency" + \
        (f"_k{work}" if work else "") + (f"_w{warps}" if warps > 1 else "") + \
        (f"_c{ctas}" if ctas > 1 else "")
    n = WARP * warps
    b = Builder(f"mb_{name}", grid=ctas, block=n, bench=name, rounds=rounds)
    g_k = b.global_buffer("k", I32, 2)
    g_out = b.global_buffer("out", I32, ctas * n, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    m = b.ldg(g_k, zero, dst=b.reg(I32, "m"))
    c = b.ldg(g_k, zero, offset=1, dst=b.reg(I32, "c"))
    v = b.mov(tid, I32, dst=b.reg(I32, "v"))
    with b.loop("r", 0, rounds, kind="seq"):
        if ns is not None:
            b.nanosleep(ns)
        for _ in range(1 + work):
            b.imad(v, m, c, dst=v)
    where = b.imad(cta, n, tid, dst=b.reg(I32, "where"))
    b.stg(g_out, where, v)
    kernel = verify(b.build())
    expect = np.arange(n, dtype=np.int64)
    for _ in range(rounds * (1 + work)):
        expect = (expect * _M + _C) & 0xFFFFFFFF
    expect = np.tile(expect.astype(np.uint32).view(np.int32), ctas)
    return Microbench(name, kernel, {"k": np.array([_M, _C], np.int32),
                                     "out": np.zeros(ctas * n, np.int32)},
                      rounds, ("" if ns is None else f"__nanosleep({ns}) and ")
                      + (f"{1 + work} dependent IMADs" if work else "one IMAD"),
                      {"rounds": rounds, "ns": ns, "warps": warps, "ctas": ctas,
                       **({"work": work} if work else {})},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), expect)))
