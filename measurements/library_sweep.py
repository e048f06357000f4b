"""The library baselines at layer sizes outside the campaign: calibration data for the
analytical model's cuBLAS / cuSPARSE kernels.

    PYTHONPATH=. python3 measurements/library_sweep.py --out $OUT

For every layer of :data:`SWEEP` (hidden 128..6144, batch 1/2/4/8; no layer of
``campaign.LAYERS``, checked at start), each cuBLAS path (GEMM, B GEMVs, GEMM padded to batch 8)
and the cuSPARSE product are timed exactly as the campaign times them
(:func:`gpusim.backends.baselines.run_cublas` / ``run_cusparse``: values checked against the
float64 reference, CUDA graphs of T = 128 and T' = 32 steps, per step = slope of the medians,
raw repeats kept), and the kernels one step launches are listed with ``torch.profiler``
(:func:`measurements.library_profile.profile_step`). ``python -m gpusim.calibrate`` fits the
spec's ``[library]`` table to ``library_sweep.json``; the campaign cases never enter the fit.

    PYTHONPATH=. python3 measurements/library_sweep.py --out $OUT --cells

``--cells``: the same for the gated cells and fp16 weights (:data:`SWEEP_CELLS`: LSTM and GRU in
fp32 and fp16, RNN in fp16, three hidden sizes each that no campaign or fresh draw holds, batch
1/2/4/8): the products over 4N or 3N rows, the fused gate kernel after them, and the fp16
library paths (:mod:`gpusim.backends.baselines`) -> ``library_sweep_cells.json``. It measures
how far the fit above, made on fp32 RNN shapes, carries to these.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STEPS, SHORT_STEPS = 128, 32
# hidden -> density (the density only matters to cuSPARSE); every batch 1/2/4/8
DENSITY = {128: 0.3, 384: 0.15, 768: 0.08, 1536: 0.04, 3072: 0.03, 6144: 0.015}
SWEEP = [(n, b, d) for n, d in DENSITY.items() for b in (1, 2, 4, 8)]
# (cell, dtype) -> {hidden: density}: gated layers have 3-4x the rows, so smaller hidden sizes
CELL_DENSITY = {("lstm", "fp32"): {320: 0.2, 1088: 0.05, 2112: 0.02},
                ("gru", "fp32"): {320: 0.2, 1088: 0.05, 2112: 0.02},
                ("lstm", "fp16"): {320: 0.2, 1088: 0.05, 2112: 0.02},
                ("gru", "fp16"): {320: 0.2, 1088: 0.05, 2112: 0.02},
                ("rnn", "fp16"): {640: 0.1, 2112: 0.04, 5120: 0.015}}
SWEEP_CELLS = [(cell, dtype, n, b, d) for (cell, dtype), sizes in CELL_DENSITY.items()
               for n, d in sizes.items() for b in (1, 2, 4, 8)]


def check_disjoint() -> None:
    from measurements.campaign import LAYERS, recorded_layers

    shared = sorted(set(SWEEP) & set(LAYERS)) + sorted(
        {n for n, _, _ in SWEEP} & {n for n, _, _ in LAYERS})
    shared += sorted({(n, b, d) for _, _, n, b, d in SWEEP_CELLS} & recorded_layers())
    if shared:
        raise SystemExit(f"library_sweep: {shared} are campaign sizes; the calibration data "
                         f"must be disjoint from the campaign")


def measure_layer(torch, n: int, b: int, d: float, seed: int, cell: str = "rnn",
                  dtype: str = "fp32") -> dict:
    from gpusim.backends.baselines import cublas_paths, cusparse_step, run_cublas, run_cusparse
    from kernels_ir.kernels.sparse_rnn import make_layer
    from measurements.library_profile import profile_step

    layer = make_layer(n, b, d, STEPS, seed=seed, cell=cell)
    rec = {"hidden": n, "batch": b, "density": d, "seed": seed, "nnz": int(layer.U.nnz)}
    if (cell, dtype) != ("rnn", "fp32"):
        rec.update({"cell": cell, "dtype": dtype, "rows": int(layer.U.shape[0])})
    cb = run_cublas(layer, repeats=10, warmup=2, seed=seed, short_steps=SHORT_STEPS, dtype=dtype)
    cs = run_cusparse(layer, repeats=10, warmup=2, seed=seed, short_steps=SHORT_STEPS,
                      dtype=dtype)
    paths, _, _ = cublas_paths(torch, layer, dtype=dtype)
    step, _, _ = cusparse_step(torch, layer, dtype=dtype)
    rec["paths"] = {f"cublas_{k}": {**v, "profile": profile_step(torch, paths[k], steps=4)}
                    for k, v in cb["variants"].items()}
    rec["paths"]["cusparse"] = {"per_step_s": cs["per_step_s"],
                                "per_step_raw_s": cs["per_step_raw_s"],
                                "max_rel_err": cs["max_rel_err"],
                                "profile": profile_step(torch, step, steps=4)}
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", action="store_true",
                    help="the gated and fp16 layers of SWEEP_CELLS -> library_sweep_cells.json")
    args = ap.parse_args(argv)
    check_disjoint()
    os.makedirs(args.out, exist_ok=True)
    from gpusim.backends.baselines import require_torch
    from measurements.campaign import provenance

    torch = require_torch()
    t0 = time.time()
    out = {"format_version": 1, "provenance": provenance(sys.argv if argv is None else
                                                          ["measurements/library_sweep.py"]
                                                          + argv),
           "steps": [STEPS, SHORT_STEPS], "layers": {}, "errors": {}}
    sweep = SWEEP_CELLS if args.cells else [("rnn", "fp32", *lay) for lay in SWEEP]
    for i, (cell, dtype, n, b, d) in enumerate(sweep):
        key = f"h{n}-b{b}-d{d}"
        if args.cells:
            key = f"{cell}-{dtype}-{key}"
        t1 = time.time()
        try:
            out["layers"][key] = rec = measure_layer(torch, n, b, d, seed=(7000 if args.cells
                                                                           else 5000) + i,
                                                     cell=cell, dtype=dtype)
            print(f"[{i + 1}/{len(sweep)}] {key}: " + ", ".join(
                f"{k} {v['per_step_s'] * 1e6:.2f}" for k, v in rec["paths"].items())
                + f" us ({time.time() - t1:.1f}s)", flush=True)
        except Exception as exc:  # record and go on
            out["errors"][key] = f"{type(exc).__name__}: {exc}"
            print(f"[{i + 1}/{len(sweep)}] {key}: FAILED {out['errors'][key]}", flush=True)
    out["seconds"] = time.time() - t0
    name = "library_sweep_cells.json" if args.cells else "library_sweep.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
