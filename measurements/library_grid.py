"""The library baselines on a grid of layer shapes: the table the analytical model interpolates.

    PYTHONPATH=. python3 measurements/library_grid.py --out $OUT [--only cublas|cusparse]
    python measurements/library_grid.py --check h200     # the grid against the fitted classes

The fitted ``[library]`` classes (one fixed cost and one throughput per kernel class, fitted to
``library_sweep.json``) are off by 12% (cuBLAS) and 11% (cuSPARSE) on the H200's fresh draws,
with errors that follow the shape: cuBLAS picks its kernels by (rows, columns, batch), and
cuSPARSE's SpMV at batch 1 slows from a few MB of matrix on. No single throughput per class
follows that. This script measures the libraries themselves on a grid of shapes, so that the
model prices a layer by interpolating between measured neighbours (:mod:`models.analytical
.library_table`); nothing of the campaign or of the fresh draws enters it.

The grid (:data:`GRID`; fp32 weights, the cells the campaign draws):

- cuBLAS depends on the shape alone: hidden ``n`` on :data:`HIDDEN_CUBLAS` (RNN, ``n`` x ``n``)
  or :data:`HIDDEN_CUBLAS_GATED` (LSTM / GRU, ``4n`` or ``3n`` x ``n``), batch 1/2/4/8, at density
  :data:`CUBLAS_DENSITY` (the product is dense whatever the density; a sparse U keeps the
  float64 values check cheap). Every cuBLAS path is timed; the table keeps each path and the
  best, as the campaign does.
- cuSPARSE depends on the nonzeros too: hidden on :data:`HIDDEN` (RNN) or :data:`HIDDEN_GATED`
  at the densities of :data:`DENSITY` (RNN) and :data:`DENSITY_GATED`. Its step grows smoothly
  with the size, so its grid is coarser.

Each point is timed exactly as the campaign times a baseline
(:func:`gpusim.backends.baselines.run_cublas` / ``run_cusparse``: the values checked against the
float64 reference over every step, CUDA graphs of :data:`STEPS` and :data:`SHORT_STEPS` steps,
per step = slope of the medians, raw repeats kept), with fewer steps and repeats than the
campaign so that the grid fits one device call per library. Layer seeds are
``SEED_BASE + index``; a grid point that a recorded campaign holds is refused at start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT_STEPS, REPEATS, WARMUP = 64, 16, 5, 1
SEED_BASE = 9000
# hidden sizes: about x1.58 apart (RNN, 256..8192) and x1.58 (gated, 192..3040: the cells the
# campaign draws stay below hidden ~2000, their matrices 3-4 times an RNN's of the same hidden)
HIDDEN = (256, 408, 648, 1024, 1624, 2576, 4088, 6488, 8192)
HIDDEN_GATED = (192, 304, 480, 760, 1208, 1912, 3040)


def _geometric(lo: int, hi: int, k: int) -> tuple[int, ...]:
    """``k`` sizes about evenly spaced in log from ``lo`` to ``hi``, multiples of 8 as the fresh
    draws' (a power of two, where cuBLAS may take a kernel of its own, moves up by 8)."""
    import numpy as np

    out = []
    for x in np.geomspace(lo, hi, k):
        n = int(round(x / 8)) * 8
        out.append(n + 8 if n & (n - 1) == 0 else n)
    return tuple(out)


# cuBLAS switches kernels at sizes of its own (at batch 1 near hidden 1000, at batch 8 near
# 1580, each switch halving or doubling the step): its hidden sizes are about x1.12 apart
HIDDEN_CUBLAS = _geometric(248, 8200, 31)
HIDDEN_CUBLAS_GATED = _geometric(184, 3040, 25)
BATCHES = (1, 2, 4, 8)
CUBLAS_DENSITY = 0.01013
DENSITY = (0.0103, 0.0407, 0.151, 0.497)
DENSITY_GATED = (0.0103, 0.0707, 0.497)
CELLS = ("rnn", "lstm", "gru")


