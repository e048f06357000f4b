"""The ``gpusim`` console script.

Each subcommand lives in its own module ``gpusim.cli.<name>`` that defines
``add_arguments(parser)`` and ``main(args) -> int``; modules are imported only when their command
runs, so ``gpusim predict`` stays fast. :func:`gpusim.validate.check_args` checks the parsed line
(outputs, bounds, the GPU spec) before the command runs. Every :class:`InputError`, a
:class:`ValueMismatchError` (values that differ from the float64 reference), a
:class:`DeadlockError` (a kernel that cannot finish), an output that cannot be written (OSError)
and running out of memory become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kernels_ir.errors import DeadlockError, InputError, ValueMismatchError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("gpusim.cli.run", "build the persistent RNN kernel, execute it, check values"),
    "ir": ("gpusim.cli.ir", "print the IR of a kernel"),
    "simulate": ("gpusim.cli.simulate", "simulate a layer cycle-approximately on a GPU model"),
    "specs": ("gpusim.cli.specs", "list the GPU spec files and their values"),
    "banks": ("gpusim.cli.banks", "shared-memory bank-conflict analysis of a weight layout"),
    "predict": ("gpusim.cli.predict", "predict per-step time and speedup for a layer"),
    "capacity": ("gpusim.cli.capacity", "largest layer that fits, and the binding limit"),
    "sweep": ("gpusim.cli.sweep", "sweep predictions over sizes, batches, densities and GPUs"),
    "crosscheck": ("gpusim.cli.crosscheck", "compare the simulator with recorded GPU measurements"),
    "mapping": ("gpusim.cli.mapping", "where every weight lives: SM, warp, lane and register slot"),
    "timeline": ("gpusim.cli.timeline", "simulate barrier and Lamport for one layer, per-SM "
                 "timelines"),
}


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (argparse's own usage error behaviour, kept short)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="gpusim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        command = None
    try:
        parser = build_parser(only=command)
    except ModuleNotFoundError as exc:  # a subcommand not built yet
        print(f"error: command {command!r} is not available ({exc})", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        from gpusim.validate import check_args

        check_args(args.command, args)  # every check that needs no work, before any work
        return int(module.main(args) or 0)
    except (InputError, ValueMismatchError, DeadlockError) as exc:
        return _fail(str(exc))
    except OSError as exc:  # an output that could not be written after all
        where = f"{exc.filename}: " if exc.filename is not None else ""
        return _fail(f"cannot write or read {where}{exc.strerror or exc}")
    except MemoryError:
        return _fail("out of memory; try a smaller layer or fewer values")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _fail(message: str) -> int:
    """One line on stderr (a message's own line breaks are folded), exit status 2."""
    print("error: " + " ".join(message.split()), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
