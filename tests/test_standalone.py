"""The repository stands alone: no tracked text file points to a file outside it.

Every citation must be followable from a clone: documentation lives in ``docs/``, measurements in
``measurements/``. Recorded tool output under ``measurements/<gpu>/`` (campaign logs, compiler
messages) is kept verbatim and is not checked: the paths in it are what the tools printed on the
measuring machine, not references.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".md", ".toml", ".ipynb", ".cu", ".txt")
# written in two parts so that this file does not match itself
FORBIDDEN = ["/wo" + "rk/", "../sha" + "red", "shared/refe" + "rence", "DESI" + "GN.md",
             "KIN" + "DS.md", "STY" + "LE.md", "hw_par" + "ams.md", "cuda_back" + "end.md"]
VERBATIM = ("measurements/h100/", "measurements/h200/")


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    names = [n for n in out.stdout.decode().split("\0") if n]
    return [ROOT / n for n in names if n.endswith(SUFFIXES) and not n.startswith(VERBATIM)]


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_text_files()
    assert len(files) > 100, len(files)
    hits = []
    for path in files:
        if not path.is_file():   # deleted in the work tree, not yet committed
            continue
        for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for word in FORBIDDEN:
                if word in line:
                    hits.append(f"{path.relative_to(ROOT)}:{no}: {word}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits[:40])


def test_the_documentation_the_sources_point_to_exists():
    for page in ("docs/hardware_sources.md", "docs/cuda_notes.md", "docs/ARCHITECTURE.md",
                 "measurements/README.md", "LICENSE"):
        assert (ROOT / page).is_file(), page