def grid(library: str) -> list[tuple[str, int, int, float]]:
    """(cell, hidden, batch, density) of every point of ``library`` ("cublas" / "cusparse")."""
    out = []
    for cell in CELLS:
        if library == "cublas":
            hidden = HIDDEN_CUBLAS if cell == "rnn" else HIDDEN_CUBLAS_GATED
        else:
            hidden = HIDDEN if cell == "rnn" else HIDDEN_GATED
        dens = (CUBLAS_DENSITY,) if library == "cublas" else (
            DENSITY if cell == "rnn" else DENSITY_GATED)
        out += [(cell, n, b, d) for n in hidden for b in BATCHES for d in dens]
    return out


GRID = {lib: grid(lib) for lib in ("cublas", "cusparse")}


def check_disjoint() -> None:
    from measurements.campaign import recorded_layers

    rec = recorded_layers()
    shared = sorted({(n, b, d) for pts in GRID.values() for _, n, b, d in pts} & rec)
    if shared:
        raise SystemExit(f"library_grid: {shared[:5]} are recorded campaign layers; the grid "
                         f"must be disjoint from every campaign")


def measure_point(library: str, cell: str, n: int, b: int, d: float, seed: int,
                  dtype: str = "fp32") -> dict:
    from gpusim.backends.baselines import run_cublas, run_cusparse
    from kernels_ir.kernels.sparse_rnn import make_layer

    layer = make_layer(n, b, d, STEPS, seed=seed, cell=cell)
    run = run_cublas if library == "cublas" else run_cusparse
    r = run(layer, repeats=REPEATS, warmup=WARMUP, seed=seed, short_steps=SHORT_STEPS,
            dtype=dtype)
    rec = {"cell": cell, "dtype": dtype, "hidden": n, "batch": b, "density": d, "seed": seed,
           "rows": int(layer.U.shape[0]), "nnz": int(layer.U.nnz),
           "per_step_s": r["per_step_s"], "per_step_raw_s": r["per_step_raw_s"],
           "max_rel_err": r["max_rel_err"], "best": r["best"]}
    if library == "cublas":
        rec["paths"] = {k: {"per_step_s": v["per_step_s"], "per_step_raw_s": v["per_step_raw_s"]}
                        for k, v in r["variants"].items()}
    return rec


