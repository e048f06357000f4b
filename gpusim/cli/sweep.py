"""``gpusim sweep``: the analytical model over ranges of hidden size, batch, density and GPU.

One row per configuration: every kernel's per-step time and whether it fits, the best sparse
persistent kernel, the next best alternative, the speedup. Outputs: ``--csv FILE`` (the table),
``--json`` (the table as JSON on stdout), ``--plot FILE`` (the speedup heatmap, PNG). Runs on
every local core by default, or on a Dask cluster (``--scheduler dask://host:port``,
``--dask-local``) when one machine is not enough. Lists take the one grammar of the commands:
comma-separated values and ``start:stop:step`` ranges (:func:`gpusim.cli.common.parse_list`).
"""

from __future__ import annotations

import argparse

from gpusim.validate import BATCH_MAX, DENSITY_MIN, SWEEP_HIDDEN_MAX
from kernels_ir.errors import InputError

from .common import (
    add_list_argument,
    add_output_arguments,
    density,
    emit_json,
    parse_list,
    positive_int,
    show_progress,
)

HIDDEN_MAX = SWEEP_HIDDEN_MAX  # the model accepts wider layers than the simulator's tools
DEFAULT_HIDDEN = "256:4096:256,5120,6144,8192"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_list_argument(p, "--gpu", kind=str, default=["v100"], help="GPU spec names")
    add_list_argument(p, "--hidden", kind=int, lo=1, hi=HIDDEN_MAX,
                      default=parse_list(DEFAULT_HIDDEN, name="hidden", kind=int),
                      default_text=DEFAULT_HIDDEN, help="hidden sizes")
    add_list_argument(p, "--batch", kind=int, lo=1, hi=BATCH_MAX,
                      default=[1, 4], help="batch sizes")
    add_list_argument(p, "--density", check=density, lo=DENSITY_MIN, hi=1.0,
                      default=[0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0], help="densities")
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn",
                   help="recurrent cell (gru: 3 gates, lstm: 4 gates of weights)")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                   help="weight precision (fp16: 16-bit values and indices)")
    p.add_argument("--heads", type=positive_int("heads"), default=1,
                   help="heads H of a multi-head layer (block-diagonal U, the density within "
                        "its blocks; every hidden size a multiple of H): each configuration is "
                        "priced on a concrete layer, about a second each")
    p.add_argument("--csv", metavar="FILE", help="write the table as CSV to FILE")
    p.add_argument("--png", dest="plot", metavar="FILE", help=argparse.SUPPRESS)  # old name
    p.add_argument("--workers", type=positive_int("workers"), default=None,
                   help="local processes (default: cores)")
    p.add_argument("--scheduler", default=None,
                   help="serial, local (default), or dask://host:port for a Dask cluster")
    p.add_argument("--dask-local", action="store_true",
                   help="run on an in-process Dask LocalCluster (same code path as a cluster)")
    add_output_arguments(p, plot="the speedup heatmap", progress=True)


def main(args) -> int:
    from gpusim.specs import load_spec
    from gpusim.sweep import Grid, Progress, run_sweep, write_csv
    from gpusim.validate import check_scheduler

    gpus = tuple(args.gpu)
    for g in gpus:
        load_spec(g)  # unknown names fail here with one line
    grid = Grid(gpus, tuple(args.hidden), tuple(args.batch), tuple(args.density), args.cell,
                args.dtype, args.heads)
    if not (args.csv or args.json or args.plot):
        raise InputError("sweep: give at least one output: --csv FILE, --json or --plot FILE")
    for path, ext in ((args.csv, ".csv"), (args.plot, ".png")):
        if path and not path.lower().endswith(ext):
            raise InputError(f"output {path!r} must end in {ext}")
    scheduler = check_scheduler(args.scheduler, args.dask_local)
    progress = Progress(grid.size, enabled=show_progress(args))
    cols = run_sweep(grid, scheduler=scheduler, workers=args.workers, progress=progress)
    meta = {"gpus": list(gpus), "cell": args.cell, "dtype": args.dtype, "heads": args.heads,
            "configs": grid.size, "engine": "model"}
    if args.csv:
        write_csv(cols, args.csv)
    if args.plot:
        from gpusim.plots.speedup import speedup_heatmap
        from gpusim.plots.style import save_png

        save_png(speedup_heatmap(cols), args.plot)
    if args.json:
        names = list(cols)
        n = len(cols[names[0]]) if names else 0
        emit_json({"meta": meta, "configs": [{c: cols[c][i] for c in names} for i in range(n)]})
        return 0
    fits = sum(1 for s in cols["speedup"] if s is not None)
    print(f"{grid.size} configurations ({fits} with a sparse persistent kernel that fits) -> "
          + ", ".join(p for p in (args.csv, args.plot) if p))
    return 0
