"""Simulator throughput: simulated warp-instructions per second and wall time, per layer size.

Usage: ``python benchmarks/sim_throughput.py [--full] [--out benchmarks/sim_throughput.md]``.
Runs ``gpusim.engine.simulate`` on the sparse persistent kernel on the full V100 (80 SMs) for a
sweep of layers with ``--sample-steps`` and (``--full``) the full 256-step simulation of the
2304/4/0.3 layer, and writes a Markdown report with the machine (CPU model, Python and numpy
versions, date). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from pathlib import Path

import numpy as np

SWEEP = [  # hidden, batch, density, timesteps, sample_steps, sync, wide
    (1152, 4, 0.1, 256, 4, "lamport", True),
    (2304, 4, 0.3, 256, 4, "lamport", True),
    (2304, 4, 0.3, 256, 4, "lamport", False),
    (2304, 4, 0.3, 256, 4, "barrier", True),
    (2304, 4, 0.3, 256, 4, "barrier", False),
    (4096, 4, 0.1, 256, 4, "lamport", True),
]


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_one(hidden, batch, density, steps, sample, sync, wide):
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    spec = load_spec("v100")
    t0 = time.perf_counter()
    prog = build_sparse_rnn(make_layer(hidden, batch, density, steps, 0), spec, sync=sync,
                            wide_loads=wide)
    t1 = time.perf_counter()
    res = simulate(prog.kernel, prog.inputs, spec, sample_steps=sample)
    t2 = time.perf_counter()
    return {"layer": f"{hidden}/{batch}/{density}", "sync": sync, "wide": wide,
            "steps": f"{res.steps}/{res.total_steps}", "build_s": t1 - t0, "sim_s": t2 - t1,
            "winstr": res.warp_instructions, "winstr_per_s": res.warp_instructions / (t2 - t1),
            "per_step_us": res.per_step_s * 1e6, "cycles": res.cycles,
            "poll": res.l2_transactions["poll"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="also the full 256-step 2304/4/0.3 run")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    args = ap.parse_args()
    rows = [run_one(*cfg) for cfg in SWEEP]
    if args.full:
        rows.append(run_one(2304, 4, 0.3, 256, None, "lamport", True))
    lines = [
        "# Simulator throughput", "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {_cpu()}, {platform.machine()}, one process (numpy threads as default)",
        f"- python {platform.python_version()}, numpy {np.__version__}",
        "- GPU spec: v100 (80 SMs, 80 CTAs x 256 threads); kernel: sparse persistent RNN, "
        "layout naive", "",
        "| layer N/B/density | sync | wide | steps sim/total | build s | simulate s | "
        "warp-instr | warp-instr/s | per step (us) | total cycles | poll txns |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['sync']} | {r['wide']} | {r['steps']} | "
                     f"{r['build_s']:.2f} | {r['sim_s']:.2f} | {r['winstr']:,} | "
                     f"{r['winstr_per_s']:,.0f} | {r['per_step_us']:.3f} | {r['cycles']:,.0f} | "
                     f"{r['poll']:,} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
