"""``gpusim run``: build the persistent sparse RNN kernel, execute it functionally, check values.

Prints the largest error of any h_t against the float64 reference (``max_rel_err``: per step,
the largest absolute error divided by the step's largest reference magnitude, the maximum over
steps; see :func:`kernels_ir.kernels.sparse_rnn.max_rel_err`) and the wall time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .common import (
    add_cell_arguments,
    add_kernel_arguments,
    add_layer_arguments,
    add_output_arguments,
    check_layer_fits,
    emit_json,
    positive_int,
)

__all__ = ["add_arguments", "main", "build_program"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_layer_arguments(p)
    add_kernel_arguments(p)
    p.add_argument("--dense", action="store_true",
                   help="the dense persistent kernel (all of U in registers) instead of sparse")
    add_cell_arguments(p)
    p.add_argument("--backend", choices=("sim", "cupy"), default="sim",
                   help="sim: the functional executor here; cupy: generated CUDA on this "
                        "machine's GPU (values checked, then timed); use --gpu to match the GPU")
    p.add_argument("--repeats", type=positive_int("repeats", 1000), default=10,
                   help="timed repeats (cupy backend)")
    add_output_arguments(p)


def build_program(args, timesteps: int | None = None):
    """(spec, program) for the layer options of ``args`` (shared with ``gpusim simulate``);
    ``args.gpu`` is a spec name, a .toml path or a loaded spec."""
    from gpusim.specs import load_spec
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    spec = load_spec(str(args.gpu)) if isinstance(args.gpu, str | Path) else args.gpu
    check_layer_fits(spec, args, dense=getattr(args, "dense", False))
    steps = args.timesteps if timesteps is None else timesteps
    heads = getattr(args, "heads", 1)
    kw = {} if heads == 1 else {"heads": heads}
    layer = make_layer(args.hidden, args.batch, args.density, steps, args.seed,
                       cell=getattr(args, "cell", "rnn"), **kw)
    dtype = getattr(args, "dtype", "fp32")
    if getattr(args, "dense", False):
        prog = build_dense_rnn(layer, spec, sync=args.sync, wide_loads=args.wide_loads,
                               dtype=dtype)
    else:
        prog = build_sparse_rnn(layer, spec, sync=args.sync, wide_loads=args.wide_loads,
                                layout=args.layout, seed=args.seed, dtype=dtype)
    return spec, prog


def _main_cupy(args) -> int:
    from gpusim.backends.cupy_backend import run_program

    spec, prog = build_program(args)
    res = run_program(prog, repeats=args.repeats, seed=args.seed, spec=spec)
    out = {"gpu": spec.name, "kernel": prog.kernel.name, "backend": "cupy", **res}
    if args.json:
        emit_json(out)
    else:
        print(f"{prog.kernel.name} on the GPU (spec {spec.name}): {prog.kernel.grid} CTAs x "
              f"{prog.kernel.block} threads, N={args.hidden} B={args.batch} "
              f"density={args.density} T={args.timesteps}")
        print(f"  max_rel_err vs float64 reference: {res['max_rel_err']:.3e}")
        print(f"  per step {res['per_step_s'] * 1e6:.3f} us, launch {res['launch_s'] * 1e6:.2f} us")
    return 0


def main(args) -> int:
    if args.backend == "cupy":
        return _main_cupy(args)
    from gpusim.engine import execute

    t0 = time.perf_counter()
    spec, prog = build_program(args)
    t1 = time.perf_counter()
    res = execute(prog.kernel, prog.inputs, spec=spec)
    t2 = time.perf_counter()
    err = prog.max_rel_err(res.globals)
    out = {
        "gpu": spec.name, "kernel": prog.kernel.name, "hidden": args.hidden,
        "batch": args.batch, "density": args.density, "timesteps": args.timesteps,
        "ctas": prog.kernel.grid, "threads_per_cta": prog.kernel.block,
        "warp_instructions": res.warp_instructions,
        "spins": {label: n for label, n in res.spins},
        "max_rel_err": err, "build_s": t1 - t0, "execute_s": t2 - t1, "wall_s": t2 - t0,
    }
    if args.json:
        emit_json(out)
    else:
        print(f"{prog.kernel.name} on {spec.name}: {prog.kernel.grid} CTAs x "
              f"{prog.kernel.block} threads, N={args.hidden} B={args.batch} "
              f"density={args.density} T={args.timesteps}")
        print(f"  warp-instructions executed: {res.warp_instructions:,}")
        for label, n in res.spins:
            print(f"  spin loop '{label}': {n} lockstep iterations")
        print(f"  max_rel_err vs float64 reference: {err:.3e}")
        print(f"  wall time: build {t1 - t0:.2f} s, execute {t2 - t1:.2f} s")
    from kernels_ir.kernels.sparse_rnn import check_values

    return check_values(err, prog.kernel.name)
