"""Argument helpers shared by the subcommands: one definition of each layer option."""

from __future__ import annotations

import argparse
import json
import sys

# Upper bounds that keep a typo from allocating tens of GB before any check can refuse it (one
# definition, in gpusim.validate, with the reasons). No bundled GPU holds a persistent layer
# anywhere near them ('gpusim capacity' gives the real limit).
from gpusim.validate import (
    BATCH_MAX,
    HIDDEN_MAX,
    NNZ_MAX,
    SEED_MAX,
    TIMESTEPS_MAX,
    check_nnz,
    density_value,
)
from gpusim.validate import check_layer_fits as _check_layer_fits
from kernels_ir.errors import InputError

__all__ = ["BATCH_MAX", "HIDDEN_MAX", "NNZ_MAX", "TIMESTEPS_MAX", "check_nnz", "positive_int",
           "nonnegative_int", "check_layer_fits", "density", "add_layer_arguments",
           "add_kernel_arguments", "emit_json", "fail"]


def _int_arg(name: str, minimum: int, too_small: str, maximum: int | None):
    def parse(text: str) -> int:
        try:
            if len(text) > 40:  # no count here has 40 digits; int() would take 5000
                raise ValueError
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text[:40]!r} is not an integer of at "
                                             f"most 40 characters") from None
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
    return _int_arg(name, 0, "must be >= 0", SEED_MAX if name == "seed" else None)


def check_layer_fits(spec, args, dense: bool = False) -> None:
    """:func:`gpusim.validate.check_layer_fits` for the layer options of ``args``."""
    _check_layer_fits(spec, args.hidden, args.batch, args.density, dense=dense)


def density(text: str) -> float:
    """argparse type: a density in [gpusim.validate.DENSITY_MIN, 1]."""
    try:
        return density_value(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
