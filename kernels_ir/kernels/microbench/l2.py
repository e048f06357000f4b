"""L2 latency and the split L2's partitions (:mod:`gpusim.engine.l2`).

- :func:`l2_latency` - one warp follows a pointer chase through a global buffer with L2-coherent
  (volatile) loads, one 128-byte line per hop, a random cycle over ``lines`` lines (512 KiB by
  default: far larger than L1, far smaller than L2). Op = one load. ``l2_latency_sys``: the same
  with system-scope polls (:mod:`.polls` says why).
- :func:`l2_latency_wide` - the same chase with ``lanes`` independent chains in one warp: each
  load touches ``lanes`` random lines and waits for the slowest (the far L2 partition's
  latency once ``lanes`` is a few). Op = one warp load.
- :func:`l2_latency_block` - the chase one aligned block of ``block_lines`` lines at a time
  (a 512-byte block is a Lamport poll group): whether a block sees the far latency says how
  finely the partitions interleave. Op = one warp load.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _chase, _poll_meta, _positive, _suffix

__all__ = ["l2_latency", "l2_latency_wide", "l2_latency_block"]


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
