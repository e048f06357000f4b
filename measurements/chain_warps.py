"""A dependent chain's cost per link when several warps of one SM run it side by side: the tanh
chain of ``pipes.py`` (and the FFMA, shuffle and exp chains as controls) with 1, 2, 4, 8 and 16
warps in one CTA. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/chain_warps.py --out $OUT    # GPU (chain_warps.json)
    python measurements/chain_warps.py --simulate measurements/h200/chain_warps.json
    STORE=1 PYTHONPATH=. python3 measurements/chain_warps.py --out $OUT   # chain_store.json

Why: inside the barrier kernel (``h200/barrier_trace.json``) a row's tanh costs the GPU 40-57
ns on the step's critical path at batch 4 with one row a warp (102-116 ns at batch 2 with two
rows), against 34 ns for a lone warp's dependent ``tanhf`` (``h100/pipes.json``) and the
simulator's 32 ns, and there every warp of the SM reaches its tanh at about the same moment. A
lone warp's chain cannot show what its neighbours cost it. Each
benchmark is :func:`chain`: ``pipes.chain_latency``'s chain with ``warps`` warps (warp ``w`` on
scheduler ``w % 4``), all running the same chain, so a link's cost is the chain's latency with
that many warps beside it. Cost per link = slope of the medians between
200 and 2000 rounds of 32 links (11 repeats).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WARPS = (1, 2, 4, 8, 16)
SIM_OPS = 2      # cycles a link from the simulator's slope between 2 and 4 rounds


def chain(rounds: int = 8, op: str = "ffma", chain: int = 32, warps: int = 1,
          store: bool = False):
    """``pipes.chain_latency``'s chain (the same IR with one warp) run by ``warps`` warps of one
    CTA (``{op}_latency_w{warps}``, warp ``w`` on scheduler ``w % 4``), all from the same lane
    values, so a link's cost is its latency with that many warps beside it. ``store`` (the float
    chains, suffix ``_st``): every link ends with a global store of its value (link ``k`` of a
    round to slot ``k`` of a log buffer), as a kernel's epilogue stores its tanh; the next link
    still depends only on the value. A checked :class:`Microbench`.

    The IR is built here, not by ``chain_latency`` itself: that module is among the sources the
    model fingerprint covers, and a probe's extra forms must not change the fingerprint. With
    one warp and no store the kernel is ``chain_latency``'s own (a test compares the two)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.kernels.microbench.pipes import (
        _A,
        _B,
        _C,
        _FN_A,
        _M,
        CHAIN_OPS,
        _out_dtype,
        _positive,
        _reference,
    )
    from kernels_ir.verify import verify

    rounds, chain, warps = (_positive(n, v) for n, v in
                            (("rounds", rounds), ("chain", chain), ("warps", warps)))
    if op not in CHAIN_OPS:
        raise InputError(f"op={op!r}: accepted {', '.join(CHAIN_OPS)}")
    if warps > 32:
        raise InputError(f"warps={warps!r}: accepted 1 to 32 (one CTA)")
    if store and op in ("imad", "shfl"):
        raise InputError(f"store=True with op={op!r}: accepted with the float chains only")
    name = f"{op}_latency" + (f"_w{warps}" if warps > 1 else "") + ("_st" if store else "")
    w32 = 32
    b = Builder(f"mb_{name}", grid=1, block=w32 * warps, bench=name, rounds=rounds)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    where = b.sreg("tid", dst=b.reg(I32, "tid")) if warps > 1 else lane
    zero = b.mov(0, I32, dst=b.reg(I32, "zero"))
    if op in ("imad", "shfl"):
        g_k = b.global_buffer("k", I32, 2)
        g_out = b.global_buffer("out", I32, w32 * warps, role="out")
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
        g_out = b.global_buffer("out", F32, w32 * warps, role="out")
        a_ = b.ldg(g_k, zero, dst=b.reg(F32, "a"))
        b_ = b.ldg(g_k, zero, offset=1, dst=b.reg(F32, "b"))
        v = b.i2f(lane, dst=b.reg(F32, "v"))
        b.fmul(v, 1.0 / 64.0, dst=v)
        fn = {"tanh": b.tanh, "exp": b.exp, "sigmoid": b.sigmoid}.get(op)
        g_log = b.global_buffer("log", F32, chain * w32 * warps, role="out") if store else None
        with b.loop("r", 0, rounds):
            for k in range(chain):
                b.ffma(v, a_, b_, dst=v)
                if fn is not None:
                    fn(v, dst=v)
                if store:
                    b.stg(g_log, where, v, offset=k * w32 * warps)
        k_in = np.array((_A, _B) if op == "ffma" else _FN_A[op], np.float32)
    b.stg(g_out, where, v)
    kernel = verify(b.build())
    expect = np.tile(_reference(op, rounds * chain, chain), warps)

    def check(g) -> bool:
        got = np.asarray(g["out"])
        if op in ("imad", "shfl"):
            return bool(np.array_equal(got.astype(np.int32), expect))
        return bool(np.allclose(got, expect, rtol=1e-4, atol=1e-5))

    inputs = {"k": k_in, "out": np.zeros(w32 * warps, _out_dtype(op))}
    if store:
        inputs["log"] = np.zeros(chain * w32 * warps, np.float32)
    params = {"rounds": rounds, "op": op, "chain": chain} | (
        {"warps": warps} if warps > 1 else {}) | ({"store": True} if store else {})
    return Microbench(name, kernel, inputs, rounds * chain, f"one dependent {op} link" + (
        f", {warps} warps side by side" if warps > 1 else "") + (
        ", each link's value stored" if store else ""), params, check)


def _builder(name: str, kw: dict):
    """``chain`` for an entry's benchmark name (``<op>_latency``) and arguments."""
    return lambda rounds: chain(rounds, op=name.removesuffix("_latency"), **kw)
ENTRIES = tuple((f"tanh_w{w}", "tanh_latency", {"warps": w}) for w in WARPS) + tuple(
    (f"{op}_w{w}", f"{op}_latency", {"warps": w}) for op in ("exp", "ffma", "shfl")
    for w in (1, 8))
# ``STORE=1``: the tanh and FFMA chains with every link's value stored (``chain(store=True)``),
# as a kernel's epilogue stores its tanh (record ``chain_store.json``)
STORE_ENTRIES = tuple((f"{op}_w{w}{s}", f"{op}_latency", {"warps": w} | (
    {"store": True} if s else {})) for op in ("tanh", "ffma") for w in (1, 8) for s in ("", "_st"))
SIZES, SIM_SIZES = (200, 2000), (2, 4)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, _record(), [(key, name, SIZES, kw, _builder(name, kw))
                                                      for key, name, kw in _entries()])


def _entries():
    return STORE_ENTRIES if os.environ.get("STORE") else ENTRIES


def _record() -> str:
    return "chain_store.json" if os.environ.get("STORE") else "chain_warps.json"


def simulated_cycles(spec, name: str, kw: dict) -> float:
    """The simulator's cycles a link: the slope between 2 and 4 rounds, values checked."""
    from measurements.probe import simulated_slope

    return simulated_slope(spec, _builder(name, kw), (SIM_OPS, 2 * SIM_OPS))


def simulate_into(path: str) -> None:
    from measurements.probe import add_simulated_per_op

    entries = STORE_ENTRIES if path.endswith("chain_store.json") else ENTRIES
    name = {key: n for key, n, _ in entries}
    add_simulated_per_op(path, [(key, kw) for key, _, kw in entries],
                         lambda spec, key, kw: simulated_cycles(spec, name[key], kw))


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/chain_warps.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
