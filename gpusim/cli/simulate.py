"""``gpusim simulate``: cycle-approximate simulation of the persistent RNN kernel on a GPU spec.

Prints total cycles and time, per-step time, the breakdown (issue, shared memory, waiting for
data, barrier), shared-memory wavefronts and bank conflicts, L2 transactions by kind and the
error of the simulated values against the float64 reference. ``--sample-steps K`` simulates K
steps and extrapolates the rest from the steady state (both figures are reported).
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import add_kernel_arguments, add_layer_arguments, emit_json, positive_int

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p)
    add_kernel_arguments(p)
    p.add_argument("--dense", action="store_true", help="the dense persistent kernel")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=None,
                   metavar="K", help="simulate K steps in full and extrapolate the rest")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="write a per-SM timeline of the steps (stacked breakdown)")
    p.add_argument("--progress", action="store_true",
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def main(args) -> int:
    from gpusim.engine import simulate

    from .run import build_program

    t0 = time.perf_counter()
    steps = args.timesteps
    if args.sample_steps is not None:
        steps = min(args.sample_steps, args.timesteps)
    spec, prog = build_program(args)
    progress = args.progress or sys.stderr.isatty()
    res = simulate(prog.kernel, prog.inputs, spec, sample_steps=args.sample_steps,
                   progress=progress)
    H = prog.outputs(res.globals)[: steps + 1]
    from kernels_ir.kernels.sparse_rnn import max_rel_err

    res = res.with_error(max_rel_err(H, prog.reference()[: steps + 1]))
    wall = time.perf_counter() - t0
    if args.plot:
        from gpusim.plots.timeline import plot_timeline

        plot_timeline(res, args.plot)
    out = res.to_json()
    out["wall_s"] = wall
    if args.json:
        emit_json(out)
        from kernels_ir.kernels.sparse_rnn import check_values

        return check_values(res.max_rel_err, res.kernel)
    b = res.breakdown["total"]
    print(f"{res.kernel} on {res.gpu}: N={args.hidden} B={args.batch} density={args.density} "
          f"T={args.timesteps}, {prog.kernel.grid} CTAs x {prog.kernel.block} threads")
    if res.extrapolated:
        print(f"  simulated {res.steps} of {res.total_steps} steps: {res.simulated_cycles:,.0f} "
              f"cycles; extrapolated total {res.cycles:,.0f} cycles")
    else:
        print(f"  cycles: {res.cycles:,.0f}")
    print(f"  time: {res.time_s * 1e6:,.2f} us (incl. launch {res.launch_overhead_s * 1e6:.2f} "
          f"us); per step {res.per_step_s * 1e6:.3f} us")
    print("  breakdown per SM (cycles): " + ", ".join(f"{k} {v:,.0f}" for k, v in b.items()))
    print(f"  shared memory: {res.smem_wavefronts['total']:,} wavefronts, "
          f"{res.bank_conflicts['total']:,} bank conflicts")
    print("  L2 transactions: " + ", ".join(f"{k} {v:,}" for k, v in
                                           res.l2_transactions.items()))
    print(f"  max_rel_err vs float64 reference: {res.max_rel_err:.3e}")
    print(f"  wall time: {wall:.2f} s ({res.warp_instructions:,} warp-instructions)")
    from kernels_ir.kernels.sparse_rnn import check_values

    return check_values(res.max_rel_err, res.kernel)
