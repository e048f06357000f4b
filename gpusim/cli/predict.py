"""``gpusim predict``: per-step and total time of every kernel and baseline for one layer.

The analytical model answers by default (well under a second); ``--engine sim`` runs every
kernel that exists in the IR on the simulator (``gpusim.engine``): the sparse and dense persistent
kernels (sampled steps, extrapolated) and the CSR row-per-warp kernel, each values-checked against
the float64 reference of the steps it simulated. Only the library baselines (cuBLAS, cuSPARSE:
black boxes) keep their model. Every row names the engine that priced it. Layers that do not fit
are reported with the binding limit, never with a time. ``--cell gru|lstm`` with ``--engine sim``:
the persistent kernels and the CSR kernel (a warp per unit and its gate rows) are simulated with
that cell. ``--dtype fp16``: the CSR kernel in the IR has fp32 weights only, so it keeps the
model for fp16, and a note says so.
"""

from __future__ import annotations

import argparse
import os

from gpusim.cli.common import (
    BATCH_MAX,
    HIDDEN_MAX,
    TIMESTEPS_MAX,
    add_output_arguments,
    emit_json,
    nonnegative_int,
    positive_int,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpusim.cli.common import density

    p.add_argument("--gpu", default="v100", help="GPU spec name or .toml path")
    p.add_argument("--hidden", type=positive_int("hidden", HIDDEN_MAX), default=2304,
                   help="hidden size N")
    p.add_argument("--batch", type=positive_int("batch", BATCH_MAX), default=4,
                   help="batch size B")
    p.add_argument("--density", type=density, default=0.1, help="fraction of nonzero weights")
    p.add_argument("--timesteps", type=positive_int("timesteps", TIMESTEPS_MAX), default=256,
                   help="sequence length T (total = setup + T x per-step)")
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn",
                   help="recurrent cell (gru: 3 gates, lstm: 4 gates of weights)")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                   help="weight precision (fp16: 16-bit values and indices)")
    p.add_argument("--engine", choices=("model", "sim"), default="model",
                   help="analytical model (fast) or the simulator for every kernel in the IR "
                   "(persistent, dense, CSR); cuBLAS/cuSPARSE always use the model")
    p.add_argument("--heads", type=int, default=1, metavar="H",
                   help="independent recurrences (block-diagonal U, heads of N/H units; H must "
                   "divide N); when a CTA holds whole heads, h is exchanged inside it "
                   "with no grid-wide sync (both engines; baselines keep their "
                   "single-head rows)")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=None,
                   metavar="K",
                   help="--engine sim: simulate K steps of each persistent kernel in full and "
                   "extrapolate (default: as many as its steps' scatter needs, 3 to "
                   "21: gpusim.pricing.price_persistent)")
    p.add_argument("--seed", type=nonnegative_int("seed"), default=0,
                   help="seed of the random layer")
    add_output_arguments(p)


# below this many h words a layer simulates in about a second: no worker processes
PARALLEL_MIN_WORDS = 2048


def _simulate_one(sample_steps, spec, variant, hidden, batch, density, seed, cell="rnn",
                  heads=1, dtype="fp32"):
    """One kernel simulated: (per_step_s, setup_s, breakdown); see :func:`simulator`."""
    from gpusim.pricing import price_persistent, price_program
    from kernels_ir.errors import InputError
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    kw = {} if heads == 1 else {"heads": heads}
    if variant.family == "baseline":   # the CSR kernel: one launch per step (fp32 weights)
        if dtype != "fp32":
            raise InputError(f"dtype={dtype!r}: the CSR kernel in the IR has fp32 weights only; "
                             f"accepted: fp32")
        prog = build_csr_baseline(make_layer(hidden, batch, density, 1, seed, cell=cell, **kw))
        p = price_program(prog, spec, what=variant.name)
    else:
        def build(steps):
            layer = make_layer(hidden, batch, density if variant.sparse else 1.0, steps, seed,
                               cell=cell, **kw)
            if variant.sparse:
                return build_sparse_rnn(layer, spec, sync=variant.sync,
                                        wide_loads=variant.wide_loads, layout=variant.layout,
                                        seed=seed, dtype=dtype)
            return build_dense_rnn(layer, spec, sync=variant.sync,
                                   wide_loads=variant.wide_loads, dtype=dtype)

        if sample_steps is None:      # as many steps as the kernel's scatter needs
            p = price_persistent(build, spec, what=variant.name)
        else:
            p = price_program(build(sample_steps + 2), spec, sample_steps=sample_steps,
                              what=variant.name)
    res = p.result
    # breakdown: the simulated steps' per-SM cycles by category, as seconds per step
    total = res.breakdown.get("total", {})
    bd = {str(k): spec.cycles_to_s(float(v)) / max(1, res.steps) for k, v in total.items()}
    return p.per_step_s, p.setup_s, bd


