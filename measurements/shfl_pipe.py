"""How many warp shuffles an SM issues a cycle, and what they share: one device call, or the
simulator.

    PYTHONPATH=. python3 measurements/shfl_pipe.py --out $OUT      # GPU (writes shfl_pipe.json)
    python measurements/shfl_pipe.py --simulate measurements/h100/shfl_pipe.json
    python measurements/shfl_pipe.py --report measurements/h100/shfl_pipe.json
    CHAINS=1 PYTHONPATH=. python3 measurements/shfl_pipe.py --out $OUT  # h200/shfl_pipe_chains.json

Why: the kernels reduce every row over the warp with ``B`` butterfly chains of five
``SHFL.BFLY`` + ``FADD`` links (the LSTM of 128 heads at batch 8 issues 640 shuffles per warp
and step, a third of its instructions), and the simulator lets each of an SM's four
sub-partitions issue one shuffle a cycle. Nsight Compute's documentation puts shuffles on the
LSU pipe, which hands instructions to the SM's L1TEX unit (shared memory's path), and NVIDIA's
engineers describe that pipe as taking one instruction a cycle per SM, not per sub-partition.
Which is right is a matter of rate, so this probe measures it: ``shfl_tput_*``
(:func:`kernels_ir.kernels.microbench.pipes.shfl_throughput`), 132 CTAs (one per SM) of 1 to 32
warps, each warp keeping 8 independent chains of 10 links a round:

- ``shfl_tput_wN``: shuffles alone (N warps per SM);
- ``_red``: the kernels' reduction step (shuffle, then add);
- ``_lds``: each shuffle beside a conflict-free 32-bit shared load (one wavefront);
- ``_lds_only``: the shared loads alone (the control of ``_lds``);
- ``_ffma``: each shuffle beside an FFMA (a pipe of its own: the control).

Cost per round = slope of the medians between 100 and 1000 rounds (11 repeats after 2
warm-ups); values checked on the first launch. ``--simulate`` adds the simulator's cycles per
round (two CTAs: the SMs share nothing here, so two stand for 132). ``--report`` prints, per
benchmark, the cycles per round on the GPU (at the spec's clock) and in the simulator, and the
cycles per warp-instruction of the SM's shuffle / shared-load stream.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WARPS = (1, 2, 4, 8, 16, 32)
MIXED = tuple(f"shfl_tput_w{w}_{m}" for m in ("red", "lds", "lds_only", "ffma")
              for w in (4, 8, 16))
NAMES = tuple(f"shfl_tput_w{w}" for w in WARPS) + MIXED
SIZES, SIM_SIZES = (100, 1000), (2, 4)
SIM_ARGS = {"ctas": 2}


# ``CHAINS=1``: how a warp's independent chains share its issue (record ``shfl_pipe_chains.json``):
# 1, 2 or 4 warps an SM, each keeping 1, 2, 4 or 8 chains of the kernels' reduction step
# (shuffle, then add) or of shuffles alone; where the engine, issuing in ptxas's interleaved
# order, prices the 4-warp reduction of 8 chains 8.5% fast and bodies whose rows' reductions
# interleave up to 22% fast
CHAIN_ENTRIES = tuple(
    (f"shfl_tput_w{w}_c{c}" + ("" if m == "none" else f"_{m}"),
     {"warps": w, "chains": c, "mix": m})
    for m in ("red", "none") for w in (1, 2, 4) for c in (1, 2, 4, 8)
    if m == "red" or w == 1)


def _chain_builder(kw: dict):
    from kernels_ir.kernels.microbench.pipes import shfl_throughput

    return lambda rounds: shfl_throughput(rounds=rounds, **kw)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_microbenches

    if os.environ.get("CHAINS"):
        return record_microbenches(out, argv, "shfl_pipe_chains.json",
                                   [(key, key, SIZES, {}, _chain_builder(kw))
                                    for key, kw in CHAIN_ENTRIES])
    return record_microbenches(out, argv, "shfl_pipe.json",
                               [(name, name, SIZES, {}) for name in NAMES])


def simulate_into(path: str) -> None:
    from measurements.probe import add_simulated_per_op, simulate_microbenches, simulated_slope

    if path.endswith("shfl_pipe_chains.json"):
        add_simulated_per_op(path, CHAIN_ENTRIES, lambda spec, key, kw: simulated_slope(
            spec, _chain_builder({**kw, **SIM_ARGS}), SIM_SIZES), gpu="h200", width=28)
        return
    simulate_microbenches(path, [(name, name, SIM_SIZES, SIM_ARGS) for name in NAMES])


def stream(name: str) -> tuple[int, int]:
    """(shuffles, shared loads) one SM issues per round of ``name``."""
    from kernels_ir.kernels import microbench as mb

    p = mb.build(name, 1).params
    per_warp = p["chains"] * p["chain"] * p["warps"]
    return (0 if p["mix"] == "lds_only" else per_warp,
            per_warp if p["mix"] in ("lds", "lds_only") else 0)


def report(path: str) -> list[dict]:
    """Per benchmark: GPU and simulated cycles per round, and cycles per instruction of the
    SM's shuffle + shared-load stream."""
    from gpusim.specs import load_spec

    rec = json.load(open(path))
    clock = load_spec("h100").clock_hz
    sim = rec.get("simulated", {}).get("results", {})
    rows = []
    for name in NAMES:
        r = rec["results"].get(name, {})
        if r.get("status") != "ok":
            continue
        shfl, lds = stream(name)
        gpu = r["per_op_s"] * clock
        s = sim.get(name, {}).get("per_op_cycles")
        rows.append({"name": name, "gpu_cycles": gpu, "sim_cycles": s, "shfl": shfl, "lds": lds,
                     "gpu_per_instr": gpu / (shfl + lds),
                     "sim_per_instr": s / (shfl + lds) if s else None})
        print(f"{name:24s} GPU {gpu:8.1f}  sim {s if s else float('nan'):8.1f} cycles/round;"
              f"  {shfl:5d} SHFL + {lds:5d} LDS per SM: GPU {gpu / (shfl + lds):5.2f}"
              f" sim {(s or float('nan')) / (shfl + lds):5.2f} cycles each", flush=True)
    return rows


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/shfl_pipe.py", measure, simulate_into,
                      report=report)


if __name__ == "__main__":
    raise SystemExit(main())
