"""``gpusim capacity``: the largest hidden size that fits, sparse and dense, and the limit.

Registers per thread (weights and indices held for the whole sequence) and shared memory (the
staged h) are the two limits; see :mod:`models.capacity` for the arithmetic. The numbers come
from :func:`gpusim.api.capacity`; this command only formats them.
"""

from __future__ import annotations

import argparse

from gpusim.cli.common import add_list_argument, add_output_arguments, emit_json, positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpusim.cli.common import density

    p.add_argument("--gpu", default="v100", help="GPU spec name or .toml path")
    add_list_argument(p, "--density", check=density, default=[0.01, 0.05, 0.1, 0.3, 1.0],
                      help="densities (fractions of nonzero weights)")
    p.add_argument("--batch", type=positive_int("batch"), default=4, help="batch size B")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                   help="weight precision (fp16: 16-bit values and 16-bit indices)")
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn",
                   help="recurrent cell (gru: 3 gates, lstm: 4 gates of weights)")
    p.add_argument("--heads", type=positive_int("heads"), default=1,
                   help="heads H of a multi-head layer (block-diagonal U, the density within "
                        "its blocks): sizes are multiples of H; also shows the largest with "
                        "whole heads per CTA (no grid-wide sync)")
    add_output_arguments(p)


def main(args) -> int:
    from gpusim.api import capacity

    cap = capacity(args.gpu, density=args.density, batch=args.batch, dtype=args.dtype,
                   cell=args.cell, heads=args.heads)
    if args.json:
        emit_json(cap.to_dict())
        return 0
    heads = f" heads={cap.heads}" if cap.heads > 1 else ""
    print(f"{cap.gpu_name}: batch={cap.batch} dtype={cap.dtype} cell={cap.cell}{heads}")
    if cap.heads == 1:
        print(f"{'density':>8s} {'sparse max N':>12s}  binding limit")
        for s in cap.sparse:
            print(f"{s.density:8g} {s.hidden:12d}  {s.message}")
        d = cap.dense
        print(f"{'dense':>8s} {d.hidden:12d}  {d.message}")
        return 0
    print(f"{'density':>8s} {'max N':>8s} {'CTA-local':>9s}  binding limit (either exchange; "
          f"CTA-local: whole heads per CTA, no grid-wide sync)")
    for s, loc in zip((*cap.sparse, cap.dense), (*cap.sparse_local, cap.dense_local),
                      strict=True):
        name = "dense" if s.kernel == "dense" else f"{s.density:g}"
        print(f"{name:>8s} {s.hidden:8d} {loc.hidden:9d}  {s.message}")
        if loc.limit == "whole heads per CTA":
            print(f"{'':>28s}{loc.message}")
    return 0
