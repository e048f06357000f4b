"""Do warp shuffles, shared loads and global loads that hit L1 share one unit of the SM? One
device call, or the simulator.

    PYTHONPATH=. python3 measurements/data_pipe_share.py --out $OUT   # GPU (data_pipe_share.json)
    python measurements/data_pipe_share.py --simulate measurements/h200/data_pipe_share.json
    python measurements/data_pipe_share.py --report measurements/h200/data_pipe_share.json

Why: at batch 8 the CSR kernel's step on the H200 ends 18-29% later on the SMs that hold one
CTA more (``h200/csr_trace_batch8.json``), so something of each SM's own sets it; Nsight puts
L1TEX near its peak there and counts every warp shuffle as a data-pipe wavefront. The engine
serves a global load's returning data (its bank wavefronts) in a stage of its own, apart from
the unit the shuffles and shared loads share (``h100/shfl_pipe.json``: a shuffle and a shared
load cost the sum). If the returns share that unit, a warp's gathers and its reduction's
shuffles add up per SM.

The benchmarks are :func:`kernels_ir.kernels.microbench.pipes.shfl_throughput`'s: 132 CTAs of 8
or 16 warps, 8 independent chains of 10 links a round; per link and chain

- ``shfl_tput_wN``: a shuffle alone; ``_lds_only``: a conflict-free shared load alone;
- ``_ldgL_only``: a 32-bit global load that hits L1, its lanes on ``L`` lines (``L``
  data-stage wavefronts by the bank rule, ``L`` lines of the tag stage);
- ``_ldgL``: the shuffle and that global load;
- ``_lds_ldgL``: the shared load and that global load, no shuffle.

One unit: the mixes cost the sum of their parts (8 + 8 L cycles a link per warp for ``_ldgL``);
separate stages: about the larger part. Cost per round = slope of the medians between 100 and
1000 rounds (11 repeats after 2 warm-ups); values checked on the first launch. ``--report``
prints the GPU's and the simulator's cycles per round beside the sum and the larger of the
parts.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WARPS = (8, 16)
LINES = (1, 2, 4, 8)
SIZES, SIM_SIZES = (100, 1000), (40, 48)   # the simulator past the window's wrap (32 rounds)
SIM_ARGS = {"ctas": 2}


def _entries() -> tuple:
    """(key, builder arguments) of every benchmark."""
    out = []
    for w in WARPS:
        out.append((f"shfl_tput_w{w}", {"warps": w, "mix": "none"}))
        out.append((f"shfl_tput_w{w}_lds_only", {"warps": w, "mix": "lds_only"}))
        for n in LINES:
            out.append((f"shfl_tput_w{w}_ldg{n}_only", {"warps": w, "mix": "ldg_only", "lines": n}))
            out.append((f"shfl_tput_w{w}_ldg{n}", {"warps": w, "mix": "ldg", "lines": n}))
        out.append((f"shfl_tput_w{w}_lds_ldg4", {"warps": w, "mix": "lds_ldg", "lines": 4}))
    return tuple(out)


ENTRIES = _entries()


def _builder(kw: dict):
    from kernels_ir.kernels.microbench.pipes import shfl_throughput

    return lambda rounds: shfl_throughput(rounds=rounds, **kw)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    return record_microbenches(out, argv, "data_pipe_share.json",
                               [(key, key, SIZES, {}, _builder(kw)) for key, kw in ENTRIES])


def simulate_into(path: str) -> None:
    from measurements.probe import add_simulated_per_op, simulated_slope

    add_simulated_per_op(path, ENTRIES, lambda spec, key, kw: simulated_slope(
        spec, _builder({**kw, **SIM_ARGS}), SIM_SIZES), gpu="h200", width=28)


def parts(key: str) -> tuple[str, ...]:
    """The single-kind benchmarks whose costs a mix would add (one unit) or overlap: for
    ``ldg`` the shuffles alone and the global load alone, for ``lds_ldg`` the shared load alone
    and the global load alone; none for a single kind."""
    kw = dict(ENTRIES)[key]
    base = f"shfl_tput_w{kw['warps']}"
    load = f"{base}_ldg{kw.get('lines')}_only"
    return {"ldg": (base, load), "lds_ldg": (f"{base}_lds_only", load)}.get(kw["mix"], ())


def report(path: str) -> list[dict]:
    """Per benchmark: GPU and simulated cycles per round, and for a mix the sum and the larger
    of its parts' GPU cycles."""
    from gpusim.specs import load_spec

    rec = json.load(open(path))
    clock = load_spec("h200").clock_hz
    sim = rec.get("simulated", {}).get("results", {})
    gpu = {k: r["per_op_s"] * clock for k, r in rec["results"].items() if r.get("status") == "ok"}
    rows = []
    for key, _ in ENTRIES:
        if key not in gpu:
            continue
        p = [gpu.get(k) for k in parts(key)]
        both = p and None not in p
        row = {"name": key, "gpu_cycles": gpu[key],
               "sim_cycles": sim.get(key, {}).get("per_op_cycles"),
               "sum_of_parts": sum(p) if both else None, "max_of_parts": max(p) if both else None}
        rows.append(row)
        extra = (f"  parts: sum {row['sum_of_parts']:8.1f} max {row['max_of_parts']:8.1f}"
                 if both else "")
        print(f"{key:28s} GPU {gpu[key]:8.1f}  sim {row['sim_cycles'] or float('nan'):8.1f}"
              f" cycles/round{extra}", flush=True)
    return rows


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/data_pipe_share.py", measure, simulate_into,
                      report=report)


if __name__ == "__main__":
    raise SystemExit(main())
