"""How long one warp waits for its shared loads, by width and by how many are in flight, written
in the IR. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/lds_width.py --out $OUT   # GPU: lds_width.json
    python measurements/lds_width.py --simulate measurements/h200/lds_width.json

``poll_beside_rows.py`` found one warp's stream of 128-bit shared loads (four back to back, then
their FFMAs) at 20.7 cycles a load on the H200 against 15.75 simulated, while four and six
warps' streams were priced within 4-7%: the simulator's latency of a lone warp's wide loads is
short, its rate across warps about right. This probe takes the lone warp's wait apart.

One CTA of 8 warps; the warps of ``active`` each run ``rounds`` rounds, the others exit. A round
issues ``k`` shared loads of ``width`` words a lane back to back (lane ``l`` reads the warp's
``32 * width`` consecutive words, no bank conflict: ``width`` wavefronts a load), the first
``k - 1`` from a region of zeros, the last from a chain whose value is the next round's
address: the round ends when the last load's data is back, so its time is the issue of ``k``
loads, the pipe's time for ``k * width`` wavefronts and one latency. Every other word loaded is
added to a sum of its own (one a word: no chain of adds), all stored at the end, so that no
compiler drops or narrows a load.

``active``: one warp; two on one scheduler (warps 0 and 4); two on two (0, 1); four on four; all
eight. Op = one round of each warp; slope between two round counts; ``ROUNDS_PASSES`` passes
over every configuration, their median kept (a drift of the GPU between configurations falls
on all of them alike).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKS = 32                  # chain blocks (each the words one warp's load covers at width 4)
BLOCK = 128                  # words a block
SIZES = (512, 4096)          # rounds on the GPU
SIM_SIZES = (32, 160)        # rounds in the simulator
REPEATS, WARMUP, PASSES = 5, 2, 5
ACTIVE = {"1": (0,), "2same": (0, 4), "2": (0, 1), "4": (0, 1, 2, 3), "8": tuple(range(8))}
CONFIGS = tuple((w, k, a) for w in (1, 2, 4) for k in (1, 2, 4, 8) for a in ACTIVE
                if not (w == 2 and a not in ("1", "4")))


def _key(width: int, k: int, active: str) -> str:
    return f"w{width}_k{k}_a{active}"


def build(rounds: int, width: int, k: int, active: str, seed: int = 0):
    """The probe kernel (module docstring) as a :class:`~kernels_ir.kernels.microbench.core
    .Microbench` of ``rounds`` operations."""
    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import I32, PRED
    from kernels_ir.kernels.microbench.core import WARP, Microbench, _chase
    from kernels_ir.verify import verify

    if width not in (1, 2, 4) or not 1 <= k <= 8 or active not in ACTIVE or rounds < 1:
        raise InputError(f"width={width}, k={k}, active={active!r}, rounds={rounds}: accepted "
                         f"width 1, 2 or 4, 1 <= k <= 8, active one of {', '.join(ACTIVE)}, "
                         f"rounds >= 1")
    warps = ACTIVE[active]
    name = f"ldsw_{_key(width, k, active)}"
    words = 2 * BLOCKS * BLOCK + 8 * WARP * width
    rng = np.random.default_rng(seed)
    perm = rng.permutation(BLOCKS)
    nxt = np.empty(BLOCKS, np.int64)
    nxt[perm] = np.roll(perm, -1)                        # one random cycle through the blocks
    table = np.zeros(words, np.int32)
    for blk in range(BLOCKS):                            # lane l's first word: the next block
        table[blk * BLOCK + np.arange(WARP) * width] = nxt[blk] * BLOCK

    b = Builder(name, grid=1, block=8 * WARP, bench=name, rounds=rounds)
    g_table = b.global_buffer("table", I32, words)
    g_out = b.global_buffer("out", I32, 8 * WARP, role="out")
    buf = b.shared("buf", I32, words)
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.shr(tid, 5, dst=b.reg(I32, "warp"))
    v = b.reg(I32, "v")
    with b.loop("i", 0, words, 8 * WARP) as i:          # copy the table into shared memory
        idx = b.iadd(i, tid, dst=b.reg(I32, "ci"))
        b.ldg(g_table, idx, dst=v)
        b.sts(buf, idx, v)
    b.bar()
    runs = b.mov(False, PRED, dst=b.reg(PRED, "runs"))
    is_w = b.reg(PRED, "is_w")
    for w in warps:
        b.isetp("eq", warp, w, dst=is_w)
        b.por(runs, is_w, dst=runs)
    with b.if_(runs):
        lane_off = b.imul(lane, width, dst=b.reg(I32, "lane_off"))
        # every active warp walks the same chain (shared loads of one address do not conflict)
        p = b.mov(int(perm[0]) * BLOCK, I32, dst=b.reg(I32, "p"))
        accs = [b.mov(0, I32, dst=b.reg(I32, f"acc{j}_{c}")) for j in range(k)
                for c in range(width) if (j, c) != (k - 1, 0)]
        at = b.reg(I32, "at")
        got = [b.reg(I32, f"got{j}", width) for j in range(k)]
        with b.loop("r", 0, rounds, kind="seq"):
            b.iadd(p, lane_off, dst=at)
            for j in range(k - 1):       # zeros, each at its own offset (no load merges)
                b.lds(buf, at, offset=BLOCKS * BLOCK + j * WARP * width, width=width,
                      dst=got[j])
            b.lds(buf, at, width=width, dst=got[k - 1])
            # every word is used (else a compiler narrows the load), each into a sum of its own
            # (no chain of adds); only the chain's first word is on the round's path
            words_in = [got[j][c] for j in range(k) for c in range(width)
                        if (j, c) != (k - 1, 0)]
            for a, g in zip(accs, words_in, strict=True):
                b.iadd(a, g, dst=a)
            b.mov(got[k - 1][0], dst=p)
        res = b.mov(p, dst=b.reg(I32, "res"))
        for a in accs:
            b.iadd(res, a, dst=res)
        b.stg(g_out, tid, res)
    kernel = verify(b.build())
    end = _chase(nxt, rounds, int(perm[0])) * BLOCK

    def check(g) -> bool:
        out = np.asarray(g["out"]).view(np.int32).reshape(8, WARP)
        return bool(all(np.all(out[w] == end) for w in warps))

    return Microbench(name, kernel, {"table": table, "out": np.zeros(8 * WARP, np.int32)},
                      rounds, f"one round: {k} loads of {width} words a lane, the last awaited",
                      {"rounds": rounds, "width": width, "k": k, "active": active}, check)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import measure_interleaved, save_record

    rec = measure_interleaved(argv, [(_key(w, k, a), lambda n, c=(w, k, a): build(n, *c))
                                     for w, k, a in CONFIGS], SIZES, repeats=REPEATS,
                              warmup=WARMUP, passes=PASSES, field="passes",
                              unit="cycles_per_round", format_version=1)
    for key, r in rec["results"].items():
        print(f"{key:14s} {r['cycles_per_round']:7.2f} cycles a round", flush=True)
    save_record(os.path.join(out, "lds_width.json"), rec)
    return rec


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_slopes_into

    simulate_slopes_into(path, [(_key(w, k, a), lambda n, c=(w, k, a): build(n, *c))
                                for w, k, a in CONFIGS], SIM_SIZES, "cycles_per_round",
                         "a round")


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/lds_width.py", measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
