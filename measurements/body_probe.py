"""The persistent kernels' row body alone, between two CTA barriers: one device call, or the
simulator.

    PYTHONPATH=. python3 measurements/body_probe.py --out $OUT     # GPU (body_probe.json)
    python measurements/body_probe.py --simulate measurements/h200/body_probe.json
    SLOTS=1 PYTHONPATH=. python3 measurements/body_probe.py --out $OUT  # body_probe_slots.json
    DENSE=1 PYTHONPATH=. python3 measurements/body_probe.py --out $OUT  # body_probe_dense.json

Why: stamped inside the barrier and Lamport kernels (``h200/barrier_trace.json``), the body
after the staging barrier (a warp's wide shared loads, FFMAs, butterfly reduction, the select of
its batch column, then on the row's lanes the add of x, the tanh and the h store, then the
closing barrier) is 25-89 ns longer on the GPU than in the simulator, and the tanh in place
costs the GPU 40-57 ns at batch 4 (one row a warp) and 102-116 ns at batch 2 (two row slots)
against the simulator's 29-32. A lone warp's dependent tanh is 68 cycles (34 ns) on both, and
eight warps beside each other cost it 3 cycles (``chain_warps.json``). Here the body runs with
nothing around it: no grid barrier, no staging loads, so what differs is the body's own.

Each benchmark (:func:`body`) is one CTA of 8 warps (the kernels' block) or one per SM
(``_g132``); a round is: CTA barrier, then per row slot ``chunks`` shared loads of ``batch``
words a lane (conflict-free: lane ``l`` reads words ``batch * l ..``) each followed by its
``batch`` FFMAs, the five-level butterfly of ``batch`` chains, the select of the lane's column,
and under ``lane < batch`` the add of x, the tanh, the add of 0 and the store of the row's value
(the kernels' epilogue as ``sparse_rnn`` emits it), then the closing CTA barrier. Variants:

- ``full``: as the kernel;
- ``no_tanh``: the tanh made a move (as ``barrier_trace``'s ``no_tanh``);
- ``no_if``: every lane runs the epilogue (no divergent block; lane ``l`` stores its own slot);
- ``no_if_no_tanh``: both;
- ``uniform``: as ``no_if``, but inside ``if lane < n`` with ``n`` = 32 read from memory (a
  branch that no lane leaves);
- ``skip``: as ``uniform`` with ``n`` = 0 (a branch every lane leaves: nothing is stored).

(An epilogue alone between the barriers is no probe: its value is the same every round, and
ptxas computes the tanh once, outside the loop.)

ptxas compiles the kernels' ``if`` of a row's lanes (``full``, ``no_tanh``) to a branch with a
convergence barrier (``BSSY`` / ``BRA`` / ``BSYNC``), not to predicated instructions (the SASS
was read), so ``full`` against ``no_if`` prices that branch with the tanh in it, and
``no_tanh`` against ``no_if_no_tanh`` without.

Cost per round = slope of the medians between 200 and 2000 rounds (11 repeats); values checked.
``--simulate`` adds the simulator's cycles per round (slope between 4 and 8 rounds).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = ("full", "no_tanh", "no_if", "no_if_no_tanh", "uniform", "skip")
SIZES, SIM_SIZES = (200, 2000), (4, 8)
WARPS = 8
_W, _H, _X = 0.02, 0.5, 0.1      # weight (times 1 + lane / 64), h word (times 1 + word / 512), x


def body(rounds: int = 8, variant: str = "full", batch: int = 4, rows: int = 1,
         chunks: int = 1, grid: int = 1, warps: int = WARPS):
    """The row body between two CTA barriers (see the module docstring), a checked
    :class:`Microbench`; ``rows`` row slots a warp, each of ``chunks`` loads; ``grid`` CTAs of
    ``warps`` warps."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.kernels.microbench.core import _positive
    from kernels_ir.verify import verify

    rounds, rows, chunks, grid, warps = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("rows", rows), ("chunks", chunks), ("grid", grid),
        ("warps", warps)))
    if warps > 32:
        raise InputError(f"warps={warps!r}: accepted 1 to 32 (one CTA)")
    if variant not in VARIANTS:
        raise InputError(f"variant={variant!r}: accepted {', '.join(VARIANTS)}")
    if batch not in (1, 2, 4):
        raise InputError(f"batch={batch!r}: accepted 1, 2, 4 (one shared load a chunk)")
    name = f"body_{variant}_b{batch}_r{rows}_c{chunks}" + (f"_g{grid}" if grid > 1 else "") + (
        f"_w{warps}" if warps != WARPS else "")
    threads = 32 * warps
    loads = rows * chunks
    words = 32 * batch * loads       # load k of the warp reads words 32 * batch * k + batch * l ..
    b = Builder(f"mb_{name}", grid=grid, block=threads, bench=name, rounds=rounds)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    g_w = b.global_buffer("w", F32, 32)
    g_h = b.global_buffer("h", F32, words)
    g_x = b.global_buffer("x", F32, 1)
    g_n = b.global_buffer("n", I32, 1)
    n_out = grid * threads * rows
    g_out = b.global_buffer("out", F32, n_out, role="out")
    h_s = b.shared("h_s", F32, words)
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    w = b.ldg(g_w, lane, dst=b.reg(F32, "w"))
    xv = b.ldg(g_x, zero, dst=b.reg(F32, "xv"))
    hw = b.reg(F32, "hw")
    for k in range(0, words, threads):
        inside = b.isetp("lt", tid, words - k)
        with b.if_(inside):
            b.ldg(g_h, tid, offset=k, dst=hw)
            b.sts(h_s, tid, hw, offset=k)
    b.bar()
    caddr = b.imul(lane, batch, dst=b.reg(I32, "caddr"))
    col = b.imin(lane, batch - 1, dst=b.reg(I32, "col"))
    all_lanes = variant in ("no_if", "no_if_no_tanh", "uniform")
    mine = (b.isetp("lt", lane, b.ldg(g_n, zero, dst=b.reg(I32, "n")))
            if variant in ("uniform", "skip") else b.isetp("lt", lane, batch))
    pick = [b.isetp("eq", lane, j) for j in range(1, batch)]
    # lane l's slot: (cta * threads + tid) * rows + slot under no_if, else the row's column
    gw = b.imad(cta, warps, b.sreg("warp", dst=b.reg(I32, "warp")), dst=b.reg(I32, "gw"))
    base = b.imad(gw, 32 * rows, lane if all_lanes else col, dst=b.reg(I32, "base"))
    acc = b.reg(F32, "acc", size=batch)
    sh = b.reg(F32, "sh", size=batch)
    hv = b.reg(F32, "hv", size=batch)
    val = b.reg(F32, "val")

    def epilogue(slot: int) -> None:
        b.fadd(val, xv, dst=val)
        if variant in ("no_tanh", "no_if_no_tanh"):
            b.mov(val, dst=val)
        else:
            b.tanh(val, dst=val)
        b.fadd(val, 0.0, dst=val)
        b.stg(g_out, base, val, offset=32 * slot)

    with b.loop("r", 0, rounds):
        b.bar()
        for slot in range(rows):
            for j in range(batch):
                b.mov(0.0, F32, dst=acc[j])
            for k in range(chunks):
                b.lds(h_s, caddr, offset=32 * batch * (slot * chunks + k), width=batch,
                      dst=hv)
                for j in range(batch):
                    b.ffma(w, hv[j], acc[j], dst=acc[j])
            for m in (16, 8, 4, 2, 1):
                for j in range(batch):
                    b.shfl_xor(acc[j], m, dst=sh[j])
                for j in range(batch):
                    b.fadd(acc[j], sh[j], dst=acc[j])
            b.mov(acc[0], dst=val)
            for j in range(1, batch):
                b.sel(pick[j - 1], acc[j], val, dst=val)
            if variant in ("no_if", "no_if_no_tanh"):
                epilogue(slot)
            else:
                with b.if_(mine):
                    epilogue(slot)
        b.bar()
    kernel = verify(b.build())

    w_in = (_W * (1 + np.arange(32) / 64)).astype(np.float32)
    h_in = (_H * (1 + np.arange(words) / 512)).astype(np.float32)
    expect = _expected(variant, batch, rows, grid, w_in, h_in, chunks, warps)

    def check(g) -> bool:
        got = np.asarray(g["out"], np.float64)
        return bool(np.allclose(got, expect, rtol=1e-4, atol=1e-6))

    inputs = {"w": w_in, "h": h_in, "x": np.array([_X], np.float32),
              "n": np.array([0 if variant == "skip" else 32], np.int32),
              "out": np.zeros(n_out, np.float32)}
    params = {"rounds": rounds, "variant": variant, "batch": batch, "rows": rows,
              "chunks": chunks, "grid": grid, "warps": warps}
    return Microbench(name, kernel, inputs, rounds, "one round: barrier, the row body, barrier",
                      params, check)