def simulator(sample_steps: int | None = None, parallel: bool = True, heads: int = 1):
    """The simulator callable that models.analytical.predict_layer asks for (engine sim).

    Every kernel that exists in the IR is priced by :mod:`gpusim.pricing`: the persistent
    kernels with as many steps as their scatter needs (:func:`gpusim.pricing.price_persistent`)
    or, given ``sample_steps``, on a layer of ``sample_steps + 2`` steps (``sample_steps`` of
    them simulated in full, the rest extrapolated), the CSR row-per-warp kernel as one step of its
    CUDA graph. The float64 reference is computed only for the steps simulated, and a value
    mismatch raises :class:`kernels_ir.errors.ValueMismatchError`. ``parallel``: the kernels of a
    layer in worker processes, one per core (off where the caller already runs layers in
    parallel). ``heads``: the layers are multi-head (block-diagonal U, :mod:`models.sparse`).
    """

    def run(spec, variants, hidden, batch, density, seed, cell="rnn", dtype="fp32"):
        """{name: (per_step_s, setup_s, breakdown)}; the kernels are simulated in parallel, one
        process per core (each simulation is independent and deterministic)."""
        jobs = [(sample_steps, spec, v, hidden, batch, density, seed, cell, heads, dtype)
                for v in variants]
        workers = min(len(jobs), os.cpu_count() or 1) if parallel else 1
        if workers <= 1 or hidden * batch < PARALLEL_MIN_WORDS:
            return {v.name: _simulate_one(*job) for v, job in zip(variants, jobs, strict=True)}
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as ex:
            futures = [ex.submit(_simulate_one, *job) for job in jobs]
            return {v.name: f.result() for v, f in zip(variants, futures, strict=True)}

    return run


def _fmt_us(x) -> str:
    return "-" if x is None else f"{x * 1e6:10.2f}"


def main(args) -> int:
    from gpusim.api import predict
    from gpusim.specs import load_spec

    spec = load_spec(args.gpu)
    # gpusim.api.predict: models.analytical.predict_layer with simulator(args.sample_steps)
    pred = predict(spec, hidden=args.hidden, batch=args.batch, density=args.density,
                   timesteps=args.timesteps, cell=args.cell, dtype=args.dtype,
                   engine=args.engine, sample_steps=args.sample_steps, seed=args.seed,
                   heads=args.heads)
    rep, unc = pred.report, pred.uncertainty
    if args.json:
        emit_json(pred.to_dict())
        return 0
    print(f"{spec.full_name}: hidden={rep.hidden} batch={rep.batch} density={rep.density:g} "
          f"cell={rep.cell} dtype={rep.dtype} timesteps={rep.timesteps}")
    print(f"{'kernel':18s} {'fits':4s} {'per step us':>11s} {'80% band us':>13s} "
          f"{'total us':>10s}  engine / limit")
    for r in rep.rows:
        if r.fits:
            extra = r.engine + (f", {r.bound}-bound" if r.bound else "")
            band = unc.rows.get(r.name)
            bt = "" if band is None else f"{band[0] * 1e6:.2f}-{band[1] * 1e6:.2f}"
            print(f"{r.name:18s} {'yes':4s} {_fmt_us(r.per_step_s):>11s} {bt:>13s} "
                  f"{_fmt_us(r.total_s):>10s}  {extra}")
        else:
            print(f"{r.name:18s} {'no':4s} {'-':>11s} {'':>13s} {'-':>10s}  {r.reason}")
    if rep.speedup is not None:
        rng = "" if unc.speedup is None else f" ({unc.speedup[0]:.2f}-{unc.speedup[1]:.2f})"
        print(f"best persistent: {rep.best_persistent}; next best: {rep.next_best}; "
              f"speedup {rep.speedup:.2f}x{rng}")
    else:
        print("no speedup: " + ("no sparse persistent kernel fits" if rep.best_persistent is None
                                else "no alternative fits"))
    if len(unc.contenders) > 1:
        print("could be the fastest persistent kernel on the GPU (80% bands overlap the best's): "
              + ", ".join(unc.contenders))
    if rep.note:
        print(f"note: {rep.note}")
    if pred.heads_note:
        print(f"note: {pred.heads_note}")
    for n in unc.notes:
        print(f"note: {n}")
    if unc.basis:
        print(f"bands: {unc.basis}")
    return 0
