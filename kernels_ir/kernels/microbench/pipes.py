"""The latencies of the SM's pipes (:mod:`gpusim.engine.timing`): one warp follows a dependent
chain of one kind of instruction, so that each link costs exactly its latency.

- :func:`chain_latency` - ``op`` = ``"ffma"`` (``f = f * a + b``), ``"imad"`` (``i = i * m +
  c``), ``"shfl"`` (``v = shfl.xor(v, 1 << (k % 5))``), ``"tanh"`` / ``"exp"`` / ``"sigmoid"``
  (``f = op(f * a + b)``: one FFMA and the function; the CUDA backend emits ``tanhf``,
  ``expf`` and ``1 / (1 + expf(-x))``, software sequences whose latency the simulator's one
  ``sfu`` operation stands for), one warp, ``chain`` links unrolled per round. The multipliers
  come from a global buffer, so no compiler folds the chain. Op = one link.
- :func:`bar_latency` - a CTA of ``warps`` warps runs ``chain`` CTA barriers per round, each
  followed by one dependent integer op per warp (the barrier's release to the next arrival).
  Op = one barrier.
- :func:`stage_bar` - the persistent kernels' staging in miniature: a CTA of ``warps`` warps,
  per link every thread stores ``chunks`` conflict-free 128-bit words into shared memory (the
  staging's ``STS.128``, a warp 4 wavefronts each), then a CTA barrier, then (``load``) a
  32-bit shared load of its own first word, on whose value the next link's stores depend (or,
  without ``load``, one dependent integer op). Op = one link. Whether a barrier waits for the
  CTA's shared stores to drain, and whether a load after it queues behind them, shows as the
  link's growth with ``chunks``.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import F32, I32, PRED
from ...verify import verify
from .core import WARP, Microbench, _positive

__all__ = ["CHAIN_OPS", "SHFL_MIXES", "chain_latency", "bar_latency", "stage_bar",
           "shfl_throughput"]

CHAIN_OPS = ("ffma", "imad", "shfl", "tanh", "exp", "sigmoid")
# the chains' constants: contracting maps that keep the values in the range the kernels see
_A, _B = 0.75, 0.2           # f = f * a + b (ffma: fixed point 0.8)
_FN_A = {"tanh": (1.5, 0.2), "exp": (-1.0, 0.0), "sigmoid": (1.5, -0.2)}
_M, _C = 5, 7                # i = i * m + c (wraps modulo 2^32)


def _reference(op: str, links: int, chain: int) -> np.ndarray:
    """The 32 lanes' values after ``links`` links (link ``k`` is link ``k % chain`` of its
    round) (float64 for the float chains; the check
    allows for float32 rounding and the CUDA functions' few-ulp errors)."""
    lane = np.arange(WARP)
    if op == "imad":
        v = (lane * 3 + 1).astype(np.int64)
        for _ in range(links):
            v = (v * _M + _C) & 0xFFFFFFFF
        return v.astype(np.uint32).view(np.int32)
    if op == "shfl":
        v = lane * 7 + 3
        for k in range(links):
            v = v[lane ^ (1 << (k % chain % 5))]
        return v.astype(np.int32)
    f = lane / 64.0
    a, b = (_A, _B) if op == "ffma" else _FN_A[op]
    fn = {"ffma": lambda x: x, "tanh": np.tanh, "exp": np.exp,
          "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}[op]
    for _ in range(links):
        f = fn(f * a + b)
    return f


def chain_latency(rounds: int = 8, op: str = "ffma", chain: int = 32, warps: int = 1,
                  store: bool = False) -> Microbench:
    """One warp, ``rounds`` rounds of ``chain`` dependent links of ``op`` (module docstring).

    ``warps``: that many warps of one CTA run the same chain side by side (``{op}_latency_w{n}``,
    warp ``w`` on scheduler ``w % 4``), all from the same lane values, so a link's cost is its
    latency with that many warps beside it. ``store`` (the float chains, suffix ``_st``): every
    link ends with a global store of its value (link ``k`` of a round to slot ``k`` of a log
    buffer), as a kernel's epilogue stores its tanh; the next link still depends only on the
    value."""
    rounds, chain, warps = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("chain", chain), ("warps", warps)))
    if op not in CHAIN_OPS:
        raise InputError(f"op={op!r}: accepted {', '.join(CHAIN_OPS)}")
    if warps > 32:
        raise InputError(f"warps={warps!r}: accepted 1 to 32 (one CTA)")
    if store and op in ("imad", "shfl"):
        raise InputError(f"store=True with op={op!r}: accepted with the float chains only")
    name = f"{op}_latency" + (f"_w{warps}" if warps > 1 else "") + ("_st" if store else "")
    n = WARP * warps
    b = Builder(f"mb_{name}", grid=1, block=n, bench=name, rounds=rounds)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    where = b.sreg("tid", dst=b.reg(I32, "tid")) if warps > 1 else lane
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    if op in ("imad", "shfl"):
        g_k = b.global_buffer("k", I32, 2)
        g_out = b.global_buffer("out", I32, n, role="out")
        m = b.ldg(g_k, zero, dst=b.reg(I32, "m"))
        c = b.ldg(g_k, zero, offset=1, dst=b.reg(I32, "c"))
        v = b.imad(lane, 3 if op == "imad" else 7, b.mov(1 if op == "imad" else 3, I32,
                                                         dst=b.reg(I32, "v0")),
                   dst=b.reg(I32, "v"))
        with b.loop("r", 0, rounds):
            for k in range(chain):
                if op == "imad":
                    b.imad(v, m, c, dst=v)
                else:
                    b.shfl_xor(v, 1 << (k % 5), dst=v)
        k_in = np.array([_M, _C], np.int32)
    else:
        g_k = b.global_buffer("k", F32, 2)
        g_out = b.global_buffer("out", F32, n, role="out")
        a_ = b.ldg(g_k, zero, dst=b.reg(F32, "a"))
        b_ = b.ldg(g_k, zero, offset=1, dst=b.reg(F32, "b"))
        v = b.i2f(lane, dst=b.reg(F32, "v"))
        b.fmul(v, 1.0 / 64.0, dst=v)
        fn = {"tanh": b.tanh, "exp": b.exp, "sigmoid": b.sigmoid}.get(op)
        g_log = b.global_buffer("log", F32, chain * n, role="out") if store else None
        with b.loop("r", 0, rounds):
            for k in range(chain):
                b.ffma(v, a_, b_, dst=v)
                if fn is not None:
                    fn(v, dst=v)
                if store:
                    b.stg(g_log, where, v, offset=k * n)
        k_in = np.array((_A, _B) if op == "ffma" else _FN_A[op], np.float32)
    b.stg(g_out, where, v)
    kernel = verify(b.build())
    expect = np.tile(_reference(op, rounds * chain, chain), warps)

    def check(g) -> bool:
        got = np.asarray(g["out"])
        if op in ("imad", "shfl"):
            return bool(np.array_equal(got.astype(np.int32), expect))
        return bool(np.allclose(got, expect, rtol=1e-4, atol=1e-5))

    inputs = {"k": k_in, "out": np.zeros(n, _out_dtype(op))}
    if store:
        inputs["log"] = np.zeros(chain * n, np.float32)
    params = {"rounds": rounds, "op": op, "chain": chain} | (
        {"warps": warps} if warps > 1 else {}) | ({"store": True} if store else {})
    return Microbench(name, kernel, inputs, rounds * chain, f"one dependent {op} link" + (
        f", {warps} warps side by side" if warps > 1 else "") + (
        ", each link's value stored" if store else ""), params, check)


