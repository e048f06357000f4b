"""Test-session settings: the fingerprint's meaning cache goes to a temporary folder, so that the
suite neither reads nor writes the user's ``~/.cache/gpusim``; and fixtures several test files
share."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("GPUSIM_CACHE_DIR", tempfile.mkdtemp(prefix="gpusim-test-cache-"))


@pytest.fixture(scope="session")
def measurements_section():
    """``section(title)``: the text of measurements/README.md from ``title`` (a ``## `` heading's
    start) to the next ``## `` heading, where the records' tables are quoted."""
    text = (Path(__file__).resolve().parents[1] / "measurements" / "README.md").read_text()

    def section(title: str) -> str:
        s = text[text.index(title):]
        return s[:s.index("\n## ")]
    return section
