"""The shared-memory pipe (:mod:`gpusim.engine.smem`): its latency.

- :func:`smem_latency` - one warp follows a dependent chain through shared memory
  (``idx = s[idx]``, every lane the same address: one wavefront, no conflict). Op = one load.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...ir import I32
from ...verify import verify
from .core import WARP, Microbench, _chase, _positive

__all__ = ["smem_latency"]


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
