"""Data flows one way (DESIGN.md section 7): the imports of each package are held to it.

kernels_ir is the bottom layer (the kernel builders may use models.sparse/reference at run time
for the layer data and the reference, which sit beside the IR, not above it); models may read
gpusim.specs but never the simulator engine, so model and simulator stay independent witnesses.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "kernels_ir": ("gpusim",),
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
