"""Regenerate every ``notebooks/NN_name.ipynb`` from its jupytext percent-format ``.py`` source.

    python notebooks/build.py            # write the .ipynb files (no outputs)
    python notebooks/build.py --check    # exit 1 if any .ipynb is missing or out of date

The ``.py`` files are the reviewed source; the ``.ipynb`` files are generated and never edited by
hand. ``tests/test_notebooks.py`` runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext

HERE = Path(__file__).resolve().parent


def sources() -> list[Path]:
    """The notebook sources: ``NN_*.py`` in this folder, in order."""
    return sorted(p for p in HERE.glob("[0-9][0-9]_*.py"))


def cell_sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def in_sync(py: Path) -> bool:
    ipynb = py.with_suffix(".ipynb")
    if not ipynb.is_file():
        return False
    return cell_sources(jupytext.read(py)) == cell_sources(jupytext.read(ipynb))


def build(py: Path) -> Path:
    nb = jupytext.read(py)
    for i, cell in enumerate(nb.cells):  # stable ids: a rebuild changes nothing it need not
        cell["id"] = f"{py.stem[:2]}-{i:02d}"
    out = py.with_suffix(".ipynb")
    jupytext.write(nb, out, fmt="ipynb")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only check that the .ipynb are in sync")
    args = p.parse_args(argv)
    stale = []
    for py in sources():
        if args.check:
            if not in_sync(py):
                stale.append(py.name)
        else:
            print(f"wrote {build(py).relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python notebooks/build.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
