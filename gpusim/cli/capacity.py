"""``gpusim capacity``: the largest hidden size that fits, sparse and dense, and the limit.

Registers per thread (weights and indices held for the whole sequence) and shared memory (the
staged h) are the two limits; see :mod:`models.capacity` for the arithmetic.
"""

from __future__ import annotations

import argparse

from gpusim.cli.common import emit_json, positive_int


def add_arguments(p: argparse.ArgumentParser) -> None:
    from gpusim.cli.common import density

    p.add_argument("--gpu", default="v100", help="GPU spec name or .toml path; default v100")
    p.add_argument("--density", type=density, nargs="+", default=[0.01, 0.05, 0.1, 0.3, 1.0],
                   help="one or more densities (fraction of nonzero weights)")
    p.add_argument("--batch", type=positive_int("batch"), default=4, help="batch size B")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                   help="weight precision (fp16: 16-bit values and 16-bit indices)")
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _entry(m) -> dict:
    return {"hidden": m.hidden, "limit": m.limit, "message": m.message,
            "registers_per_thread": m.registers, "smem_bytes": m.smem_bytes}


def main(args) -> int:
    from gpusim.specs import load_spec
    from kernels_ir.errors import InputError
    from models.capacity import capacity_table

    spec = load_spec(args.gpu)
    if args.batch > 1024:
        raise InputError(f"batch={args.batch} is absurd for a recurrent layer; accepted: 1..1024")
    table = capacity_table(spec, args.density, args.batch, cell=args.cell, dtype=args.dtype)
    if args.json:
        emit_json({"gpu": spec.name, "batch": args.batch, "dtype": args.dtype, "cell": args.cell,
                   "max_hidden": {
                       "sparse": [{"density": row["density"], **_entry(row["sparse"])}
                                  for row in table],
                       "dense": _entry(table[0]["dense"])}})
        return 0
    print(f"{spec.full_name}: batch={args.batch} dtype={args.dtype} cell={args.cell}")
    print(f"{'density':>8s} {'sparse max N':>12s}  binding limit")
    for row in table:
        s = row["sparse"]
        print(f"{row['density']:8g} {s.hidden:12d}  {s.message}")
    d = table[0]["dense"]
    print(f"{'dense':>8s} {d.hidden:12d}  {d.message}")
    return 0
