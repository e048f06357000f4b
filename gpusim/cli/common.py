"""Argument helpers shared by the subcommands: one definition of each layer option.

The grammar every command follows:

- ``--json``: a flag; print the result as JSON on stdout (nothing else goes to stdout).
- ``--plot FILE``: write the command's figure as a PNG to FILE.
- lists: comma-separated values, ranges ``start:stop:step`` (stop included when the steps reach
  it exactly, computed in decimal so ``0.01:1.0:0.01`` ends at exactly 1.0) or a mix,
  ``--density 0.01,0.05,0.1:0.5:0.1`` (:func:`parse_list`). Space-separated values
  (``--density 0.01 0.1``) are accepted too, for scripts written before the comma form.
- ``--progress/--no-progress``: a progress bar on stderr for long work; default: on when stderr
  is a terminal.
"""

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
    _check_layer_fits(spec, args.hidden, args.batch, args.density, dense=dense,
                      dtype=getattr(args, "dtype", "fp32"))


def density(text: str) -> float:
    """argparse type: a density in [gpusim.validate.DENSITY_MIN, 1]."""
    try:
        return density_value(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# Largest list a list option expands to: a typo in a range (0.0001:1:0.0001 meant as 0.01:1:0.01)
# is refused before it allocates anything.
LIST_MAX = 100_000


def parse_list(text: str, *, name: str, kind: type = float, maximum: int = LIST_MAX,
               lo=None, hi=None) -> list:
    """The values of a list option: ``a,b,c``, ``start:stop:step`` or a mix (``256:1024:256,2048``).

    ``kind``: ``int``, ``float`` or ``str`` (names: no ranges). Numbers go through
    :func:`gpusim.validate.expand_list`: a range holds ``start + k * step`` for k = 0, 1, ...
    while it is <= ``stop``, computed in decimal arithmetic, so ``0.01:1.0:0.01`` gives 100
    values whose last is exactly 1.0; every value must lie in ``[lo, hi]``; ranges with step <= 0,
    stop < start, non-finite numbers and lists longer than ``maximum`` are refused before anything
    is expanded. Raises ``argparse.ArgumentTypeError`` naming the option and what is accepted.
    """
    from gpusim.validate import expand_list

    accepted = "a comma-separated list 'a,b,c'"
    parts = [part.strip() for part in str(text).split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError(f"{name}={text!r} is empty; accepted: {accepted}")
    if kind is str:
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{name}={text!r} has an empty item; accepted: "
                                             f"{accepted}")
        if len(parts) > maximum:
            raise argparse.ArgumentTypeError(f"{name}: {len(parts)} values; accepted: at most "
                                             f"{maximum}")
        return parts
    try:
        return expand_list(name, str(text), integer=kind is int,
                           lo=-1e300 if lo is None else lo, hi=1e300 if hi is None else hi,
                           max_count=maximum)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def list_arg(name: str, kind: type = float, check=None, lo=None, hi=None):
    """An argparse ``type`` for one token of a list option: :func:`parse_list`, then ``check``
    (a function of one value's text that raises ``argparse.ArgumentTypeError``) on each value.
    Use with :class:`ListAction` so space-separated tokens join into one list."""
    def parse(text: str) -> list:
        values = parse_list(text, name=name, kind=kind, lo=lo, hi=hi)
        if check is not None:
            values = [check(str(v)) for v in values]
        return values
    parse.__name__ = f"{name} list"
    return parse


class ListAction(argparse.Action):
    """Joins the lists of one or more tokens (``--density 0.01,0.1 0.3``) into one list."""

    def __init__(self, option_strings, dest, nargs="+", **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        flat = [v for token in values for v in (token if isinstance(token, list) else [token])]
        if len(flat) > LIST_MAX:
            parser.error(f"{option_string} has {len(flat):,} values; at most {LIST_MAX:,} are "
                         f"accepted")
        setattr(namespace, self.dest, flat)


def add_list_argument(p: argparse.ArgumentParser, flag: str, *, kind: type = float, check=None,
                      default=None, default_text: str | None = None, help: str = "",
                      metavar: str | None = None, lo=None, hi=None) -> None:
    """A list option in the one grammar: comma-separated values and ``start:stop:step`` ranges
    (see :func:`parse_list`); space-separated tokens are joined too. ``default_text``: how --help
    shows the default (default: the values joined by commas)."""
    name = flag.lstrip("-")
    form = "comma-separated" if kind is str else "comma-separated values or start:stop:step"
    text = f"{help}; {form}" if help else form
    if default is not None:
        shown = default_text if default_text is not None else ",".join(map(str, default))
        text += f" (default: {shown})"
    p.add_argument(flag, type=list_arg(name, kind, check, lo, hi), action=ListAction,
                   default=default,
                   metavar=metavar or name.upper().replace("-", "_") + "[,...]", help=text)


def add_output_arguments(p: argparse.ArgumentParser, *, plot: str | None = None,
                         progress: bool = False) -> None:
    """``--json`` (flag), ``--plot FILE`` when the command draws ``plot``, and
    ``--progress/--no-progress`` when it does long work: the same meaning in every command."""
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    if plot is not None:
        p.add_argument("--plot", metavar="FILE", default=None, help=f"write {plot} to FILE (PNG)")
    if progress:
        p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="progress bar on stderr (default: on when stderr is a terminal)")


def show_progress(args) -> bool:
    """The resolved ``--progress/--no-progress`` of ``args``: on when stderr is a terminal."""
    value = getattr(args, "progress", None)
    if value is None:
        try:
            return sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(value)


def check_plot_path(args) -> None:
    """Refuse a ``--plot`` path that is not a PNG before any long work."""
    if getattr(args, "plot", None):
        from gpusim.plots.style import check_png_path

        check_png_path(args.plot)


def add_layer_arguments(p: argparse.ArgumentParser, timesteps: bool = True) -> None:
    """--gpu --hidden --batch --density [--timesteps] --seed, as every layer command takes them."""
    p.add_argument("--gpu", default="v100", help="GPU spec name or .toml path (see 'gpusim specs')")
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


def add_cell_arguments(p: argparse.ArgumentParser) -> None:
    """The recurrent cell and the weights' precision of the persistent kernels."""
    p.add_argument("--cell", choices=("rnn", "gru", "lstm"), default="rnn",
                   help="recurrent cell (gru: 3 gates, lstm: 4 gates; the gate rows of a unit "
                   "are computed by one warp, and only h is exchanged)")
    p.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32",
                   help="weight precision (fp16: the weights rounded to fp16, one 32-bit word "
                   "per sparse slot with a 16-bit column address, fp32 arithmetic)")


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
