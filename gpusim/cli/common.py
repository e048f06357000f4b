"""Argument helpers shared by the subcommands: one definition of each layer option."""

from __future__ import annotations

import argparse
import json
import sys

from kernels_ir.errors import InputError


def positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} is not an integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name}={value} must be a positive integer")
        return value
    return parse


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
    p.add_argument("--hidden", type=positive_int("hidden"), default=1152, help="hidden size N")
    p.add_argument("--batch", type=positive_int("batch"), default=4, help="batch size B")
    p.add_argument("--density", type=density, default=0.1, help="fraction of nonzero weights")
    if timesteps:
        p.add_argument("--timesteps", type=positive_int("timesteps"), default=16,
                       help="number of recurrent steps T")
    p.add_argument("--seed", type=int, default=0, help="random seed for weights and inputs")


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