def _expected(variant: str, batch: int, rows: int, grid: int, w, h, chunks: int,
              warps: int = WARPS):
    """``out`` after the kernel: per warp and row slot, lanes ``< batch`` (every lane under
    ``no_if``) hold the activation of their column's sum (lanes past ``batch`` select column 0;
    float64)."""
    import numpy as np

    w64 = w.astype(np.float64)
    h64 = h.astype(np.float64).reshape(rows, chunks, 32, batch)
    col = np.where(np.arange(32) < batch, np.arange(32), 0)
    act = (lambda v: v) if variant in ("no_tanh", "no_if_no_tanh") else np.tanh
    out = np.zeros((grid, warps, rows, 32))
    if variant == "skip":
        return out.reshape(-1)
    for slot in range(rows):
        sums = (w64[None, :, None] * h64[slot]).sum(axis=(0, 1))          # per column
        lane_val = sums[col]
        v = act(lane_val + _X)
        if variant in ("no_if", "no_if_no_tanh", "uniform"):
            out[:, :, slot] = v
        else:
            out[:, :, slot, :batch] = v[:batch]
    return out.reshape(-1)


ENTRIES = tuple(
    (f"{v}_b{b}_r{r}_c{c}" + (f"_g{g}" if g > 1 else "") + (f"_w{w}" if w != WARPS else ""),
     {"variant": v, "batch": b, "rows": r, "chunks": c, "grid": g} | (
         {"warps": w} if w != WARPS else {}))
    for v, b, r, c, g, w in (
        [(v, 4, 1, 1, 1, WARPS) for v in VARIANTS]
        + [(v, 2, 2, 4, 1, WARPS) for v in ("full", "no_tanh", "no_if", "no_if_no_tanh")]
        + [(v, 1, 1, 1, 1, WARPS) for v in ("full", "no_if")]
        + [(v, 2, 1, 4, 1, WARPS) for v in ("full", "no_if")]
        + [(v, 4, 1, 4, 1, WARPS) for v in ("full", "no_if", "no_tanh", "no_if_no_tanh")]
        + [(v, 4, 1, 1, 132, WARPS) for v in ("full", "no_if")]
        + [(v, 4, 1, 1, 1, w) for w in (1, 2, 4) for v in ("full", "no_if")]))


