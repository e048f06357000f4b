"""``gpusim sweep``: the analytical model over ranges of hidden size, batch, density and GPU.

Writes CSV and/or JSON (one row per configuration: every kernel's per-step time and whether it
fits, the best sparse persistent kernel, the next best alternative, the speedup) and a speedup
heatmap PNG. Runs on every local core by default, or on a Dask cluster (``--scheduler
dask://host:port``, ``--dask-local``) when one machine is not enough.
"""

from __future__ import annotations

import argparse

from gpusim.validate import BATCH_MAX, DENSITY_MIN, SWEEP_HIDDEN_MAX, expand_list
from kernels_ir.errors import InputError

_BOUNDS = {"hidden": (1, SWEEP_HIDDEN_MAX), "batch": (1, BATCH_MAX),
           "density": (DENSITY_MIN, 1.0)}


def _int_range(name):
    def parse(text: str) -> list[int]:
        return _expand(name, text, integer=True)
    return parse


def _float_list(name):
    def parse(text: str) -> list[float]:
        return _expand(name, text, integer=False)
    return parse


def _expand(name: str, text: str, integer: bool) -> list:
    """``a,b,c`` or ``start:stop:step`` (inclusive stop) or a mix: ``256:1024:256,2048``; bounded
    and exact (:func:`gpusim.validate.expand_list`)."""
    lo, hi = _BOUNDS[name]
    try:
        return expand_list(name, text, integer=integer, lo=lo, hi=hi)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", default="v100", help="comma-separated GPU spec names; default v100")
    p.add_argument("--hidden", type=_int_range("hidden"), default=_expand(
        "hidden", "256:4096:256,5120,6144,8192", integer=True),
        help="hidden sizes: list or a:b:step")
    p.add_argument("--batch", type=_int_range("batch"), default=[1, 4],
                   help="batch sizes: list or a:b:step")
    p.add_argument("--density", type=_float_list("density"),
                   default=[0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0],
                   help="densities: list or a:b:step")
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    p.add_argument("--csv", help="write the table as CSV to this path")
    p.add_argument("--json", dest="json_out", help="write the table as JSON to this path")
    p.add_argument("--png", help="write the speedup heatmap PNG to this path")
    p.add_argument("--workers", type=int, default=None, help="local processes (default: cores)")
    p.add_argument("--scheduler", default=None,
                   help="serial, local (default), or dask://host:port for a Dask cluster")
    p.add_argument("--dask-local", action="store_true",
                   help="run on an in-process Dask LocalCluster (same code path as a cluster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def main(args) -> int:
    from gpusim.specs import load_spec
    from gpusim.sweep import Grid, Progress, run_sweep, write_csv, write_json
    from gpusim.validate import check_scheduler

    gpus = tuple(g.strip() for g in args.gpu.split(",") if g.strip())
    for g in gpus:
        load_spec(g)  # unknown names fail here with one line
    if args.workers is not None and args.workers < 1:
        raise InputError(f"workers={args.workers} must be a positive integer")
    grid = Grid(gpus, tuple(args.hidden), tuple(args.batch), tuple(args.density), args.cell,
                args.dtype)
    if not (args.csv or args.json_out or args.png):
        raise InputError("sweep: give at least one output: --csv PATH, --json PATH or --png PATH")
    for path, ext in ((args.csv, ".csv"), (args.json_out, ".json"), (args.png, ".png")):
        if path and not path.lower().endswith(ext):
            raise InputError(f"output {path!r} must end in {ext}")
    scheduler = check_scheduler(args.scheduler, args.dask_local)
    progress = Progress(grid.size, enabled=not args.no_progress)
    cols = run_sweep(grid, scheduler=scheduler, workers=args.workers, progress=progress)
    meta = {"gpus": list(gpus), "cell": args.cell, "dtype": args.dtype, "configs": grid.size,
            "engine": "model"}
    if args.csv:
        write_csv(cols, args.csv)
    if args.json_out:
        write_json(cols, args.json_out, meta)
    if args.png:
        from gpusim.plots.speedup import speedup_heatmap
        from gpusim.plots.style import save_png

        save_png(speedup_heatmap(cols), args.png)
    fits = sum(1 for s in cols["speedup"] if s is not None)
    print(f"{grid.size} configurations ({fits} with a sparse persistent kernel that fits) -> "
          + ", ".join(p for p in (args.csv, args.json_out, args.png) if p))
    return 0
