"""The ``gpusim`` console script.

Each subcommand lives in its own module ``gpusim.cli.<name>`` that defines
``add_arguments(parser)`` and ``main(args) -> int``; modules are imported only when their command
runs, so ``gpusim predict`` stays fast. :func:`gpusim.validate.check_args` checks the parsed line
(outputs, bounds, the GPU spec) before the command runs. Every :class:`InputError`, a
:class:`ValueMismatchError` (values that differ from the float64 reference), a
:class:`DeadlockError` (a kernel that cannot finish), an output that cannot be written (OSError)
and running out of memory become one line on stderr and exit status 2. A closed stdout
(``gpusim specs | head -1``) ends the command quietly with status 141, as a shell reports a
command ended by SIGPIPE. The grammar shared by every command (``--json``, ``--plot FILE``,
lists, ``--progress``) is described in :mod:`gpusim.cli.common`.
"""

from __future__ import annotations

import argparse
import importlib
import os
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


DESCRIPTION = ("gpusim: a cycle-approximate GPU model, kernel IR and performance model for "
               "persistent sparse RNN kernels")
GRAMMAR = """\
every command: --json prints the result as JSON on stdout; --plot FILE writes its figure (PNG);
lists are comma-separated values or start:stop:step ranges (--density 0.01,0.1,0.3 or
--hidden 256:4096:256); --progress/--no-progress (default: on when stderr is a terminal).
'gpusim COMMAND --help' shows each option and its default. Python API: import gpusim."""

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for `cmd | head` when cmd is cut


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one line (argparse's own usage error behaviour, kept short)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every option's default in --help, except where the help text already says it or
    there is nothing to show (no default, a plain flag)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("%(default)" in text or "default" in text.lower() or action.default is None
                or action.default is False or action.default is argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)

    def _format_args(self, action, default_metavar):
        from gpusim.cli.common import ListAction

        if isinstance(action, ListAction):  # one documented form: A,B,C (not "A [A ...]")
            return self._metavar_formatter(action, default_metavar)(1)[0]
        return super()._format_args(action, default_metavar)


class _VersionAction(argparse.Action):
    """``--version``: looked up only when asked for (importlib.metadata is not free)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version and exit"):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from gpusim import __version__

        print(f"gpusim {__version__}")
        parser.exit(0)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="gpusim", description=DESCRIPTION, epilog=GRAMMAR,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=_HelpFormatter)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(p)
    return parser


# numpy submodules that no command uses but that scipy's array-API layer imports when scipy is
# imported (scipy._lib.array_api_compat copies numpy's namespace name by name, and each of these
# loads on first access): numpy.f2py and numpy.testing alone took 0.1 s of `gpusim predict`.
_DEFERRED_NUMPY = ("f2py", "testing", "polynomial", "ctypeslib", "char", "rec")


def _defer_numpy_modules() -> None:
    """Load the numpy submodules of :data:`_DEFERRED_NUMPY` on first use instead
    (:class:`importlib.util.LazyLoader`: the module object exists at once, its code runs when
    an attribute of it is first read). Nothing else changes. Only before scipy is imported, and
    only for submodules not loaded yet; any failure leaves numpy as it was (a speed-up only)."""
    if "scipy._lib._array_api" in sys.modules:
        return
    try:
        import importlib.util

        import numpy
    except ImportError:
        return
    for name in _DEFERRED_NUMPY:
        full = f"numpy.{name}"
        if full in sys.modules or name in vars(numpy):
            continue
        try:
            spec = importlib.util.find_spec(full)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                continue
            spec.loader = importlib.util.LazyLoader(spec.loader)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[full] = mod
            spec.loader.exec_module(mod)
        except Exception:  # noqa: BLE001 - a speed-up only: leave this one as it was
            sys.modules.pop(full, None)
            continue
        setattr(numpy, name, mod)   # `import numpy.X as X` reads the attribute


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "numpy" not in sys.modules:
        # One BLAS thread unless the caller chose otherwise: no command multiplies matrices
        # large enough for OpenBLAS's threads to pay, and starting its thread pool (when numpy
        # loads) took 0.05-0.1 s of every `gpusim predict`.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _defer_numpy_modules()
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
        rc = int(module.main(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return rc
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
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


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the exit flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (captured in tests)
        pass


def _fail(message: str) -> int:
    """One line on stderr (a message's own line breaks are folded), exit status 2."""
    print("error: " + " ".join(message.split()), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