# ``SLOTS=1``: three to eight row slots a warp, with and without the region between them
# (record ``body_probe_slots.json``): how the slots pipeline when there are more than two
SLOT_ENTRIES = tuple(
    (f"{v}_b{b}_r{r}_c{c}", {"variant": v, "batch": b, "rows": r, "chunks": c, "grid": 1})
    for v, b, r, c in (
        [(v, 2, 4, 4) for v in ("full", "no_if", "no_if_no_tanh")]
        + [(v, 4, 4, 2) for v in ("full", "no_if")]
        + [(v, 4, 8, 1) for v in ("full", "no_if")]
        + [(v, 1, 8, 2) for v in ("full", "no_if")]
        + [(v, 2, 8, 2) for v in ("full", "no_if")]
        + [("full", 2, 3, 4), ("full", 4, 2, 2)]))


# ``DENSE=1``: the dense kernel's body at batch 1, 2 and 4 (record ``body_probe_dense.json``): a
# row of ``hidden`` weights is ``hidden / 32 / batch`` loads of one, two or four words a lane, each
# followed by its FFMAs on the row's accumulators (one a batch column): rows of 256 to 2048 at
# batch 1, of 1024 and 2048 at batch 2, one and two rows a warp, and one row of 2048 at batch 4
DENSE_ENTRIES = tuple(
    (f"{v}_b{b}_r{r}_c{c}", {"variant": v, "batch": b, "rows": r, "chunks": c, "grid": 1})
    for v, b, r, c in (
        [(v, 1, 1, c) for c in (8, 16, 32, 64) for v in ("full", "no_if")]
        + [(v, 1, 2, 32) for v in ("full", "no_if")]
        + [(v, 2, 1, c) for c in (16, 32) for v in ("full", "no_if")]
        + [("full", 4, 1, 16)]))
RECORDS = {"SLOTS": ("body_probe_slots.json", SLOT_ENTRIES),
           "DENSE": ("body_probe_dense.json", DENSE_ENTRIES)}


def _record():
    """The record's file name and entries: ``SLOTS=1``, ``DENSE=1`` or the default."""
    for env, rec in RECORDS.items():
        if os.environ.get(env):
            return rec
    return "body_probe.json", ENTRIES


def _entries():
    return _record()[1]


def _builder(kw: dict):
    return lambda rounds: body(rounds, **kw)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, _record()[0],
                               [(key, f"body_{key}", SIZES, kw, _builder(kw))
                                for key, kw in _entries()])


def simulated_cycles(spec, kw: dict) -> float:
    """The simulator's cycles a round: slope between :data:`SIM_SIZES` rounds, values checked."""
    from measurements.probe import simulated_slope

    return simulated_slope(spec, _builder(kw), SIM_SIZES)


def simulate_into(path: str) -> None:
    from measurements.probe import add_simulated_per_op

    entries = next((e for name, e in RECORDS.values() if path.endswith(name)), ENTRIES)
    add_simulated_per_op(path, entries, lambda spec, key, kw: simulated_cycles(spec, kw),
                         width=24)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/body_probe.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
