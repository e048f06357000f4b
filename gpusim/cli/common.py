"""Argument helpers shared by the subcommands: one definition of each layer option."""

from __future__ import annotations

import argparse
import json
import sys

from kernels_ir.errors import InputError

# Upper bounds that keep a typo from allocating tens of GB before any check can refuse it. No
# bundled GPU holds a persistent layer anywhere near them ('gpusim capacity' gives the real limit).
HIDDEN_MAX = 1 << 16
BATCH_MAX = 1024
TIMESTEPS_MAX = 100_000
NNZ_MAX = 50_000_000  # nonzeros the layout/mapping tools analyse (about 3.5 GB at the peak)


def _int_arg(name: str, minimum: int, too_small: str, maximum: int | None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{name}={value} {too_small}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{name}={value} is too large; accepted "
                                             f"{minimum}..{maximum}")
        return value
    return parse


def positive_int(name: str, maximum: int | None = None):
    return _int_arg(name, 1, "must be a positive integer", maximum)


def nonnegative_int(name: str):
    return _int_arg(name, 0, "must be >= 0", None)


def check_nnz(hidden: int, density: float, rows: int | None = None) -> None:
    """Refuse, before allocating, a matrix larger than the analysis tools handle."""
    nnz = (hidden if rows is None else rows) * hidden * density
    if nnz > NNZ_MAX:
        raise InputError(f"hidden={hidden} at density {density:g} has about {nnz:.3g} nonzeros; "
                         f"this tool analyses at most {NNZ_MAX:.0e}")


def check_layer_fits(spec, args, dense: bool = False) -> None:
    """Refuse, *before* its matrix is generated, a layer that certainly does not fit: its weights
    (and indices) alone exceed the whole GPU's register file, or h exceeds shared memory (a
    10^6-wide layer would otherwise allocate gigabytes first). Layers near the limit are left to
    the kernel builder, which decides on the real matrix. The message is the capacity model's:
    the limit and the largest size that fits."""
    n, b = args.hidden, args.batch
    regs_per_weight = 1 if dense else 2
    weights = n * n * (1.0 if dense else args.density) * regs_per_weight
    if weights > spec.sm_count * spec.regs_per_sm or 4 * n * b > spec.smem_bytes_per_cta:
        from models.capacity import check

        check(spec, n, b, 1.0 if dense else args.density, dense=dense, exact=False)
        raise InputError(f"hidden={n} batch={b} does not fit on {spec.name}")  # not reached


def density(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"density={text!r} is not a number") from None
    if not (0.0 < value <= 1.0):
        raise argparse.ArgumentTypeError(f"density={value} is outside (0, 1]")
    return value


def add_layer_arguments(p: argparse.ArgumentParser, timesteps: bool = True) -> None:
    """--gpu --hidden --batch --density [--timesteps] --seed, as every layer command takes them."""
    p.add_argument("--gpu", default="v100", help="GPU spec name (see 'gpusim specs'); default v100")
    p.add_argument("--hidden", type=positive_int("hidden", HIDDEN_MAX), default=1152,
                   help="hidden size N")
    p.add_argument("--batch", type=positive_int("batch", BATCH_MAX), default=4,
                   help="batch size B")
    p.add_argument("--density", type=density, default=0.1, help="fraction of nonzero weights")
    if timesteps:
        p.add_argument("--timesteps", type=positive_int("timesteps", TIMESTEPS_MAX), default=16,
                       help="number of recurrent steps T")
    p.add_argument("--seed", type=nonnegative_int("seed"), default=0,
                   help="random seed for weights and inputs")


def add_kernel_arguments(p: argparse.ArgumentParser) -> None:
    """The persistent kernel's switches."""
    p.add_argument("--sync", choices=("lamport", "barrier"), default="lamport",
                   help="inter-CTA synchronisation between steps")
    p.add_argument("--wide-loads", action=argparse.BooleanOptionalAction, default=True,
                   help="one 64/128-bit shared load per nonzero instead of B 32-bit loads")
    p.add_argument("--layout", choices=("naive", "random", "greedy", "optimal"), default="naive",
                   help="order of each row's nonzeros over (lane, slot)")


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def fail(message: str) -> None:
    raise InputError(message)