def _out_dtype(op: str):
    return np.int32 if op in ("imad", "shfl") else np.float32


def bar_latency(rounds: int = 8, warps: int = 8, chain: int = 32) -> Microbench:
    """One CTA of ``warps`` warps: ``rounds`` rounds of ``chain`` CTA barriers, each followed
    by one dependent integer op per warp (module docstring)."""
    rounds, warps, chain = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("warps", warps), ("chain", chain)))
    threads = warps * WARP
    b = Builder("mb_bar_latency", grid=1, block=threads, bench="bar_latency", rounds=rounds)
    g_out = b.global_buffer("out", I32, threads, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    v = b.mov(tid, I32, dst=b.reg(I32, "v"))
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            b.bar()
            b.iadd(v, 1, dst=v)
    b.stg(g_out, tid, v)
    kernel = verify(b.build())
    expect = np.arange(threads) + rounds * chain
    return Microbench("bar_latency", kernel, {"out": np.zeros(threads, np.int32)},
                      rounds * chain, "one CTA barrier",
                      {"rounds": rounds, "warps": warps, "chain": chain},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), expect)))


def stage_bar(rounds: int = 8, warps: int = 8, chunks: int = 4, load: bool = True,
              chain: int = 8) -> Microbench:
    """One CTA of ``warps`` warps: ``rounds`` rounds of ``chain`` links of ``chunks`` 128-bit
    shared stores per thread, a CTA barrier and (``load``) a dependent shared load (module
    docstring). ``chunks`` 0 (no stores) needs ``load`` False."""
    rounds, warps, chain = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("warps", warps), ("chain", chain)))
    chunks = int(chunks)
    if chunks < 0 or (chunks == 0 and load):
        raise InputError(f"chunks={chunks}: accepted 0 (without load) or more")
    threads = warps * WARP
    name = f"stage_bar_c{chunks}" + ("_ld" if load else "")
    b = Builder(f"mb_{name}", grid=1, block=threads, bench=name, rounds=rounds)
    g_out = b.global_buffer("out", I32, threads, role="out")
    s = b.shared("stage", I32, max(1, chunks) * threads * 4)
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    addr = b.imul(tid, 4, dst=b.reg(I32, "addr"))
    v = b.mov(tid, I32, dst=b.reg(I32, "v"))
    x = b.reg(I32, "x")
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            for c in range(chunks):           # thread t's words 4t..4t+3 of chunk c
                b.sts(s, addr, (v, v, v, v), offset=c * threads * 4)
            b.bar()
            if load:
                b.lds(s, addr, dst=x)
                b.iadd(x, 1, dst=v)
            else:
                b.iadd(v, 1, dst=v)
    b.stg(g_out, tid, v)
    kernel = verify(b.build())
    expect = np.arange(threads) + rounds * chain
    return Microbench(name, kernel, {"out": np.zeros(threads, np.int32)},
                      rounds * chain, "one staging link (stores, barrier, load)",
                      {"rounds": rounds, "warps": warps, "chunks": chunks, "load": bool(load),
                       "chain": chain},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), expect)))


