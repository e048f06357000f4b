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


def check_disjoint() -> None:
    from measurements.campaign import LAYERS

    shared = sorted(set(SWEEP) & set(LAYERS)) + sorted(
        {n for n, _, _ in SWEEP} & {n for n, _, _ in LAYERS})
    if shared:
        raise SystemExit(f"library_sweep: {shared} are campaign sizes; the calibration data "
                         f"must be disjoint from the campaign")


def measure_layer(torch, n: int, b: int, d: float, seed: int) -> dict:
    from gpusim.backends.baselines import cublas_paths, cusparse_step, run_cublas, run_cusparse
    from kernels_ir.kernels.sparse_rnn import make_layer
    from measurements.library_profile import profile_step

    layer = make_layer(n, b, d, STEPS, seed=seed)
    rec = {"hidden": n, "batch": b, "density": d, "seed": seed, "nnz": int(layer.U.nnz)}
    cb = run_cublas(layer, repeats=10, warmup=2, seed=seed, short_steps=SHORT_STEPS)
    cs = run_cusparse(layer, repeats=10, warmup=2, seed=seed, short_steps=SHORT_STEPS)
    paths, _, _ = cublas_paths(torch, layer)
    step, _, _ = cusparse_step(torch, layer)
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
    for i, (n, b, d) in enumerate(SWEEP):
        key = f"h{n}-b{b}-d{d}"
        t1 = time.time()
        try:
            out["layers"][key] = rec = measure_layer(torch, n, b, d, seed=5000 + i)
            print(f"[{i + 1}/{len(SWEEP)}] {key}: " + ", ".join(
                f"{k} {v['per_step_s'] * 1e6:.2f}" for k, v in rec["paths"].items())
                + f" us ({time.time() - t1:.1f}s)", flush=True)
        except Exception as exc:  # record and go on
            out["errors"][key] = f"{type(exc).__name__}: {exc}"
            print(f"[{i + 1}/{len(SWEEP)}] {key}: FAILED {out['errors'][key]}", flush=True)
    out["seconds"] = time.time() - t0
    with open(os.path.join(args.out, "library_sweep.json"), "w") as f:
        json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
