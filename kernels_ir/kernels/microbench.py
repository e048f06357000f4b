"""Microbenchmarks written in the IR, so that the GPU and the simulator run the same code.

Each builder returns a :class:`Microbench`: a kernel, its initial global buffers, and ``ops``,
the number of timed operations one launch performs. A benchmark is run at two sizes (``rounds``)
and the cost of one operation is the slope ``(t2 - t1) / (ops2 - ops1)``, which removes the launch
and set-up cost on the GPU and the fill/drain in the simulator alike.

- :func:`smem_latency` - one warp follows a dependent chain through shared memory
  (``idx = s[idx]``, every lane the same address: one wavefront, no conflict). Op = one load.
- :func:`l2_latency` - one warp follows a pointer chase through a global buffer with L2-coherent
  (volatile) loads, one 128-byte line per hop, a random cycle over ``lines`` lines (512 KiB by
  default: far larger than L1, far smaller than L2). Op = one load.
- :func:`l2_latency_wide` - the same chase with ``lanes`` independent chains in one warp: each
  load touches ``lanes`` random lines and waits for the slowest (the far L2 partition's
  latency once ``lanes`` is a few). Op = one warp load.
- :func:`l2_latency_block` - the chase one aligned block of ``block_lines`` lines at a time
  (a 512-byte block is a Lamport poll group): whether a block sees the far latency says how
  finely the partitions interleave. Op = one warp load.
- :func:`flag_round_trip` - two CTAs (one warp each, on two SMs) ping-pong a counter through two
  global flags in different lines: CTA 0 writes ``ping = r``, waits for ``pong == r``; CTA 1 waits
  for ``ping == r`` and writes ``pong = r``. Op = one round trip (two one-way hand-offs).
- :func:`atomic_throughput` - every warp of ``ctas`` CTAs (lane 0 only: one atomic per warp
  instruction, no warp aggregation) adds 1 ``per_warp`` times to the same word (``same=True``) or
  to its own word, one 128-byte line per warp (``same=False``). The returned old values are summed
  and stored, so they are real atomics with return, not reductions. Op = one atomic.
- :func:`grid_barrier` - ``ctas`` CTAs do ``rounds`` grid barriers: ``__syncthreads``; thread 0
  fences, arrives with an atomic add on a counter and spins (volatile loads) until the counter
  reaches ``(r + 1) * nctas``; ``__syncthreads``. The same mechanism as the persistent kernel's
  ``sync="barrier"``. Op = one barrier.

Added to find what the flag round trip and Lamport polling cost (mechanism hunt, see
``measurements/README.md``):

- :func:`store_visibility` - one warp stores ``r`` to a flag and polls it (volatile loads) until it
  reads ``r``, ``rounds`` times: store issue -> the same SM's strong load sees it. Op = one
  store-then-see. Against :func:`l2_latency` it shows whether a store reaches the point of
  coherence later than a load request does.
- :func:`flag_round_trip` with ``same_sm=True`` - the ping-pong between two warps of ONE CTA (one
  SM): against the two-SM case it separates the SM-to-SM distance from the L2 path.
- :func:`flag_round_trip` with ``delay=k`` - each poll iteration also walks ``k`` dependent shared
  loads: a longer poll period; the round trip's growth with the period shows how the hand-off
  lands in the poll phase (the simulator replays polls at their real times).
- :func:`poll_storm` - ``ctas x threads`` threads each load their ``group`` 16-byte chunks of one
  ``slot``-word vector with volatile loads, back to back, ``rounds`` dependent rounds (every CTA
  the same vector: the Lamport h staging while h is not ready, h1024-b4 by default). Op = one
  round of the whole grid: the cost of one Lamport poll round at full scale.

Poll scope (added with the switch of ``LDG_VOLATILE`` from ``ld.volatile`` = ``LDG.E.STRONG.SYS``
to ``ld.relaxed.gpu``, :data:`kernels_ir.codegen_cuda.POLL_MODES`): ``poll="volatile_sys"`` builds a
kernel whose ``meta poll`` makes the code generator emit the old system-scope form; the variants
``l2_latency_sys``, ``flag_round_trip_sys``, ``store_visibility_sys`` and ``poll_storm_sys`` are
the same benchmarks with that form, so one campaign measures both scopes side by side.
:func:`poll_storm` with ``load="plain"`` (``poll_storm_plain``) uses plain loads (``LDG``) and
``regions=32`` different 16 KiB vectors in turn (512 KiB per lap, beyond L1, inside L2), so that
every load misses L1 and hits L2; ``poll_storm_rot`` is the same address stream with relaxed polls:
the pair isolates the cost of a strong load against a plain L2 hit at full scale.

The ``lmech_*`` family (:mod:`kernels_ir.kernels.microbench_lamport`, registered here when this
module is imported) takes the Lamport exchange apart one factor at a time.

Every kernel stores a result that depends on every timed operation (so no compiler removes them),
and :meth:`Microbench.check` validates it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..builder import Builder
from ..codegen_cuda import POLL_MODES
from ..errors import InputError
from ..ir import I32, PRED, Kernel
from ..verify import verify

__all__ = ["Microbench", "smem_latency", "l2_latency", "l2_latency_wide", "l2_latency_block",
           "flag_round_trip", "atomic_throughput",
           "grid_barrier", "store_visibility", "poll_storm", "lamport_exchange", "broadcast",
           "gather",
           "MICROBENCHES",
           "build"]

WARP = 32
LINE_WORDS = 32  # 128-byte L2 line


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


def smem_latency(rounds: int = 64, chain: int = 32, words: int = 1024, seed: int = 0
                 ) -> Microbench:
    """Dependent shared-memory loads: ``rounds`` iterations of ``chain`` unrolled hops."""
    rounds, chain, words = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("chain", chain), ("words", words)))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(words).astype(np.int32)
    nxt = np.empty(words, np.int32)
    nxt[perm] = np.roll(perm, -1)           # one random cycle through all words
    b = Builder("mb_smem_latency", grid=1, block=WARP, bench="smem_latency", rounds=rounds)
    g_next = b.global_buffer("next", I32, words)
    g_out = b.global_buffer("out", I32, WARP, role="out")
    s = b.shared("chain", I32, words)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    v = b.reg(I32, "v")
    with b.loop("i", 0, words, WARP) as i:   # copy the chain into shared memory
        idx = b.iadd(i, lane, dst=b.reg(I32, "ci"))
        b.ldg(g_next, idx, dst=v)
        b.sts(s, idx, v)
    b.bar()
    p = b.mov(0, I32, dst=b.reg(I32, "p"))
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            b.lds(s, p, dst=p)
    b.stg(g_out, lane, p)
    kernel = verify(b.build())
    expect = _chase(nxt, rounds * chain)
    return Microbench("smem_latency", kernel, {"next": nxt, "out": np.zeros(WARP, np.int32)},
                      rounds * chain, "dependent shared load",
                      {"rounds": rounds, "chain": chain, "words": words},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


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


def l2_latency(rounds: int = 64, chain: int = 16, lines: int = 4096, seed: int = 0,
               poll: str = "relaxed_gpu") -> Microbench:
    """Dependent L2-coherent loads: a pointer chase over ``lines`` 128-byte lines."""
    rounds, chain, lines = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("chain", chain), ("lines", lines)))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(lines)
    nxt = np.zeros(lines * LINE_WORDS, np.int32)
    nxt[perm * LINE_WORDS] = np.roll(perm, -1) * LINE_WORDS
    name = "l2_latency" + _suffix(poll)
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds, **_poll_meta(poll))
    g_next = b.global_buffer("next", I32, lines * LINE_WORDS)
    g_out = b.global_buffer("out", I32, WARP, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    p = b.mov(0, I32, dst=b.reg(I32, "p"))
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            b.ldg_volatile(g_next, p, dst=p)
    b.stg(g_out, lane, p)
    kernel = verify(b.build())
    expect = _chase(nxt, rounds * chain)
    return Microbench(name, kernel, {"next": nxt, "out": np.zeros(WARP, np.int32)},
                      rounds * chain, "dependent L2 load",
                      {"rounds": rounds, "chain": chain, "lines": lines},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def l2_latency_wide(rounds: int = 64, chain: int = 16, lanes: int = 8, lines: int = 4096,
                    seed: int = 0) -> Microbench:
    """Dependent L2-coherent loads, ``lanes`` chains at once: lane ``j`` follows chain
    ``j % lanes``, each a random cycle over its own ``lines // lanes`` 128-byte lines, so one
    warp load touches ``lanes`` random lines and completes when the slowest returns. With a
    split L2 the slowest is in the far partition unless every line is near: the cost per hop
    rises from the mean latency (``lanes=1``, like :func:`l2_latency`) towards the far latency."""
    rounds, chain, lanes, lines = (_positive(n, v) for n, v in
                                   (("rounds", rounds), ("chain", chain), ("lanes", lanes),
                                    ("lines", lines)))
    if lanes > WARP or WARP % lanes:
        raise InputError(f"lanes={lanes} must divide the warp; accepted: 1, 2, 4, 8, 16, 32")
    if lines < 2 * lanes:
        raise InputError(f"lines={lines} gives the {lanes} chains fewer than 2 lines each; "
                         f"accepted: at least {2 * lanes}")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(lines)
    per = lines // lanes
    nxt = np.zeros(lines * LINE_WORDS, np.int32)
    start = np.zeros(WARP, np.int32)
    for c in range(lanes):
        cyc = perm[c * per:(c + 1) * per]
        nxt[cyc * LINE_WORDS] = np.roll(cyc, -1) * LINE_WORDS
        start[c::lanes] = cyc[0] * LINE_WORDS
    name = f"l2_latency_wide_{lanes}"
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds)
    g_next = b.global_buffer("next", I32, lines * LINE_WORDS)
    g_start = b.global_buffer("start", I32, WARP)
    g_out = b.global_buffer("out", I32, WARP, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    p = b.ldg(g_start, lane, dst=b.reg(I32, "p"))
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            b.ldg_volatile(g_next, p, dst=p)
    b.stg(g_out, lane, p)
    kernel = verify(b.build())
    expect = np.array([_chase(nxt, rounds * chain, int(start[j])) for j in range(WARP)])
    return Microbench(name, kernel, {"next": nxt, "start": start,
                                     "out": np.zeros(WARP, np.int32)},
                      rounds * chain, f"dependent L2 load of {lanes} random lines",
                      {"rounds": rounds, "chain": chain, "lanes": lanes, "lines": lines},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def l2_latency_block(rounds: int = 64, chain: int = 16, block_lines: int = 4,
                     blocks: int = 1024, seed: int = 0) -> Microbench:
    """Dependent L2-coherent loads of whole blocks: every hop the warp loads one random aligned
    block of ``block_lines`` x 128 bytes (lanes spread evenly over it, 16-byte loads where the
    block has room; blocks beyond 4 lines take one 512-byte load per 4 lines, issued together)
    and all lanes follow the same next block. Whether a block this size sees the far latency
    says how finely the L2 partitions interleave (a Lamport poll group is a 512-byte block)."""
    rounds, chain, block_lines, blocks = (_positive(n, v) for n, v in
                                          (("rounds", rounds), ("chain", chain),
                                           ("block_lines", block_lines), ("blocks", blocks)))
    if block_lines not in (1, 2, 4, 8, 16, 32):
        raise InputError(f"block_lines={block_lines}: accepted 1, 2, 4, 8, 16, 32")
    bw = block_lines * LINE_WORDS                 # words per block
    parts = max(1, block_lines // 4)              # 512-byte loads per hop
    step = bw // parts // WARP                    # words per lane and load: 1, 2 or 4
    rng = np.random.default_rng(seed)
    perm = rng.permutation(blocks)
    nxt = np.zeros(blocks * bw, np.int32)
    for a, z in zip(perm, np.roll(perm, -1), strict=True):
        nxt[a * bw:(a + 1) * bw:step] = z * bw
    name = f"l2_latency_block_{block_lines}"
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds)
    g_next = b.global_buffer("next", I32, blocks * bw)
    g_out = b.global_buffer("out", I32, WARP, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    off = b.imul(lane, step, dst=b.reg(I32, "off"))
    p = b.mov(int(perm[0]) * bw, I32, dst=b.reg(I32, "p"))
    v = [b.reg(I32, f"v{j}", size=step) for j in range(parts)]
    idx = b.reg(I32, "idx")
    acc = b.reg(I32, "acc") if parts > 1 else None
    with b.loop("r", 0, rounds):
        for _ in range(chain):
            b.iadd(p, off, dst=idx)
            for j in range(parts):
                b.ldg_volatile(g_next, idx, offset=j * WARP * step, width=step,
                               dst=tuple(v[j][i] for i in range(step)))
            if acc is None:
                b.mov(v[0][0], dst=p)
            else:   # every load feeds the next address (all equal): the hop waits for all
                b.mov(v[0][0], dst=acc)
                for j in range(1, parts):
                    b.imax(acc, v[j][0], dst=acc)
                b.mov(acc, dst=p)
    b.stg(g_out, lane, p)
    kernel = verify(b.build())
    expect = _chase(nxt, rounds * chain, int(perm[0]) * bw)
    return Microbench(name, kernel, {"next": nxt, "out": np.zeros(WARP, np.int32)},
                      rounds * chain, f"dependent L2 load of a {128 * block_lines}-byte block",
                      {"rounds": rounds, "chain": chain, "block_lines": block_lines,
                       "blocks": blocks},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def flag_round_trip(rounds: int = 256, spin_limit: int = 1 << 22, same_sm: bool = False,
                    delay: int = 0, poll: str = "relaxed_gpu") -> Microbench:
    """Ping-pong between two CTAs (``same_sm``: two warps of one CTA) through two flags in
    different L2 lines; ``delay`` dependent shared loads in every poll iteration."""
    rounds = _positive("rounds", rounds)
    delay = int(delay)
    if delay < 0:
        raise InputError(f"delay={delay} must be >= 0")
    name = "flag_round_trip" + ("_same_sm" if same_sm else "") + (f"_delay{delay}" if delay
                                                                    else "") + _suffix(poll)
    b = Builder(f"mb_{name}", grid=1 if same_sm else 2, block=2 * WARP if same_sm else WARP,
                bench=name, rounds=rounds, **_poll_meta(poll))
    g_flags = b.global_buffer("flags", I32, 2 * LINE_WORDS, role="inout")
    g_out = b.global_buffer("out", I32, 2, role="out")
    cta = b.sreg("warp" if same_sm else "cta", dst=b.reg(I32, "cta"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    is0 = b.isetp("eq", cta, 0, dst=b.reg(PRED, "is0"))
    hop = None
    if delay:
        s_zero = b.shared("zero", I32, WARP)
        b.sts(s_zero, lane, 0)          # s[lane] = 0: every hop reads s[0] = 0
        b.bar()
        hop = b.mov(0, I32, dst=b.reg(I32, "hop"))

    def wait_delay():
        if hop is not None:
            for _ in range(delay):
                b.lds(s_zero, hop, dst=hop)
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    val = b.reg(I32, "val")
    is1 = b.pnot(is0, dst=b.reg(PRED, "is1"))
    # Four phases per round, in this program order, so that a lockstep executor (all warps
    # through the same statement) and the GPU (each CTA skips the other's phases) agree:
    # A CTA 0 writes ping; B CTA 1 waits for ping; C CTA 1 writes pong; D CTA 0 waits for pong.
    with b.loop("r", 1, rounds + 1) as r:
        with b.if_(is0):
            b.stg(g_flags, 0, r)
        with b.if_(is1):
            with b.while_(spin_limit=spin_limit, label="wait_ping") as w:
                wait_delay()
                b.ldg_volatile(g_flags, hop if hop is not None else 0, dst=seen)
                w.cond = b.isetp("ne", seen, r, dst=b.reg(PRED, "ping_wait"))
            b.stg(g_flags, LINE_WORDS, r)
        with b.if_(is0):
            with b.while_(spin_limit=spin_limit, label="wait_pong") as w:
                wait_delay()
                b.ldg_volatile(g_flags, hop if hop is not None else 0, offset=LINE_WORDS,
                               dst=seen)
                w.cond = b.isetp("ne", seen, r, dst=b.reg(PRED, "pong_wait"))
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        b.mov(seen, dst=val)
        b.stg(g_out, cta, val)
    kernel = verify(b.build())
    return Microbench(name, kernel,
                      {"flags": np.zeros(2 * LINE_WORDS, np.int32), "out": np.zeros(2, np.int32)},
                      rounds, "round trip between two warps" + (" of one SM" if same_sm else
                                                                " on two SMs"),
                      {"rounds": rounds, "same_sm": same_sm, "delay": delay},
                      lambda g: bool(np.all(np.asarray(g["out"]) == rounds)))


def store_visibility(rounds: int = 256, spin_limit: int = 1 << 22,
                     poll: str = "relaxed_gpu", flags: int = 1) -> Microbench:
    """One warp: store ``r`` to a flag, then poll it (volatile loads) until it reads ``r``.

    ``flags > 1``: every round does this on ``flags`` flags in different 128-byte lines in turn
    (op = one flag), so the cost averages over the L2 partitions the lines live in instead of
    being one draw of the (undocumented) address hash."""
    rounds, flags = _positive("rounds", rounds), _positive("flags", flags)
    name = "store_visibility" + _suffix(poll) + (f"_{flags}" if flags > 1 else "")
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds, **_poll_meta(poll))
    g_flag = b.global_buffer("flag", I32, LINE_WORDS * flags, role="inout")
    g_out = b.global_buffer("out", I32, 1, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    own_wait = None
    with b.loop("r", 1, rounds + 1) as r:
        for f in range(flags):
            b.stg(g_flag, 0, r, offset=f * LINE_WORDS)
            with b.while_(spin_limit=spin_limit, label="wait_own") as w:
                b.ldg_volatile(g_flag, 0, offset=f * LINE_WORDS, dst=seen)
                if own_wait is None:
                    own_wait = b.reg(PRED, "own_wait")
                w.cond = b.isetp("ne", seen, r, dst=own_wait)
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        b.stg(g_out, 0, seen)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"flag": np.zeros(LINE_WORDS * flags, np.int32),
                                     "out": np.zeros(1, np.int32)},
                      rounds * flags, "store then see it (same warp)",
                      {"rounds": rounds, **({"flags": flags} if flags > 1 else {})},
                      lambda g: int(np.asarray(g["out"])[0]) == rounds)


def poll_storm(rounds: int = 64, ctas: int = 132, threads: int = 256, slot: int = 4096,
               group: int = 4, load: str = "relaxed_gpu", regions: int = 1) -> Microbench:
    """``rounds`` dependent rounds of ``group`` back-to-back 16-byte volatile loads per thread,
    every CTA over the same ``slot``-word vector (Lamport's h staging while h is not ready).

    ``load``: a poll mode of :data:`POLL_MODES` or ``"plain"`` (``LDG``); ``regions``: round ``r``
    reads vector ``r % regions`` of ``regions`` consecutive ones (``rounds`` a multiple of it).
    """
    rounds, ctas, threads, slot, group, regions = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("slot", slot),
        ("group", group), ("regions", regions)))
    if slot % (4 * threads * group):
        raise InputError(f"slot={slot} must be a multiple of 4 * threads * group = "
                         f"{4 * threads * group}")
    if rounds % regions:
        raise InputError(f"rounds={rounds} must be a multiple of regions={regions}")
    if load not in (*POLL_MODES, "plain"):
        raise InputError(f"load={load!r} is unknown; accepted: {', '.join(POLL_MODES)}, plain")
    name = "poll_storm" + {"plain": "_plain", "volatile_sys": "_sys"}.get(load, "")
    if load == "relaxed_gpu" and regions > 1:
        name += "_rot"
    meta = {} if load == "plain" else _poll_meta(load)
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds, **meta)
    g_h = b.global_buffer("h", I32, slot * regions)
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid, cta, gt, tid4, acc = _thread_ids(b, threads)
    idx = b.reg(I32, "idx")
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(group)]
    ld = b.ldg if load == "plain" else b.ldg_volatile

    def one_round(base):
        for i in range(group):  # the data are zeros: acc stays 0, but the next round depends
            b.iadd(base, acc, dst=idx)  # on this one (the loads cannot be hoisted or merged)
            ld(g_h, idx, offset=4 * threads * i, width=4, dst=chunk[i])
        for i in range(group):
            for k in range(4):
                b.iadd(acc, chunk[i][k], dst=acc)

    if regions == 1:
        with b.loop("r", 0, rounds):
            one_round(tid4)
    else:
        base = b.reg(I32, "base")
        with b.loop("q", 0, rounds // regions):
            with b.loop("g", 0, regions * slot, slot) as g:
                b.iadd(g, tid4, dst=base)
                one_round(base)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"h": np.zeros(slot * regions, np.int32),
                                     "out": np.ones(ctas * threads, np.int32)},
                      rounds, "poll round of the whole grid (16-byte "
                      + ("plain" if load == "plain" else POLL_MODES[load]) + " loads)",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "slot": slot,
                       "group": group, "load": load, "regions": regions},
                      lambda g: bool(np.all(np.asarray(g["out"]) == 0)))


LAMPORT_OWNERS = ("one", "interleaved", "contiguous")
LAMPORT_SENTINEL = -(1 << 31)  # 0x80000000: the sentinel bit pattern of the Lamport kernel


def lamport_exchange(rounds: int = 16, ctas: int = 132, threads: int = 256, slot: int = 4096,
                     owner: str = "interleaved", delay: int = 0,
                     spin_limit: int = 1 << 22) -> Microbench:
    """The persistent kernel's Lamport h exchange without the mat-vec (H1/H2 of the README).

    ``rounds`` single-use slots of ``slot`` words, all the sentinel at launch. Round ``r``:
    the owners write ``r`` into their words of slot ``r``; then every thread of every CTA polls
    its ``4`` 16-byte chunks of slot ``r`` (relaxed 128-bit loads, back to back, re-polled while
    any word is the sentinel, warp-uniform ``vote.any`` exit: ``_stage_h``); ``__syncthreads``.
    ``owner``: ``"interleaved"`` - CTA ``c`` owns the 16-byte chunks ``q = c (mod ctas)`` (every
    32-byte sector written by two CTAs, as the snake-dealt rows of h1024-b4); ``"contiguous"`` -
    CTA ``c`` owns whole sectors ``[c*S/ctas, (c+1)*S/ctas)`` (one writer per sector); both:
    warp 0 writes, one 32-bit store per lane. Every CTA writes slot ``r + 1`` only after it has
    seen all of slot ``r``: op = one all-see-all exchange. ``"one"``: CTA 0 writes the whole
    slot (16-byte stores) after it has seen, on an arrival counter, that every CTA saw slot
    ``r - 1`` (thread 0 of each CTA adds 1 after its poll): op = one producer store -> last
    consumer's exit, plus the one-word fan-in back. ``delay`` dependent shared loads in every
    poll iteration lengthen the poll period (the phase wait grows with it, if there is one).
    """
    rounds, ctas, threads, slot = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("slot", slot)))
    group = 4
    if slot != 4 * threads * group:
        raise InputError(f"slot={slot} must be 4 * threads * {group} = {4 * threads * group}")
    if owner not in LAMPORT_OWNERS:
        raise InputError(f"owner={owner!r} is unknown; accepted: {', '.join(LAMPORT_OWNERS)}")
    delay = int(delay)
    if delay < 0:
        raise InputError(f"delay={delay} must be >= 0")
    chunks, sectors = slot // 4, slot // 8
    if owner != "one" and (threads < WARP or -(-chunks // ctas) > WARP // 4
                           or 2 * -(-sectors // ctas) > WARP // 4):
        raise InputError(f"owner={owner!r}: warp 0 must hold every CTA's chunks "
                         f"(slot={slot}, ctas={ctas})")
    name = f"lamport_{owner}" + (f"_delay{delay}" if delay else "")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", I32, rounds * slot, role="inout")
    g_cnt = b.global_buffer("counter", I32, LINE_WORDS, role="inout")
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid, cta, gt, tid4, acc = _thread_ids(b, threads)
    base = b.reg(I32, "base")
    idx = b.reg(I32, "idx")
    bits = b.reg(I32, "bits")
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(group)]
    hop = None
    if delay:
        s_zero = b.shared("zero", I32, WARP)
        with b.if_(b.isetp("lt", tid, WARP, dst=b.reg(PRED, "zfill"))):
            b.sts(s_zero, tid, 0)       # s[i] = 0: every hop reads s[0] = 0
        b.bar()
        hop = b.mov(0, I32, dst=b.reg(I32, "hop"))
    if owner == "one":
        is_p = b.isetp("eq", cta, 0, dst=b.reg(PRED, "is_p"))
        is_t0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is_t0"))
        is_p0 = b.pand(is_p, is_t0, dst=b.reg(PRED, "is_p0"))
        target = b.reg(I32, "target")
        nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
        val = b.reg(I32, "val", 4)
    else:  # warp 0 of each CTA: lane -> chunk k = tid // 4, word tid % 4
        k = b.shr(tid, 2, dst=b.reg(I32, "k"))
        w = b.and_(tid, 3, dst=b.reg(I32, "w"))
        q = b.reg(I32, "q")
        if owner == "interleaved":
            b.imad(k, ctas, cta, dst=q)
            lim = b.mov(chunks, I32, dst=b.reg(I32, "lim"))
        else:
            s0 = b.imul(cta, sectors, dst=b.reg(I32, "s0"))
            b.idiv(s0, ctas, dst=s0)
            s1 = b.iadd(cta, 1, dst=b.reg(I32, "s1"))
            b.imul(s1, sectors, dst=s1)
            b.idiv(s1, ctas, dst=s1)
            b.imad(s0, 2, k, dst=q)
            lim = b.imul(s1, 2, dst=b.reg(I32, "lim"))
        mine = b.isetp("lt", q, lim, dst=b.reg(PRED, "mine"))
        in_w0 = b.isetp("lt", tid, WARP, dst=b.reg(PRED, "in_w0"))
        b.pand(mine, in_w0, dst=mine)
        woff = b.imad(q, 4, w, dst=b.reg(I32, "woff"))
        widx = b.reg(I32, "widx")
    with b.loop("r", 0, rounds) as r:
        b.imad(r, slot, tid4, dst=base)
        if owner == "one":
            with b.if_(is_p0):  # wait until every CTA saw slot r - 1 (round 0: target 0)
                b.imul(r, nctas, dst=target)
                with b.while_(spin_limit=spin_limit, label="fan_in") as fw:
                    seen = b.ldg_volatile(g_cnt, 0, dst=b.reg(I32, "seen"))
                    fw.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
            b.bar()
            with b.if_(is_p):
                for i in range(4):
                    b.mov(r, dst=val[i])
                for i in range(group):
                    b.stg(g_h, base, tuple(val[j] for j in range(4)), offset=4 * threads * i)
        else:
            with b.if_(mine):
                b.imad(r, slot, woff, dst=widx)
                b.stg(g_h, widx, r)
        with b.while_(spin_limit=spin_limit, label="lamport_poll") as poll:
            if hop is not None:
                for _ in range(delay):
                    b.lds(s_zero, hop, dst=hop)
                b.iadd(base, hop, dst=idx)
            for i in range(group):
                b.ldg_volatile(g_h, idx if hop is not None else base, offset=4 * threads * i,
                               width=4, dst=chunk[i])
            waiting = b.mov(False, PRED, dst=b.reg(PRED, "waiting"))
            one = b.reg(PRED, "sent")
            for i in range(group):
                for j in range(4):
                    b.isetp("eq", chunk[i][j], LAMPORT_SENTINEL, dst=one)
                    b.por(waiting, one, dst=waiting)
            poll.cond = b.vote_any(waiting, dst=b.reg(PRED, "warp_waiting"))
        for i in range(group):
            for j in range(4):
                b.mov(chunk[i][j], dst=bits)
                b.iadd(acc, bits, dst=acc)
        b.bar()
        if owner == "one":
            with b.if_(is_t0):
                b.atom_add(g_cnt, 0, 1, dst=b.reg(I32, "old"))
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    expect = 4 * group * rounds * (rounds - 1) // 2
    return Microbench(name, kernel,
                      {"h": np.full(rounds * slot, LAMPORT_SENTINEL, np.int32),
                       "counter": np.zeros(LINE_WORDS, np.int32),
                       "out": np.ones(ctas * threads, np.int32)},
                      rounds, "Lamport exchange round of the whole grid ("
                      + {"one": "one producer CTA + fan-in",
                         "interleaved": "all CTAs write, sectors shared",
                         "contiguous": "all CTAs write, one writer per sector"}[owner] + ")",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "slot": slot,
                       "owner": owner, "delay": delay},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def atomic_throughput(per_warp: int = 64, ctas: int = 132, threads: int = 256,
                      same: bool = True) -> Microbench:
    """``ctas * threads/32 * per_warp`` atomics with return, same word or one line per warp."""
    per_warp, ctas, threads = (_positive(n, v) for n, v in
                               (("per_warp", per_warp), ("ctas", ctas), ("threads", threads)))
    wpc = threads // WARP
    n_warps = ctas * wpc
    words = LINE_WORDS if same else n_warps * LINE_WORDS
    name = "atomic_same" if same else "atomic_distinct"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, per_warp=per_warp)
    g_cnt = b.global_buffer("counters", I32, words, role="inout")
    g_out = b.global_buffer("out", I32, n_warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    addr = b.mov(0, I32, dst=b.reg(I32, "addr")) if same else b.imul(gw, LINE_WORDS,
                                                                     dst=b.reg(I32, "addr"))
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    old = b.reg(I32, "old")
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        with b.loop("r", 0, per_warp):
            b.atom_add(g_cnt, addr, 1, dst=old)
            b.iadd(acc, old, dst=acc)
        b.stg(g_out, gw, acc)
    kernel = verify(b.build())
    total = n_warps * per_warp

    def check(g) -> bool:
        c = np.asarray(g["counters"])
        if same:
            return int(c[0]) == total
        return bool(np.all(c.reshape(n_warps, LINE_WORDS)[:, 0] == per_warp))

    return Microbench(name, kernel, {"counters": np.zeros(words, np.int32),
                                     "out": np.zeros(n_warps, np.int32)},
                      total, "atomic add with return",
                      {"per_warp": per_warp, "ctas": ctas, "threads": threads, "same": same},
                      check)


GATHER_LINES = {"l1": 128, "l2": 8192}  # 16 KiB (L1-resident) / 1 MiB (beyond L1, in L2)


def gather(rounds: int = 16, k: int = 32, sectors: int = 1, width: int = 1, path: str = "l1",
           ctas: int = 264, threads: int = 1024, chains: int = 4,
           lines: int | None = None) -> Microbench:
    """Independent gathers at full occupancy: what one warp load over ``k`` distinct 128-byte
    lines costs the SM (the L1TEX tag and data stages; the CSR baseline's column gathers).

    Lane ``l`` reads line slot ``l % k``, in sector ``(l // k) % sectors`` of its line, ``width``
    words. Each thread follows ``chains`` independent chases (``chains`` loads in flight per
    warp); a load returns the address of the same lane position ``k`` lines further, so the
    ``k`` lines of one warp load stay distinct. ``path="l1"``: plain loads over a 16 KiB table
    (every load after the first lap hits L1); ``path="l2"``: relaxed (L1-bypassing) loads over
    1 MiB. Op = one warp load of the whole grid (per SM: times the SM count)."""
    rounds, k, sectors, ctas, threads, chains = (
        _positive(n, v) for n, v in (("rounds", rounds), ("k", k), ("sectors", sectors),
                                     ("ctas", ctas), ("threads", threads), ("chains", chains)))
    if path not in GATHER_LINES:
        raise InputError(f"path={path!r} is unknown; accepted: {', '.join(GATHER_LINES)}")
    if WARP % k or k * sectors > WARP or sectors > 4:
        raise InputError(f"k={k}, sectors={sectors}: k must divide 32, sectors be 1..4 and "
                         f"k * sectors <= 32")
    if width not in (1, 4):
        raise InputError(f"width={width} is not supported; accepted: 1, 4")
    lines = int(lines or GATHER_LINES[path])
    if lines < 2 * k or lines & (lines - 1):
        raise InputError(f"lines={lines} must be a power of two >= 2k = {2 * k}")
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    wpc = threads // WARP
    n_warps = ctas * wpc
    # lane -> word within its line: sector (p % sectors), then width-word steps in the sector
    lane_ids = np.arange(WARP)
    pos = lane_ids // k
    off = (pos % sectors) * 8 + ((pos // sectors) * width) % 8
    tab = np.zeros(lines * LINE_WORDS, np.int32)
    line_ids = np.arange(lines)
    for o in range(LINE_WORDS):
        tab[line_ids * LINE_WORDS + o] = ((line_ids + k) % lines) * LINE_WORDS + o
    name = f"gather_{path}_{k}" + (f"_s{sectors}" if sectors > 1 else "") + \
        (f"_w{width}" if width > 1 else "")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_tab = b.global_buffer("table", I32, tab.size)
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    slot = b.irem(lane, k, dst=b.reg(I32, "slot"))
    lpos = b.idiv(lane, k, dst=b.reg(I32, "lpos"))
    o1 = b.irem(lpos, sectors, dst=b.reg(I32, "o1"))
    o2 = b.idiv(lpos, sectors, dst=b.reg(I32, "o2"))
    b.imul(o2, width, dst=o2)
    b.and_(o2, 7, dst=o2)
    word = b.imad(o1, 8, o2, dst=b.reg(I32, "word"))
    p = b.reg(I32, "p", chains)
    tmp = b.reg(I32, "tmp")
    for c in range(chains):   # start line (gw * chains + c) * 37 + slot, mod lines
        b.imad(gw, chains * 37, slot, dst=tmp)
        b.iadd(tmp, c * 37, dst=tmp)
        b.and_(tmp, lines - 1, dst=tmp)
        b.imad(tmp, LINE_WORDS, word, dst=p[c])
    scratch = b.reg(I32, "scratch", 3) if width > 1 else None
    load = b.ldg if path == "l1" else b.ldg_volatile
    with b.loop("r", 0, rounds):
        for c in range(chains):
            dst = p[c] if width == 1 else (p[c], scratch[0], scratch[1], scratch[2])
            load(g_tab, p[c], width=width, dst=dst)
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    for c in range(chains):
        b.iadd(acc, p[c], dst=acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())

    gw_h = np.repeat(np.arange(n_warps), WARP)
    ln = np.tile(lane_ids, n_warps)
    word_h = off[ln]
    expect = np.zeros(n_warps * WARP, np.int64)
    for c in range(chains):
        start = ((gw_h * chains * 37 + ln % k + c * 37) & (lines - 1))
        end = (start + rounds * k) % lines
        expect += end * LINE_WORDS + word_h
    expect = expect.astype(np.int32)   # wraps like the kernel's 32-bit sum (no overflow here)
    return Microbench(name, kernel, {"table": tab, "out": np.zeros(ctas * threads, np.int32)},
                      rounds * chains * n_warps,
                      f"warp load over {k} lines ({sectors} sector(s) each, {width} word(s) a "
                      f"lane, {path}), all SMs together",
                      {"rounds": rounds, "k": k, "sectors": sectors, "width": width,
                       "path": path, "ctas": ctas, "threads": threads, "chains": chains,
                       "lines": lines},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def grid_barrier(rounds: int = 64, ctas: int = 132, threads: int = 256,
                 spin_limit: int = 1 << 22) -> Microbench:
    """``rounds`` grid barriers (atomic arrive + volatile spin) over ``ctas`` CTAs."""
    rounds, ctas, threads = (_positive(n, v) for n, v in
                             (("rounds", rounds), ("ctas", ctas), ("threads", threads)))
    b = Builder("mb_grid_barrier", grid=ctas, block=threads, bench="grid_barrier", rounds=rounds)
    g_cnt = b.global_buffer("counter", I32, 1, role="inout")
    g_out = b.global_buffer("out", I32, ctas, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
    is0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is0"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    old = b.reg(I32, "old")
    target = b.reg(I32, "target")
    with b.loop("r", 1, rounds + 1) as r:
        b.bar()
        with b.if_(is0):
            b.fence()
            b.atom_add(g_cnt, 0, 1, dst=old)
            b.imul(r, nctas, dst=target)
            with b.while_(spin_limit=spin_limit, label="grid_barrier") as w:
                b.ldg_volatile(g_cnt, 0, dst=seen)
                w.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
        b.bar()
    with b.if_(is0):
        b.stg(g_out, cta, seen)
    kernel = verify(b.build())
    return Microbench("grid_barrier", kernel, {"counter": np.zeros(1, np.int32),
                                               "out": np.zeros(ctas, np.int32)},
                      rounds, "grid barrier", {"rounds": rounds, "ctas": ctas,
                                               "threads": threads},
                      lambda g: bool(np.all(np.asarray(g["out"]) >= rounds * ctas)))


def broadcast(rounds: int = 16, ctas: int = 132, threads: int = 256, words: int = 4096,
              fresh: bool = True, stage: str = "none", spin_limit: int = 1 << 22
              ) -> Microbench:
    """Every CTA reads a ``words``-word vector that the other CTAs wrote just before (``fresh``)
    or that nobody writes (``fresh=False``), behind a grid barrier: the barrier variant's h
    exchange without the mat-vec, at any size (:mod:`measurements.exchange_scan` located the
    cost per word exchanged; this isolates it).

    Round ``r``: CTA ``c`` writes its sector-aligned share of region ``r`` (``fresh``; else the
    same stores go to a scratch region and the reads always use region 0, unchanged); grid
    barrier (as :func:`grid_barrier`); every thread reads its ``words / (4 threads)`` 16-byte
    chunks with relaxed loads in dependent groups of 4 (as ``_stage_h``); ``__syncthreads``.
    ``stage`` (the persistent kernel's other differences): ``"sts"`` stores every group's chunks
    into a ``words``-word shared buffer, as ``_stage_h`` does; ``"smem"`` only declares that
    buffer (the same shared-memory carve-out, no stores but one word).
    Op = one round.
    """
    rounds, ctas, threads, words = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("words", words)))
    if stage not in ("none", "sts", "smem"):
        raise InputError(f"stage={stage!r} is unknown; accepted: none, sts, smem")
    if words % (4 * threads):
        raise InputError(f"words={words} must be a multiple of 4 * threads = {4 * threads}")
    per = words // (4 * threads)           # 16-byte chunks per thread
    share = -(-words // ctas)
    share = -(-share // 8) * 8             # words per CTA, whole 32-byte sectors
    if share > threads:
        raise InputError(f"words={words}: a CTA's share ({share} words) exceeds "
                         f"threads={threads}")
    name = f"broadcast_{'fresh' if fresh else 'same'}_{words}"
    if stage != "none":
        name += f"_{stage}"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    s_h = b.shared("h_s", I32, words) if stage != "none" else None
    g_h = b.global_buffer("h", I32, (rounds + 1) * words, role="inout")
    g_w = b.global_buffer("w", I32, (rounds + 1) * words, role="inout")
    g_cnt = b.global_buffer("counter", I32, 1, role="inout")
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    is0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is0"))
    mine = b.imad(cta, share, tid, dst=b.reg(I32, "mine"))       # the word this thread writes
    writes = b.pand(b.isetp("lt", tid, share), b.isetp("lt", mine, words),
                    dst=b.reg(PRED, "writes"))
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    target, base, idx, waddr = (b.reg(I32, n) for n in ("target", "base", "idx", "waddr"))
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(4)]
    with b.loop("r", 1, rounds + 1) as r:
        b.imad(r, words, mine, dst=waddr)
        with b.if_(writes):
            b.stg(g_h if fresh else g_w, waddr, acc)             # acc is 0: the data stay 0
        b.bar()
        with b.if_(is0):
            b.fence()
            b.atom_add(g_cnt, 0, 1)
            b.imul(r, nctas, dst=target)
            with b.while_(spin_limit=spin_limit, label="grid_barrier") as w:
                b.ldg_volatile(g_cnt, 0, dst=seen)
                w.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
        b.bar()
        if fresh:
            b.imad(r, words, tid4, dst=base)
        else:
            b.mov(tid4, dst=base)
        for g0 in range(0, per, 4):
            n = min(4, per - g0)
            for i in range(n):
                b.iadd(base, acc, dst=idx)
                b.ldg_volatile(g_h, idx, offset=4 * threads * (g0 + i), width=4, dst=chunk[i])
            if stage == "sts":
                for i in range(n):
                    b.sts(s_h, tid4, tuple(chunk[i][k] for k in range(4)),
                          offset=4 * threads * (g0 + i))
            for i in range(n):
                for k in range(4):
                    b.iadd(acc, chunk[i][k], dst=acc)
        b.bar()
    if stage == "smem":
        b.sts(s_h, tid, acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"h": np.zeros((rounds + 1) * words, np.int32),
                                     "w": np.zeros((rounds + 1) * words, np.int32),
                                     "counter": np.zeros(1, np.int32),
                                     "out": np.ones(ctas * threads, np.int32)},
                      rounds, "write share, grid barrier, read all (16-byte relaxed loads)",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "words": words,
                       "fresh": fresh},
                      lambda g: bool(np.all(np.asarray(g["out"]) == 0)))


MICROBENCHES: dict[str, Callable[..., Microbench]] = {
    "smem_latency": smem_latency,
    "l2_latency": l2_latency,
    "flag_round_trip": flag_round_trip,
    "atomic_same": lambda **kw: atomic_throughput(same=True, **kw),
    "atomic_distinct": lambda **kw: atomic_throughput(same=False, **kw),
    "grid_barrier": grid_barrier,
    "flag_round_trip_same_sm": lambda **kw: flag_round_trip(same_sm=True, **kw),
    "flag_round_trip_delay16": lambda **kw: flag_round_trip(delay=16, **kw),
    "store_visibility": store_visibility,
    "poll_storm": poll_storm,
    "l2_latency_sys": lambda **kw: l2_latency(poll="volatile_sys", **kw),
    "flag_round_trip_sys": lambda **kw: flag_round_trip(poll="volatile_sys", **kw),
    "store_visibility_sys": lambda **kw: store_visibility(poll="volatile_sys", **kw),
    "poll_storm_sys": lambda **kw: poll_storm(load="volatile_sys", **kw),
    "poll_storm_rot": lambda **kw: poll_storm(regions=32, **kw),
    "poll_storm_plain": lambda **kw: poll_storm(load="plain", regions=32, **kw),
}
MICROBENCHES["store_visibility_8"] = lambda **kw: store_visibility(flags=8, **kw)
for _k in (1, 2, 4, 8, 16, 32):   # the L2 partitions: max over k random lines
    MICROBENCHES[f"l2_latency_wide_{_k}"] = lambda _k=_k, **kw: l2_latency_wide(lanes=_k, **kw)
for _k in (1, 4, 8, 16, 32):      # the L2 partitions' interleave: one line .. a 4 KiB block
    MICROBENCHES[f"l2_latency_block_{_k}"] = (
        lambda _k=_k, **kw: l2_latency_block(block_lines=_k, **kw))
for _k in (1, 2, 4, 8, 16, 32):   # L1TEX cost of a warp load over k lines (CSR gathers)
    MICROBENCHES[f"gather_l1_{_k}"] = lambda _k=_k, **kw: gather(k=_k, **kw)
MICROBENCHES["gather_l1_8_s4"] = lambda **kw: gather(k=8, sectors=4, **kw)
MICROBENCHES["gather_l1_32_w4"] = lambda **kw: gather(k=32, width=4, **kw)
MICROBENCHES["gather_l1_8_s4_w4"] = lambda **kw: gather(k=8, sectors=4, width=4, **kw)
for _k in (1, 8, 32):
    MICROBENCHES[f"gather_l2_{_k}"] = lambda _k=_k, **kw: gather(k=_k, path="l2", **kw)
for _w in (4096, 16384):    # the exchange cost per word: fresh vs unchanged data
    for _f in (True, False):
        MICROBENCHES[f"broadcast_{'fresh' if _f else 'same'}_{_w}"] = (
            lambda _w=_w, _f=_f, **kw: broadcast(words=_w, fresh=_f, **kw))
for _st in ("none", "sts", "smem"):  # the persistent kernel's differences, at h8192-b4's size
    MICROBENCHES["broadcast_fresh_32768" + ("" if _st == "none" else f"_{_st}")] = (
        lambda _st=_st, **kw: broadcast(words=32768, stage=_st, **kw))
for _o in LAMPORT_OWNERS:  # the Lamport exchange probes (H1: "one", H2: the other two)
    for _d in (0, 16):
        MICROBENCHES[f"lamport_{_o}" + (f"_delay{_d}" if _d else "")] = (
            lambda _o=_o, _d=_d, **kw: lamport_exchange(owner=_o, delay=_d, **kw))

# The size argument each benchmark scales with (two values give the slope).
SIZE_ARG = {"smem_latency": "rounds", "l2_latency": "rounds", "flag_round_trip": "rounds",
            "atomic_same": "per_warp", "atomic_distinct": "per_warp", "grid_barrier": "rounds",
            "flag_round_trip_same_sm": "rounds", "flag_round_trip_delay16": "rounds",
            "store_visibility": "rounds", "poll_storm": "rounds", "l2_latency_sys": "rounds",
            "flag_round_trip_sys": "rounds", "store_visibility_sys": "rounds",
            "poll_storm_sys": "rounds", "poll_storm_rot": "rounds", "poll_storm_plain": "rounds"}
SIZE_ARG.update({k: "rounds" for k in MICROBENCHES
                 if k.startswith(("lamport_", "broadcast_", "l2_latency_", "store_visibility",
                                 "gather_"))})


def build(name: str, size: int, **kwargs) -> Microbench:
    """Microbenchmark ``name`` at ``size`` (its :data:`SIZE_ARG`)."""
    if name not in MICROBENCHES:
        raise InputError(f"microbenchmark {name!r} is unknown; accepted: "
                         f"{', '.join(MICROBENCHES)}")
    return MICROBENCHES[name](**{SIZE_ARG[name]: size}, **kwargs)


# the Lamport-exchange (lmech_*) and CSR-gather (cmech_*) mechanism families register
# themselves in MICROBENCHES and SIZE_ARG
from . import microbench_csr, microbench_lamport  # noqa: E402,F401
