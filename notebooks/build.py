"""Generate every ``notebooks/NN_name.ipynb`` from its jupytext percent-format ``.py`` source and
execute it, so the committed notebooks carry their outputs and figures.

    python notebooks/build.py                # convert and execute all six (minutes of CPU)
    python notebooks/build.py 03 05          # only the notebooks whose names start so
    python notebooks/build.py --no-execute   # convert only (no outputs)
    python notebooks/build.py --check        # exit 1 if an .ipynb is missing or its cells differ
                                             # from its .py source

The ``.py`` files are the reviewed source; the ``.ipynb`` files are generated and never edited by
hand. Execution runs one notebook at a time in a Jupyter kernel (``nbclient``, ``ipykernel``:
``pip install ".[notebooks]"``) whose working directory is a temporary folder, with this checkout
first on ``PYTHONPATH``; a cell that raises stops the build. ``GPUSIM_NB_SMALL=1`` in the
environment runs the notebooks at their small sizes (for a quick look, not for committing).
``tests/test_notebooks.py`` checks that the notebooks are in sync and carry their figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CELL_TIMEOUT_S = 900          # one cell (notebook 6 simulates a share of the recorded cases)


def sources() -> list[Path]:
    """The notebook sources: ``NN_*.py`` in this folder, in order."""
    return sorted(p for p in HERE.glob("[0-9][0-9]_*.py"))


def cell_sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def in_sync(py: Path) -> bool:
    """The .ipynb has the same cells (type and source, code and markdown) as its .py source."""
    import jupytext

    ipynb = py.with_suffix(".ipynb")
    if not ipynb.is_file():
        return False
    return cell_sources(jupytext.read(py)) == cell_sources(jupytext.read(ipynb))


def convert(py: Path):
    """The notebook of ``py`` with stable cell ids (a rebuild changes nothing it need not)."""
    import jupytext

    nb = jupytext.read(py)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{py.stem[:2]}-{i:02d}"
    return nb


def execute(nb, timeout: int = CELL_TIMEOUT_S):
    """Run ``nb`` top to bottom in a fresh python3 kernel (in a temporary working directory)."""
    import nbclient

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([old] if old else []))
    try:
        with tempfile.TemporaryDirectory(prefix="gpusim_nb_") as tmp:
            client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                             record_timing=False,
                                             resources={"metadata": {"path": tmp}})
            client.execute()
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return nb


def build(py: Path, run: bool = True) -> Path:
    import jupytext

    nb = convert(py)
    if run:
        execute(nb)
    out = py.with_suffix(".ipynb")
    jupytext.write(nb, out, fmt="ipynb")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("only", nargs="*", help="build only notebooks whose names start with these")
    p.add_argument("--check", action="store_true", help="only check that the .ipynb are in sync")
    p.add_argument("--no-execute", action="store_true", help="convert without running")
    args = p.parse_args(argv)
    chosen = [py for py in sources() if not args.only or py.name.startswith(tuple(args.only))]
    if not chosen:
        print(f"no notebook matches {args.only}; accepted: "
              f"{', '.join(py.name[:2] for py in sources())}", file=sys.stderr)
        return 2
    if args.check:
        stale = [py.name for py in chosen if not in_sync(py)]
        if stale:
            print("out of date (run python notebooks/build.py): " + ", ".join(stale),
                  file=sys.stderr)
            return 1
        return 0
    for py in chosen:
        t0 = time.perf_counter()
        out = build(py, run=not args.no_execute)
        print(f"wrote {out.relative_to(ROOT)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