SHFL_MIXES = ("none", "red", "lds", "ffma", "lds_only")
# global loads that hit L1 beside the shuffles or the shared loads: does the L1TEX data stage of
# global loads share the shuffles' unit? (measurements/data_pipe_share.py)
LDG_MIXES = ("ldg", "ldg_only", "lds_ldg")
GLOBAL_SLIDE = 1024                    # words the global loads' window slides over (4 KiB)


def shfl_throughput(rounds: int = 8, warps: int = 8, ctas: int = 132, mix: str = "none",
                    chains: int = 8, chain: int = 10, lines: int = 4) -> Microbench:
    """How many warp shuffles an SM issues a cycle, and what shares their pipe.

    ``ctas`` CTAs of ``warps`` warps (one CTA per SM). Each warp keeps ``chains`` independent
    integer chains and runs ``rounds`` rounds of ``chain`` links; a link is, for every chain:

    - ``none``: ``v = shfl.xor(v, 1 << (k % 5))``;
    - ``red``: the kernels' reduction step, ``v = v + shfl.xor(v, 1 << (k % 5))``, the chains'
      shuffles first and then their adds (the order in which the kernels emit them);
    - ``lds``: the shuffle and a conflict-free 32-bit shared load (one wavefront) added into an
      accumulator of its own (the address moves with the round, so no load is hoisted);
    - ``ffma``: the shuffle and an FFMA on a float chain of its own;
    - ``lds_only``: the shared load alone (the control of ``lds``);
    - ``ldg``: the shuffle and a 32-bit global load that hits L1, added into an accumulator of
      its own; the warp's lanes lie on ``lines`` 128-byte lines, ``32 / lines`` consecutive
      words of each, so lanes of different lines share banks: ``lines`` data-stage wavefronts
      (:func:`kernels_ir.banks.wavefronts`) and ``lines`` tag-stage lines a load;
    - ``ldg_only``: that global load alone (the control of ``ldg``);
    - ``lds_ldg``: the conflict-free shared load and that global load, no shuffle.

    The global loads of a round read distinct lines (so the compiler merges none), a window of
    ``chains * chain * lines`` lines that slides with the round by ``lines`` lines, wrapping
    after ``GLOBAL_SLIDE`` words (the table, read only, is 14-84 KiB: L1 keeps it beside the
    32 KiB shared table). With 8 chains a warp has 8 independent shuffles in flight, so the
    links are issue- or pipe-bound, not latency-bound, from a few warps per SM up. Op = one
    round.
    """
    rounds, warps, ctas, chains, chain = (
        _positive(n, v) for n, v in (("rounds", rounds), ("warps", warps), ("ctas", ctas),
                                     ("chains", chains), ("chain", chain)))
    if mix not in SHFL_MIXES + LDG_MIXES:
        raise InputError(f"mix={mix!r}: accepted {', '.join(SHFL_MIXES + LDG_MIXES)}")
    if lines not in (1, 2, 4, 8, 16, 32):
        raise InputError(f"lines={lines!r}: accepted 1, 2, 4, 8, 16 or 32")
    threads = warps * WARP
    name = f"shfl_tput_w{warps}" + ("" if mix == "none" else
                                    f"_{mix.replace('ldg', f'ldg{lines}')}")
    glob = mix in LDG_MIXES
    gwords = GLOBAL_SLIDE + chains * chain * lines * WARP
    words = 8192                       # the shared table (32 KiB): word i holds i
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_out = b.global_buffer("out", I32, ctas * threads * 2, role="out")
    g_k = b.global_buffer("k", F32, 2)
    g_t = b.global_buffer("tbl", I32, gwords) if glob else None
    s = b.shared("table", I32, words)
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    with b.loop("i", 0, -(-words // threads)) as i:
        w = b.imad(i, threads, tid, dst=b.reg(I32, "w"))
        inside = b.isetp("lt", w, words, dst=b.reg(PRED, "inside"))
        with b.if_(inside):
            b.sts(s, w, w)
    b.bar()
    v = b.reg(I32, "v", chains)
    for j in range(chains):
        b.imad(lane, 7, b.mov(3 + j, I32, dst=b.reg(I32, f"c{j}")), dst=v[j])
    acc = b.reg(I32, "acc", chains)
    for j in range(chains):
        b.mov(0, I32, dst=acc[j])
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    a_ = b.ldg(g_k, zero, dst=b.reg(F32, "a"))
    c_ = b.ldg(g_k, zero, offset=1, dst=b.reg(F32, "cf"))
    f = b.reg(F32, "f", chains)
    for j in range(chains):
        b.i2f(lane, dst=f[j])
    x = b.reg(I32, "x", chains)       # one per chain, as ptxas allocates them
    sh = b.reg(I32, "sh", chains)
    per = WARP // lines
    if glob:                          # lane -> line lane // per, word lane % per of that line
        y = b.reg(I32, "y", chains)
        gacc = b.reg(I32, "gacc", chains)
        for j in range(chains):
            b.mov(0, I32, dst=gacc[j])
        lpart = b.iadd(b.shl(b.shr(lane, per.bit_length() - 1, dst=b.reg(I32, "ll")), 5,
                             dst=b.reg(I32, "lw")),
                       b.and_(lane, per - 1, dst=b.reg(I32, "lo")), dst=b.reg(I32, "lpart"))
    with b.loop("r", 0, rounds) as r:
        base = b.and_(b.imad(r, WARP, lane, dst=b.reg(I32, "rb")), words // 2 - 1,
                      dst=b.reg(I32, "base"))
        if glob:
            gbase = b.iadd(b.and_(b.imul(r, lines * WARP, dst=b.reg(I32, "gr")),
                                  GLOBAL_SLIDE - 1, dst=b.reg(I32, "gw")), lpart,
                           dst=b.reg(I32, "gbase"))
        for k in range(chain):        # per link: each kind for every chain, as ptxas orders it
            if mix == "red":
                for j in range(chains):
                    b.shfl_xor(v[j], 1 << (k % 5), dst=sh[j])
                for j in range(chains):
                    b.iadd(v[j], sh[j], dst=v[j])
            elif mix not in ("lds_only", "ldg_only", "lds_ldg"):
                for j in range(chains):
                    b.shfl_xor(v[j], 1 << (k % 5), dst=v[j])
            if glob:
                for j in range(chains):
                    b.ldg(g_t, gbase, offset=_global_offset(k, j, chains, lines), dst=y[j])
            if mix in ("lds", "lds_only", "lds_ldg"):
                for j in range(chains):
                    b.lds(s, base, offset=(k * chains + j) % (words // 2 // WARP) * WARP,
                          dst=x[j])
                for j in range(chains):
                    b.iadd(acc[j], x[j], dst=acc[j])
            if glob:
                for j in range(chains):
                    b.iadd(gacc[j], y[j], dst=gacc[j])
            if mix == "ffma":
                for j in range(chains):
                    b.ffma(f[j], a_, c_, dst=f[j])
    out = b.imad(b.imad(cta, threads, tid, dst=b.reg(I32, "g")), 2, zero, dst=b.reg(I32, "o"))
    total = b.mov(0, I32, dst=b.reg(I32, "total"))
    for j in range(chains):
        b.iadd(total, acc[j], dst=total)
    for j in range(chains if glob else 0):
        b.iadd(total, gacc[j], dst=total)
    for j in range(chains):
        b.xor(total, v[j], dst=total)
    b.stg(g_out, out, total)
    fsum = b.mov(0.0, F32, dst=b.reg(F32, "fsum"))
    for j in range(chains):
        b.fadd(fsum, f[j], dst=fsum)
    b.stg(g_out, out, b.f2i(fsum, dst=b.reg(I32, "fi")), offset=1)
    kernel = verify(b.build())
    expect = _shfl_reference(mix, rounds, warps, ctas, chains, chain, words, lines)

    def check(g) -> bool:
        got = np.asarray(g["out"]).astype(np.int32).reshape(-1, 2)[:, 0]
        return bool(np.array_equal(got, expect))

    inputs = {"out": np.zeros(ctas * threads * 2, np.int32),
              "k": np.array([0.5, 0.25], np.float32)}
    params = {"rounds": rounds, "warps": warps, "ctas": ctas, "mix": mix, "chains": chains,
              "chain": chain}
    if glob:
        inputs["tbl"] = np.arange(gwords, dtype=np.int32)
        params["lines"] = lines
    return Microbench(name, kernel, inputs, rounds,
                      f"one round of {chain} links x {chains} chains", params, check)


def _global_offset(k: int, j: int, chains: int, lines: int) -> int:
    """Word offset of link ``k``, chain ``j``'s global load in the window (whole lines)."""
    return (k * chains + j) * lines * WARP


def _shfl_reference(mix, rounds, warps, ctas, chains, chain, words, lines=4) -> np.ndarray:
    """Word 0 of every thread's output: the accumulated loads xor the chains' values."""
    lane = np.arange(WARP, dtype=np.int64)
    v = [(lane * 7 + 3 + j) for j in range(chains)]
    acc = np.zeros(WARP, np.int64)
    per = WARP // lines
    lpart = lane // per * WARP + lane % per
    shuffles = mix not in ("lds_only", "ldg_only", "lds_ldg")
    for r in range(rounds):
        base = (r * WARP + lane) & (words // 2 - 1)
        gbase = ((r * lines * WARP) & (GLOBAL_SLIDE - 1)) + lpart
        for k in range(chain):
            for j in range(chains):
                if shuffles:
                    moved = v[j][lane ^ (1 << (k % 5))]
                    v[j] = (v[j] + moved) & 0xFFFFFFFF if mix == "red" else moved
                if mix in ("lds", "lds_only", "lds_ldg"):
                    acc = (acc + base + (k * chains + j) % (words // 2 // WARP) * WARP) \
                        & 0xFFFFFFFF
                if mix in LDG_MIXES:     # the table's word i holds i
                    acc = (acc + gbase + _global_offset(k, j, chains, lines)) & 0xFFFFFFFF
    total = acc.copy()
    for j in range(chains):
        total ^= v[j]
    per_warp = total.astype(np.uint32).view(np.int32)
    return np.tile(per_warp, warps * ctas)
