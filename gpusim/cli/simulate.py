"""``gpusim simulate``: cycle-approximate simulation of the persistent RNN kernel on a GPU spec.

Prints total cycles and time, per-step time, the breakdown (issue, shared memory, waiting for
data, barrier), shared-memory wavefronts and bank conflicts, L2 transactions by kind and the
error of the simulated values against the float64 reference. ``--sample-steps K`` simulates K
steps and extrapolates the rest from the steady state (both figures are reported).
"""

from __future__ import annotations

import argparse

from .common import (
    add_cell_arguments,
    add_kernel_arguments,
    add_layer_arguments,
    add_output_arguments,
    check_plot_path,
    emit_json,
    positive_int,
    show_progress,
)

__all__ = ["add_arguments", "main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p)
    add_kernel_arguments(p)
    p.add_argument("--dense", action="store_true", help="the dense persistent kernel")
    add_cell_arguments(p)
    p.add_argument("--heads", type=int, default=1, metavar="H",
                   help="independent recurrences (block-diagonal U, heads of N/H units; H must "
                   "divide N); when a CTA holds whole heads, h is exchanged inside it "
                   "with no grid-wide sync")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=None,
                   metavar="K", help="simulate K steps in full and extrapolate the rest")
    add_output_arguments(p, plot="a per-SM timeline of the steps (stacked breakdown)",
                         progress=True)


def main(args) -> int:
    from gpusim.api import simulate
    from kernels_ir.kernels.sparse_rnn import check_values

    check_plot_path(args)
    sim = simulate(args.gpu, hidden=args.hidden, batch=args.batch, density=args.density,
                   timesteps=args.timesteps, seed=args.seed, sync=args.sync,
                   wide_loads=args.wide_loads, layout=args.layout, dense=args.dense,
                   sample_steps=args.sample_steps, progress=show_progress(args), cell=args.cell,
                   heads=args.heads, dtype=args.dtype)
    res, wall = sim.result, sim.wall_s
    if args.plot:
        from gpusim.plots.timeline import plot_timeline

        plot_timeline(res, args.plot)
    if args.json:
        emit_json(sim.to_dict())
        return check_values(res.max_rel_err, res.kernel)
    b = res.breakdown["total"]
    cell = ("" if args.cell == "rnn" else f" cell={args.cell}") + \
        ("" if args.dtype == "fp32" else f" dtype={args.dtype}")
    print(f"{res.kernel} on {res.gpu}: N={args.hidden} B={args.batch} density={args.density} "
          f"T={args.timesteps}{cell}, {sim.ctas} CTAs x {sim.threads_per_cta} threads")
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
    if sim.heads > 1:
        print(f"  note: {sim.heads_note}")
    print(f"  max_rel_err vs float64 reference: {res.max_rel_err:.3e}")
    print(f"  wall time: {wall:.2f} s ({res.warp_instructions:,} warp-instructions)")
    return check_values(res.max_rel_err, res.kernel)
