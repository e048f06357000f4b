"""``gpusim banks``: shared-memory bank conflicts of a weight layout, against the lower bound."""

from __future__ import annotations

import argparse
import time

import numpy as np

from kernels_ir.errors import InputError

from .common import HIDDEN_MAX, check_nnz, density, emit_json, nonnegative_int, positive_int

LAYOUT_CHOICES = ("naive", "random", "greedy", "optimal", "all")
_FALLBACK_SMS, _FALLBACK_WARPS = 80, 8  # V100, used only if gpusim.specs cannot be imported


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default="v100", help="GPU spec name: sets the SM (= CTA) count")
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
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="write a heatmap of conflicts per (warp, slot)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _target(gpu: str, warps: int | None) -> tuple[int, int]:
    try:
        from gpusim.specs import load_spec
    except ImportError:  # the spec loader is not there yet: V100 defaults
        return _FALLBACK_SMS, warps or _FALLBACK_WARPS
    spec = load_spec(gpu)
    default_warps = getattr(spec, "warps_per_cta", None) or _FALLBACK_WARPS
    return int(spec.sm_count), int(warps or default_warps)


def _check_bits(bits: int | None, batch: int, wide: bool) -> None:
    if bits is None:
        return
    from kernels_ir.layouts import geometry, width_from_bits

    words = width_from_bits(bits)
    got = geometry(batch, wide).width
    if words != got:
        need = {1: "--no-wide-loads (any batch) or batch=1", 2: "batch=2 with --wide-loads",
                4: "batch=4 or 8 with --wide-loads"}[words]
        raise InputError(f"--load-bits={bits} is not compatible with batch={batch} "
                         f"{'with' if wide else 'without'} wide loads; {bits}-bit loads need "
                         f"{need}")


def _summary(rep, seconds: dict) -> dict:
    return {
        "layout": rep.layout,
        "wavefronts": rep.total_wavefronts,
        "bank_conflicts": rep.total_conflicts,
        "lower_bound_wavefronts": rep.lower_bound_wavefronts,
        "lower_bound_conflicts": rep.lower_bound_conflicts,
        "ideal_wavefronts": rep.ideal_wavefronts,
        "ratio_to_bound": rep.ratio_to_bound,
        "gap_wavefronts": rep.gap_wavefronts,
        "seconds": seconds,
    }


def main(args) -> int:
    from kernels_ir.layouts import analyse, analyse_row_per_lane, geometry
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_sparse

    geometry(args.batch, args.wide_loads)  # bad batch/width: one error before any work
    check_nnz(args.hidden, args.density)
    _check_bits(args.load_bits, args.batch, args.wide_loads)
    n_ctas, warps = _target(args.gpu, args.warps_per_cta)
    t0 = time.perf_counter()
    U = random_sparse(args.hidden, args.hidden, args.density, np.random.default_rng(args.seed))
    gen_s = time.perf_counter() - t0
    names = ("naive", "random", "greedy", "optimal") if args.layout == "all" else (args.layout,)
    results = {}
    for name in names:
        t0 = time.perf_counter()
        if args.mapping == "spread":
            m = map_matrix(U, n_ctas=n_ctas, warps_per_cta=warps, batch=args.batch,
                           wide_loads=args.wide_loads, layout=name, seed=args.seed)
            t1 = time.perf_counter()
            rep = analyse(m, args.batch, args.wide_loads)
        else:
            t1 = time.perf_counter()
            rep = analyse_row_per_lane(U, n_ctas=n_ctas, warps_per_cta=warps, batch=args.batch,
                                       wide_loads=args.wide_loads, layout=name, seed=args.seed)
        t2 = time.perf_counter()
        results[name] = (rep, {"layout_s": t1 - t0, "analyse_s": t2 - t1})

    config = {"gpu": args.gpu, "hidden": args.hidden, "density": args.density,
              "batch": args.batch, "wide_loads": args.wide_loads, "mapping": args.mapping,
              "ctas": n_ctas, "warps_per_cta": warps, "seed": args.seed,
              "nonzeros": int(U.nnz), "load_bits": 32 * geometry(args.batch, args.wide_loads).width}
    last = results[names[-1]][0]
    if args.plot:
        from gpusim.plots.banks import plot_conflicts_panels

        plot_conflicts_panels([r for r, _ in results.values()], args.plot,
                              f"bank conflicts per (warp, slot): N={args.hidden} "
                              f"d={args.density} B={args.batch} {config['load_bits']}-bit "
                              f"loads, {n_ctas}x{warps} warps")
    if args.json:
        out = _summary(last, results[names[-1]][1])
        out["config"] = config
        out["generate_s"] = gen_s
        if len(names) > 1:
            out["layouts"] = {n: _summary(r, s) for n, (r, s) in results.items()}
        emit_json(out)
        return 0
    print(f"N={args.hidden} density={args.density} B={args.batch} "
          f"{config['load_bits']}-bit loads ({'wide' if args.wide_loads else 'scalar'}), "
          f"{n_ctas} CTAs x {warps} warps, mapping={args.mapping}, nnz={U.nnz}")
    print(f"{'layout':<8} {'wavefronts':>12} {'conflicts':>12} {'bound':>12} {'ratio':>7} "
          f"{'time s':>7}")
    for n, (r, s) in results.items():
        print(f"{n:<8} {r.total_wavefronts:>12} {r.total_conflicts:>12} "
              f"{r.lower_bound_wavefronts:>12} {r.ratio_to_bound:>7.3f} "
              f"{s['layout_s']:>7.2f}")
    print(f"ideal (no conflicts): {last.ideal_wavefronts} wavefronts")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0
