"""Data flows one way (docs/ARCHITECTURE.md, "Packages and layering"): each package's imports
are held to it.

kernels_ir is the bottom layer: it never imports gpusim, nor the analytical or capacity model
(results side). It may use models.sparse and models.reference, the layer's data and its float64
reference, which are inputs beside the IR rather than results above it. models may read
gpusim.specs but never the simulator engine, so model and simulator stay independent witnesses.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "kernels_ir": ("gpusim", "models.analytical", "models.capacity"),
    "models": ("gpusim.engine", "gpusim.backends", "gpusim.cli", "gpusim.plots"),
}


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:  # `from gpusim import engine` names gpusim.engine
                yield node.lineno, f"{node.module}.{alias.name}"


def test_layering_holds():
    bad = []
    for package, forbidden in FORBIDDEN.items():
        files = sorted((ROOT / package).rglob("*.py"))
        assert files, package
        for f in files:
            for line, name in _imports(f):
                if any(name == x or name.startswith(x + ".") for x in forbidden):
                    bad.append(f"{f.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "layering violated:\n" + "\n".join(bad)