def check(gpu: str = "h200") -> dict:
    """The grid against the fitted classes on the GPU's recorded fresh draws (its merged
    cross-check record): per sample ("in sample": draws measured before the grid, which never
    entered it; "out of sample": after it), library (fp16 rows as ``<library>_fp16``) and cell,
    the MAPE of the rows under each; and the gated and fp16 speedups (``cells``) with the
    libraries priced by either (the kernels' own predictions as recorded). Multi-head rows are
    left out (their layers' densities are per head)."""
    import dataclasses
    import statistics

    from gpusim.specs import load_spec
    from gpusim.speedup_check import SPARSE, _best
    from models.analytical.predict import predict_many

    spec = load_spec(gpu)
    classes = dataclasses.replace(spec, library_table="")
    from measurements.probe import read_record

    rec = read_record(os.path.join(os.path.dirname(os.path.abspath(__file__)), gpu,
                                   "crosscheck_fresh.json"))   # kept compressed

    def price(sp, kind, r, dtype="fp32"):
        return float(predict_many(sp, r["hidden"], r["batch"], r["density"],
                                  cell=r.get("cell") or "rnn", dtype=dtype,
                                  kernels=[kind])[kind].per_step_s[0])

    errs: dict = {}
    for r in rec["rows"]:
        if r["kind"] not in ("cublas", "cusparse") or "-H" in r["id"]:
            continue
        dtype = r.get("dtype") or "fp32"
        key = (r["sample"], r["kind"] + ("" if dtype == "fp32" else "_fp16"),
               r.get("cell") or "rnn")
        e = errs.setdefault(key, ([], []))
        e[0].append(abs(price(classes, r["kind"], r, dtype) / r["measured_s"] - 1))
        e[1].append(abs(price(spec, r["kind"], r, dtype) / r["measured_s"] - 1))
    out = {"libraries": {f"{s} | {k} | {c}": {"rows": len(a), "classes": statistics.mean(a),
                                               "grid": statistics.mean(b)}
                         for (s, k, c), (a, b) in sorted(errs.items())}, "cells": {}}
    for sample in ("in sample", "out of sample"):
        rows = [r for r in rec["speedup"]["rows"] if r["sample"] == sample and r.get("cell")]
        libs = [{name: {k: price(sp, k, r, r.get("dtype") or "fp32")
                        for k in ("cublas", "cusparse")}
                 for name, sp in (("classes", classes), ("grid", spec))} for r in rows]
        for eng in ("model", "sim"):
            apes: dict = {"classes": [], "grid": []}
            for r, lib_t in zip(rows, libs, strict=True):
                for name, t_lib in lib_t.items():
                    # as the cross-check prices a gated or fp16 layer: among its measured
                    # kernels
                    t = {**r[eng]["times_s"], **t_lib}
                    t = {k: v for k, v in t.items() if k in r["measured"]["times_s"] and v}
                    tp = _best(t, SPARSE)[1]
                    tn = _best(t, [k for k in t if k not in SPARSE])[1]
                    apes[name].append(abs(tn / tp / r["measured"]["speedup"] - 1))
            out["cells"][f"{sample} | {eng}"] = {
                "layers": len(rows), **{k: statistics.mean(v) if v else None
                                        for k, v in apes.items()}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="GPU run: write the grid records here")
    ap.add_argument("--only", choices=("cublas", "cusparse"), help="one library (default: both)")
    ap.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                    help="the weights' precision (fp16: the libraries' fp16 paths, records "
                    "library_grid_<library>_fp16.json)")
    ap.add_argument("--check", metavar="GPU", help="no GPU: the grid against the fitted classes "
                    "on GPU's recorded fresh draws (check())")
    args = ap.parse_args(argv)
    if args.check:
        res = check(args.check)
        for k, v in res["libraries"].items():
            print(f"{k:34s} {v['rows']:4d} rows: classes {100 * v['classes']:5.1f}%, "
                  f"grid {100 * v['grid']:5.1f}%")
        for k, v in res["cells"].items():
            if v["layers"]:
                print(f"gated/fp16 speedups, {k:20s} {v['layers']:4d} layers: classes "
                      f"{100 * v['classes']:5.1f}%, grid {100 * v['grid']:5.1f}%")
        return 0
    if not args.out:
        ap.error("--out (GPU run) or --check GPU")
    check_disjoint()
    os.makedirs(args.out, exist_ok=True)
    from gpusim.backends.baselines import require_torch
    from measurements.campaign import provenance

    require_torch()
    libs = (args.only,) if args.only else ("cublas", "cusparse")
    for lib in libs:
        t0 = time.time()
        argv_rec = sys.argv if argv is None else ["measurements/library_grid.py"] + argv
        out = {"format_version": 1, "library": lib, "dtype": args.dtype,
               "provenance": provenance(argv_rec),
               "steps": [STEPS, SHORT_STEPS], "repeats": REPEATS, "warmup": WARMUP,
               "points": [], "errors": {}}
        pts = GRID[lib]
        for i, (cell, n, b, d) in enumerate(pts):
            key = f"{cell}-h{n}-b{b}-d{d}"
            t1 = time.time()
            try:
                rec = measure_point(lib, cell, n, b, d, SEED_BASE + i, args.dtype)
                out["points"].append(rec)
                print(f"[{lib} {i + 1}/{len(pts)}] {key}: {rec['per_step_s'] * 1e6:.2f} us "
                      f"({rec['best']}, {time.time() - t1:.1f}s)", flush=True)
            except Exception as exc:  # record and go on
                out["errors"][key] = f"{type(exc).__name__}: {exc}"
                print(f"[{lib} {i + 1}/{len(pts)}] {key}: FAILED {out['errors'][key]}",
                      flush=True)
        out["seconds"] = time.time() - t0
        name = f"library_grid_{lib}" + ("" if args.dtype == "fp32" else "_fp16")
        with open(os.path.join(args.out, f"{name}.json"), "w") as f:
            json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
