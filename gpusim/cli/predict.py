"""``gpusim predict``: per-step and total time of every kernel and baseline for one layer.

The analytical model answers by default (well under a second); ``--engine sim`` runs the
persistent kernels on the simulator (``gpusim.engine``) and keeps the model for the baselines.
Layers that do not fit are reported with the binding limit, never with a time.
"""

from __future__ import annotations

import argparse

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
                   help="analytical model (fast) or the simulator for the persistent kernels")
    p.add_argument("--sample-steps", type=positive_int("sample-steps"), default=3,
                   help="--engine sim: steps simulated in full before extrapolating")
    p.add_argument("--seed", type=nonnegative_int("seed"), default=0,
                   help="seed of the random layer")
    add_output_arguments(p)


def simulator(sample_steps: int):
    """The simulator callable that models.analytical.predict_layer asks for (engine sim)."""

    def run(spec, variant, hidden, batch, density, seed):
        from gpusim.engine import simulate
        from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

        layer = make_layer(hidden, batch, density if variant.sparse else 1.0,
                           sample_steps + 2, seed)
        if variant.sparse:
            prog = build_sparse_rnn(layer, spec, sync=variant.sync, wide_loads=variant.wide_loads,
                                    layout=variant.layout, seed=seed)
        else:
            prog = build_dense_rnn(layer, spec, sync=variant.sync, wide_loads=variant.wide_loads)
        res = simulate(prog.kernel, prog.inputs, spec, sample_steps=sample_steps)
        # breakdown: the simulated steps' per-SM cycles by category, as seconds per step
        total = res.breakdown.get("total", {})
        bd = {str(k): spec.cycles_to_s(float(v)) / max(1, res.steps) for k, v in total.items()}
        # set-up: launch plus everything outside the steady steps (weights arriving, first step)
        setup = float(res.time_s) - res.total_steps * float(res.per_step_s)
        return float(res.per_step_s), setup, bd

    return run


def _fmt_us(x) -> str:
    return "-" if x is None else f"{x * 1e6:10.2f}"


def main(args) -> int:
    from gpusim.api import predict
    from gpusim.specs import load_spec

    spec = load_spec(args.gpu)
    # gpusim.api.predict: models.analytical.predict_layer with simulator(args.sample_steps)
    rep = predict(spec, hidden=args.hidden, batch=args.batch, density=args.density,
                  timesteps=args.timesteps, cell=args.cell, dtype=args.dtype, engine=args.engine,
                  sample_steps=args.sample_steps, seed=args.seed).report
    if args.json:
        emit_json(rep.as_dict())
        return 0
    print(f"{spec.full_name}: hidden={rep.hidden} batch={rep.batch} density={rep.density:g} "
          f"cell={rep.cell} dtype={rep.dtype} timesteps={rep.timesteps}")
    print(f"{'kernel':18s} {'fits':4s} {'per step us':>11s} {'total us':>10s}  engine / limit")
    for r in rep.rows:
        if r.fits:
            extra = r.engine + (f", {r.bound}-bound" if r.bound else "")
            print(f"{r.name:18s} {'yes':4s} {_fmt_us(r.per_step_s):>11s} "
                  f"{_fmt_us(r.total_s):>10s}  {extra}")
        else:
            print(f"{r.name:18s} {'no':4s} {'-':>11s} {'-':>10s}  {r.reason}")
    if rep.speedup is not None:
        print(f"best persistent: {rep.best_persistent}; next best: {rep.next_best}; "
              f"speedup {rep.speedup:.2f}x")
    else:
        print("no speedup: " + ("no sparse persistent kernel fits" if rep.best_persistent is None
                                else "no alternative fits"))
    if rep.note:
        print(f"note: {rep.note}")
    return 0
