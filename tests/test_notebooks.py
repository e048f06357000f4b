"""Every notebook runs top to bottom (small sizes), its .ipynb is in sync, and it stays honest.

The notebooks are jupytext percent-format ``notebooks/NN_name.py`` files; ``notebooks/build.py``
generates the ``.ipynb`` and executes them, so they are committed with their outputs. Each
notebook reads ``GPUSIM_NB_SMALL=1`` to shrink its sizes, so the suite runs all of them in
seconds; the slow test runs them at their default sizes and holds each to a 2-minute budget.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]_*.py"))
IDS = [p.stem for p in NOTEBOOKS]
# what a notebook may import: the project's public packages and a few standard modules
ALLOWED = {"kernels_ir", "gpusim", "models", "numpy", "os", "dataclasses", "collections",
           "tempfile", "pathlib", "json", "math"}
BUDGET_S = 120.0  # each notebook runs in under 2 minutes at its default sizes


def _run(nb: Path, tmp_path: Path, small: bool, **extra_env: str
         ) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, **extra_env)
    env["MPLBACKEND"] = "Agg"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if small:
        env["GPUSIM_NB_SMALL"] = "1"
    else:
        env.pop("GPUSIM_NB_SMALL", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(nb)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    return proc, time.perf_counter() - t0


def _build_module():
    spec = importlib.util.spec_from_file_location("nb_build", NB_DIR / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_six_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"], IDS


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebook_runs_small(nb, tmp_path):
    proc, _ = _run(nb, tmp_path, small=True)
    assert proc.returncode == 0, f"{nb.name} raised:\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip(), f"{nb.name} printed nothing"


def test_hardware_notebook_runs_without_measurements(tmp_path):
    """Notebook 6 must still run (and say so) when the measurement directory is empty."""
    nb = next(p for p in NOTEBOOKS if p.name.startswith("06_"))
    empty = tmp_path / "no_data"
    empty.mkdir()
    proc, _ = _run(nb, tmp_path, small=True, GPUSIM_NB_DATA=str(empty))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "no usable measurements" in proc.stdout


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_ipynb_is_generated_and_in_sync(nb):
    build = _build_module()
    assert nb.with_suffix(".ipynb").is_file(), f"run python notebooks/build.py ({nb.name})"
    assert build.in_sync(nb), f"{nb.stem}.ipynb is out of date: run python notebooks/build.py"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_ipynb_is_executed_with_its_figures(nb):
    """The committed .ipynb was executed by notebooks/build.py: every code cell ran, none raised,
    and at least one figure is there to see without running anything."""
    import json

    doc = json.loads(nb.with_suffix(".ipynb").read_text())
    code = [c for c in doc["cells"] if c["cell_type"] == "code"]
    assert code, nb.name
    unrun = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not unrun, f"{nb.stem}.ipynb: code cells {unrun} were not executed (run build.py)"
    outputs = [o for c in code for o in c.get("outputs", [])]
    errors = [o.get("ename") for o in outputs if o["output_type"] == "error"]
    assert not errors, f"{nb.stem}.ipynb: cells raised {errors}"
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert figures, f"{nb.stem}.ipynb has no figure output"
    assert all(len(o["data"]["image/png"]) > 5_000 for o in figures)   # base64 of a real PNG
    assert sum(o["output_type"] == "stream" for o in outputs) >= 1, "no printed output"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_ipynb_code_cells_equal_the_source(nb):
    """Code cells compared directly (no jupytext): what the .ipynb shows is what the .py says."""
    import json

    import jupytext

    doc = json.loads(nb.with_suffix(".ipynb").read_text())
    got = ["".join(c["source"]).strip() for c in doc["cells"] if c["cell_type"] == "code"]
    want = [c.source.strip() for c in jupytext.read(nb).cells if c.cell_type == "code"]
    assert got == want, f"{nb.stem}.ipynb differs from {nb.name}: run python notebooks/build.py"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebook_uses_public_api_and_library_plots(nb):
    """Imports only the project's packages (no matplotlib: figures come from gpusim.plots)."""
    tree = ast.parse(nb.read_text())
    bad = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        for name in names:
            top = name.split(".")[0]
            if top not in ALLOWED or any(part.startswith("_") for part in name.split(".")):
                bad.append(name)
    assert not bad, f"{nb.name} imports {bad}; allowed: {sorted(ALLOWED)} (public modules)"
    text = nb.read_text()
    assert "plt." not in text and "matplotlib" not in text, f"{nb.name} plots by itself"
    assert "GPUSIM_NB_SMALL" in text, f"{nb.name} has no SIZE knob"
    assert "show(" in text, f"{nb.name} shows no figure"


def test_notebook_figures_display_in_a_kernel(tmp_path):
    """Executed by a Jupyter kernel, a notebook's figures arrive as PNG display outputs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOKS[0].with_suffix(".ipynb"), as_version=4)
    old = {k: os.environ.get(k) for k in ("GPUSIM_NB_SMALL", "PYTHONPATH")}
    os.environ["GPUSIM_NB_SMALL"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), old["PYTHONPATH"] or ""])
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    pngs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "image/png" in o.get("data", {})]
    assert len(pngs) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=IDS)
def test_notebook_default_sizes_within_budget(nb, tmp_path):
    proc, seconds = _run(nb, tmp_path, small=False)
    assert proc.returncode == 0, f"{nb.name} raised:\n{proc.stderr[-4000:]}"
    assert seconds < BUDGET_S, f"{nb.name} took {seconds:.0f} s at its default sizes"
