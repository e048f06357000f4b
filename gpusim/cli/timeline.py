"""``gpusim timeline``: simulate the barrier and the Lamport variant of one layer, side by side.

Both kernels are built for the same layer (same weights, inputs, layout and loads) and simulated
for the first ``--sample-steps`` steps of the time loop; the rest is extrapolated by the
simulator from the steady state. Prints the per-step time, the breakdown per step and the L2
traffic of each, and with ``--plot`` draws the per-SM timelines (``gpusim.plots.sync``).
"""

from __future__ import annotations

import argparse
import dataclasses

from .common import (
    add_layer_arguments,
    add_output_arguments,
    check_layer_fits,
    emit_json,
    positive_int,
    show_progress,
)

__all__ = ["add_arguments", "main", "simulate_both"]

SYNCS = ("barrier", "lamport")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p)
    p.add_argument("--wide-loads", action=argparse.BooleanOptionalAction, default=True,
                   help="one 64/128-bit shared load per nonzero instead of B 32-bit loads")
    p.add_argument("--layout", choices=("naive", "random", "greedy", "optimal"),
                   default="optimal", help="order of each row's nonzeros over (lane, slot)")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=4,
                   help="steps simulated in full (the rest extrapolated)")
    p.add_argument("--sms", type=positive_int("sms"), default=None,
                   help="shrink the GPU to this many SMs (default: the spec's count)")
    add_output_arguments(p, plot="both per-SM timelines side by side", progress=True)


def simulate_both(spec, layer, *, wide_loads: bool = True, layout: str = "optimal",
                  sample_steps: int = 4, seed: int = 0, progress: bool = False) -> dict:
    """``{"barrier": SimResult, "lamport": SimResult}`` for one layer, values checked."""
    from gpusim.engine import simulate
    from gpusim.pricing import PERSISTENT_L2_WARM
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, max_rel_err

    out = {}
    for sync in SYNCS:
        prog = build_sparse_rnn(layer, spec, sync=sync, wide_loads=wide_loads, layout=layout,
                                seed=seed)
        res = simulate(prog.kernel, prog.inputs, spec, sample_steps=sample_steps,
                       progress=progress, l2_warm=PERSISTENT_L2_WARM)
        k = res.steps + 1
        out[sync] = res.with_error(max_rel_err(prog.outputs(res.globals)[:k],
                                               prog.reference()[:k]))
    return out


def main(args) -> int:
    from gpusim.specs import load_spec
    from kernels_ir.errors import InputError
    from kernels_ir.kernels.sparse_rnn import make_layer

    if args.plot:
        from gpusim.plots.style import check_png_path

        check_png_path(args.plot)
    spec = load_spec(args.gpu)
    if args.sms is not None:
        if args.sms > spec.sm_count:
            raise InputError(f"sms={args.sms} is more than the {spec.sm_count} SMs of "
                             f"{spec.name}")
        spec = dataclasses.replace(spec, sm_count=args.sms)
    check_layer_fits(spec, args)
    layer = make_layer(args.hidden, args.batch, args.density, args.timesteps, args.seed)
    results = simulate_both(spec, layer, wide_loads=args.wide_loads, layout=args.layout,
                            sample_steps=args.sample_steps, seed=args.seed,
                            progress=show_progress(args))
    from gpusim.validate import require_values

    for name, r in results.items():  # a wrong value is never reported as a success
        require_values(r.max_rel_err, f"{r.kernel} ({name})")
    if args.plot:
        from gpusim.plots.style import save_png
        from gpusim.plots.sync import plot_sync_comparison

        title = (f"barrier vs Lamport on {spec.name} ({spec.sm_count} SMs): N={args.hidden} "
                 f"B={args.batch} density={args.density}, layout {args.layout}, "
                 f"{'wide' if args.wide_loads else '32-bit'} loads")
        save_png(plot_sync_comparison(results, title=title), args.plot)
    b, lam = results["barrier"], results["lamport"]
    if args.json:
        out = {name: r.to_json() for name, r in results.items()}
        out["speedup_lamport_over_barrier"] = b.per_step_s / lam.per_step_s
        if args.plot:
            out["plot"] = args.plot
        emit_json(out)
        return 0
    print(f"N={args.hidden} B={args.batch} density={args.density} T={args.timesteps} on "
          f"{spec.name} ({spec.sm_count} SMs), layout {args.layout}; simulated "
          f"{b.steps} of {b.total_steps} steps")
    for name, r in results.items():
        per = r.breakdown["per_step"][-1]
        l2 = r.l2_transactions
        print(f"  {name:<8} {r.per_step_s * 1e6:7.3f} us/step; last step per SM (cycles): "
              + ", ".join(f"{k} {v:,.0f}" for k, v in per.items()))
        print(f"  {'':<8} L2: data {l2.get('data', 0):,}, poll {l2.get('poll', 0):,}, "
              f"atomic {l2.get('atomic', 0):,}, store {l2.get('store', 0):,}; "
              f"max_rel_err {r.max_rel_err:.2e}")
    print(f"  Lamport is {b.per_step_s / lam.per_step_s:.2f}x the barrier's speed per step")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
