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
    """``pipes.chain_latency``'s chain run by ``warps`` warps of one CTA, each link's value
    stored when ``store`` (a checked :class:`Microbench`; see ``chain_latency``). With one warp
    and no store the kernel is ``chain_latency``'s own (a test compares the two)."""
    from kernels_ir.kernels.microbench.pipes import chain_latency

    return chain_latency(rounds, op, chain, warps=warps, store=store)


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
