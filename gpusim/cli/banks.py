"""``gpusim banks``: shared-memory bank conflicts of a weight layout, against the lower bound.

The numbers come from :func:`gpusim.api.banks`; this command only formats them.
"""

from __future__ import annotations

import argparse

from .common import (
    HIDDEN_MAX,
    add_output_arguments,
    check_plot_path,
    density,
    emit_json,
    nonnegative_int,
    positive_int,
)

LAYOUT_CHOICES = ("naive", "random", "greedy", "optimal", "all")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default="v100", help="GPU spec name or .toml path: sets the SM (= CTA) "
                   "count")
    p.add_argument("--hidden", type=positive_int("hidden", HIDDEN_MAX), default=1152,
                   help="hidden size N")
    p.add_argument("--density", type=density, default=0.1, help="fraction of nonzero weights")
    p.add_argument("--batch", type=positive_int("batch"), default=4, help="batch size B")
    p.add_argument("--wide-loads", action=argparse.BooleanOptionalAction, default=True,
                   help="one 64/128-bit load per nonzero (B=1,2,4,8) instead of B 32-bit loads")
    p.add_argument("--load-bits", type=int, default=None,
                   help="check the shared load width (32, 64, 128) implied by batch/wide loads")
    p.add_argument("--layout", choices=LAYOUT_CHOICES, default="optimal",
                   help="order of each row's nonzeros over (lane, slot); 'all' compares them")
    p.add_argument("--mapping", choices=("spread", "row-per-lane"), default="spread",
                   help="a row over the 32 lanes of a warp (the kernel), or one row per lane")
    p.add_argument("--warps-per-cta", type=positive_int("warps-per-cta"), default=None,
                   help="warps per CTA (default: from the GPU spec)")
    p.add_argument("--seed", type=nonnegative_int("seed"), default=0,
                   help="seed of the random matrix and layout")
    add_output_arguments(p, plot="a heatmap of conflicts per (warp, slot)")


def main(args) -> int:
    from gpusim.api import banks

    check_plot_path(args)
    b = banks(args.gpu, hidden=args.hidden, density=args.density, batch=args.batch,
              wide_loads=args.wide_loads, layout=args.layout, mapping=args.mapping,
              warps_per_cta=args.warps_per_cta, load_bits=args.load_bits, seed=args.seed)
    if args.plot:
        from gpusim.plots.banks import plot_conflicts_panels

        plot_conflicts_panels(list(b.reports), args.plot,
                              f"bank conflicts per (warp, slot): N={b.hidden} d={b.density} "
                              f"B={b.batch} {b.load_bits}-bit loads, "
                              f"{b.ctas}x{b.warps_per_cta} warps")
    if args.json:
        emit_json(b.to_dict())
        return 0
    print(f"N={b.hidden} density={b.density} B={b.batch} "
          f"{b.load_bits}-bit loads ({'wide' if b.wide_loads else 'scalar'}), "
          f"{b.ctas} CTAs x {b.warps_per_cta} warps, mapping={b.mapping}, nnz={b.nonzeros}")
    print(f"{'layout':<8} {'wavefronts':>12} {'conflicts':>12} {'bound':>12} {'ratio':>7} "
          f"{'time s':>7}")
    for r in b.layouts:
        print(f"{r.layout:<8} {r.wavefronts:>12} {r.bank_conflicts:>12} "
              f"{r.lower_bound_wavefronts:>12} {r.ratio_to_bound:>7.3f} {r.layout_s:>7.2f}")
    print(f"ideal (no conflicts): {b.layouts[-1].ideal_wavefronts} wavefronts")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
