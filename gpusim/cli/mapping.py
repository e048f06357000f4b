"""``gpusim mapping``: where every weight of a layer lives (SM, warp, lane, register slot)."""

from __future__ import annotations

import argparse

from .common import add_layer_arguments, add_output_arguments, check_nnz, emit_json, positive_int

LAYOUTS = ("naive", "random", "greedy", "optimal")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p, timesteps=False)
    p.add_argument("--wide-loads", action=argparse.BooleanOptionalAction, default=True,
                   help="one 64/128-bit shared load per nonzero instead of B 32-bit loads")
    p.add_argument("--layout", choices=LAYOUTS, default="naive",
                   help="order of each row's nonzeros over (lane, slot)")
    p.add_argument("--threads-per-cta", type=positive_int("threads-per-cta"), default=256,
                   help="threads per CTA (one CTA per SM); 256 = 8 warps")
    p.add_argument("--warp", type=int, default=0,
                   help="global warp (SM x warps_per_cta + warp) drawn in the lane grid")
    add_output_arguments(p, plot="the mapping diagram")


def build(args):
    """(spec, mapping) for the parsed arguments; every bad value raises an InputError."""
    import numpy as np

    from gpusim.specs import load_spec
    from kernels_ir.errors import InputError
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_sparse

    spec = load_spec(args.gpu)
    threads = args.threads_per_cta
    if threads % 32 or threads > spec.max_threads_per_cta:
        raise InputError(f"threads-per-cta={threads} must be a multiple of 32 in "
                         f"32..{spec.max_threads_per_cta}")
    U = random_sparse(args.hidden, args.hidden, args.density, np.random.default_rng(args.seed))
    m = map_matrix(U, n_ctas=spec.sm_count, warps_per_cta=threads // 32, batch=args.batch,
                   wide_loads=args.wide_loads, layout=args.layout, seed=args.seed)
    if not 0 <= args.warp < m.n_warps:
        raise InputError(f"warp={args.warp} is outside 0..{m.n_warps - 1} ({m.n_ctas} SMs x "
                         f"{m.warps_per_cta} warps)")
    return spec, m


def main(args) -> int:
    from gpusim.plots.mapping import mapping_summary, plot_mapping
    from gpusim.plots.style import save_png

    if args.plot:
        from gpusim.plots.style import check_png_path

        check_png_path(args.plot)
    check_nnz(args.hidden, args.density)
    spec, m = build(args)
    summary = mapping_summary(m, batch=args.batch, wide_loads=args.wide_loads, spec=spec,
                              threads_per_cta=args.threads_per_cta)
    summary["config"] = {"gpu": args.gpu, "hidden": args.hidden, "density": args.density,
                         "batch": args.batch, "wide_loads": args.wide_loads,
                         "layout": args.layout, "seed": args.seed}
    if args.plot:
        save_png(plot_mapping(m, batch=args.batch, wide_loads=args.wide_loads, warp=args.warp),
                 args.plot)
    if args.json:
        if args.plot:
            summary["plot"] = args.plot
        emit_json(summary)
        return 0
    s = summary
    print(f"U {s['n_rows']} x {s['n_cols']}, {s['nonzeros']} nonzeros (density {args.density}) "
          f"on {spec.name}: {s['ctas']} SMs x {s['warps_per_cta']} warps = {s['warps']} warps, "
          f"layout {s['layout']}")
    held = ", ".join(f"{v} warps hold {k} row{'s' if k != 1 else ''}"
                     for k, v in s["warps_by_rows_held"].items())
    print(f"rows per warp: up to {s['rows_per_warp']} ({held})")
    print(f"K_j per row-slot: {s['slots_per_row_slot']} -> {s['total_slots']} slots, "
          f"{s['register_slots_per_warp']} (value, column) pairs per warp")
    nz = s["nonzeros_per_warp"]
    print(f"nonzeros per warp: min {nz['min']}, mean {nz['mean']:.1f}, max {nz['max']}; "
          f"padding {100 * s['padding_fraction']:.1f}% of the register pairs")
    print(f"shared loads per slot: {', '.join(s['loads_per_slot'])}; wavefronts per warp and "
          f"step {s['wavefronts_per_step_per_warp']['min']}.."
          f"{s['wavefronts_per_step_per_warp']['max']}")
    fits = "fits" if s["fits_registers"] else "DOES NOT FIT"
    print(f"registers/thread: {s['registers_per_thread']} of {s['register_budget']} "
          f"({fits}; {s['threads_per_cta']} threads/CTA); h in shared memory: "
          f"{s['h_shared_bytes']} bytes")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
