"""Simulator throughput: simulated warp-instructions per second and wall time, per layer size.

Usage: ``python benchmarks/sim_throughput.py [--full] [--out benchmarks/sim_throughput.md]``.
Runs ``gpusim.engine.simulate`` on the sparse persistent kernel on the full V100 (80 SMs) for a
sweep of layers with ``--sample-steps`` and (``--full``) the full 256-step simulation of the
2304/4/0.3 layer, and writes a Markdown report with the machine (CPU model, Python and numpy
versions, date, load average as a measure of contention). ``simulate s`` is wall time, ``cpu s``
the CPU time of this process (``time.process_time``), and warp-instr/s is computed from the CPU
time so that it is comparable on a shared machine. Not a test: timings depend on the machine.

A layer whose weights do not fit the V100's registers under the kernel builder's own count
(2304/4/0.3 needs 256 registers/thread, one more than ``max_regs_per_thread``) is built with that
cap raised to ``regs_per_sm / threads`` and marked ``*``; the simulation itself uses the
unchanged spec (its launch check uses the liveness estimate, which fits).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import time
from pathlib import Path

import numpy as np
from _machine import cpu_model

SWEEP = [  # hidden, batch, density, timesteps, sample_steps, sync, wide
    (1152, 4, 0.1, 256, 4, "lamport", True),
    (2304, 4, 0.3, 256, 4, "lamport", True),
    (2304, 4, 0.3, 256, 4, "lamport", False),
    (2304, 4, 0.3, 256, 4, "barrier", True),
    (2304, 4, 0.3, 256, 4, "barrier", False),
    (3840, 4, 0.1, 256, 4, "lamport", True),   # 4096/4/0.1 no longer fits (276 registers)
]




def run_one(hidden, batch, density, steps, sample, sync, wide):
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    spec = load_spec("v100")
    t0 = time.perf_counter()
    layer = make_layer(hidden, batch, density, steps, 0)
    relaxed = False
    try:
        prog = build_sparse_rnn(layer, spec, sync=sync, wide_loads=wide)
    except CapacityError:
        cap = spec.regs_per_sm // 256   # the builder's default 256 threads/CTA
        prog = build_sparse_rnn(layer, dataclasses.replace(spec, max_regs_per_thread=cap),
                                sync=sync, wide_loads=wide)
        relaxed = True
    t1 = time.perf_counter()
    c1 = time.process_time()
    res = simulate(prog.kernel, prog.inputs, spec, sample_steps=sample)
    c2 = time.process_time()
    t2 = time.perf_counter()
    return {"layer": f"{hidden}/{batch}/{density}" + ("*" if relaxed else ""), "sync": sync,
            "wide": wide, "steps": f"{res.steps}/{res.total_steps}", "build_s": t1 - t0,
            "sim_s": t2 - t1, "cpu_s": c2 - c1, "winstr": res.warp_instructions,
            "winstr_per_s": res.warp_instructions / (c2 - c1),
            "per_step_us": res.per_step_s * 1e6, "cycles": res.cycles,
            "poll": res.l2_transactions["poll"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="also the full 256-step 2304/4/0.3 run")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    args = ap.parse_args()
    load0 = os.getloadavg()
    rows = [run_one(*cfg) for cfg in SWEEP]
    if args.full:
        rows.append(run_one(2304, 4, 0.3, 256, None, "lamport", True))
    load1 = os.getloadavg()
    lines = [
        "# Simulator throughput", "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {cpu_model()}, {platform.machine()}, {os.cpu_count()} cores, one process "
        "(numpy threads as default)",
        f"- load average (1 min) before / after: {load0[0]:.2f} / {load1[0]:.2f} "
        "(the machine is shared: wall times include waiting for a core, CPU times do not)",
        f"- python {platform.python_version()}, numpy {np.__version__}",
        "- GPU spec: v100 (80 SMs, 80 CTAs x 256 threads); kernel: sparse persistent RNN, "
        "layout naive; `*`: built with max_regs_per_thread raised (see the script's docstring)",
        "",
        "| layer N/B/density | sync | wide | steps sim/total | build s | simulate s | cpu s | "
        "warp-instr | warp-instr/s (cpu) | per step (us) | total cycles | poll txns |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['sync']} | {r['wide']} | {r['steps']} | "
                     f"{r['build_s']:.2f} | {r['sim_s']:.2f} | {r['cpu_s']:.2f} | "
                     f"{r['winstr']:,} | "
                     f"{r['winstr_per_s']:,.0f} | {r['per_step_us']:.3f} | {r['cycles']:,.0f} | "
                     f"{r['poll']:,} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    if "\n## Notes" in old:  # hand-written notes below the table survive a re-run
        text += old[old.index("\n## Notes"):]
    out.write_text(text)


if __name__ == "__main__":
    main()
