"""A dependent chain's cost per link when several warps of one SM run it side by side: the tanh
chain of ``pipes.py`` (and the FFMA, shuffle and exp chains as controls) with 1, 2, 4, 8 and 16
warps in one CTA. One device call, or the simulator.

    PYTHONPATH=. python3 measurements/chain_warps.py --out $OUT    # GPU (chain_warps.json)
    python measurements/chain_warps.py --simulate measurements/h200/chain_warps.json
    STORE=1 PYTHONPATH=. python3 measurements/chain_warps.py --out $OUT   # chain_store.json

Why: inside the barrier and Lamport kernels (``h200/barrier_trace.json``) a row's tanh costs the
GPU 40-57 ns on the step's critical path, against 34 ns for a lone warp's dependent ``tanhf``
(``h100/pipes.json``) and the simulator's 32 ns, and there every warp of the SM reaches its tanh
at about the same moment. A lone warp's chain cannot show what its neighbours cost it. Each
benchmark is :func:`kernels_ir.kernels.microbench.pipes.chain_latency` with ``warps`` warps
(warp ``w`` on scheduler ``w % 4``), all running the same chain, so a link's cost is the
chain's latency with that many warps beside it. Cost per link = slope of the medians between
200 and 2000 rounds of 32 links (11 repeats).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WARPS = (1, 2, 4, 8, 16)
ENTRIES = tuple((f"tanh_w{w}", "tanh_latency", {"warps": w}) for w in WARPS) + tuple(
    (f"{op}_w{w}", f"{op}_latency", {"warps": w}) for op in ("exp", "ffma", "shfl")
    for w in (1, 8))
# ``STORE=1``: the tanh and FFMA chains with every link's value stored (``chain_latency``'s
# ``store``), as a kernel's epilogue stores its tanh (record ``chain_store.json``)
STORE_ENTRIES = tuple((f"{op}_w{w}{s}", f"{op}_latency", {"warps": w} | (
    {"store": True} if s else {})) for op in ("tanh", "ffma") for w in (1, 8) for s in ("", "_st"))
SIZES, SIM_SIZES = (200, 2000), (2, 4)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, _record(), [(key, name, SIZES, kw)
                                                      for key, name, kw in _entries()])


def _entries():
    return STORE_ENTRIES if os.environ.get("STORE") else ENTRIES


def _record() -> str:
    return "chain_store.json" if os.environ.get("STORE") else "chain_warps.json"


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_microbenches

    entries = STORE_ENTRIES if path.endswith("chain_store.json") else ENTRIES
    simulate_microbenches(path, [(key, name, SIM_SIZES, kw) for key, name, kw in entries],
                          gpu="h200")


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/chain_warps.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
