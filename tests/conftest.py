"""Test-session settings: the fingerprint's meaning cache goes to a temporary folder, so that the
suite neither reads nor writes the user's ``~/.cache/gpusim``."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("GPUSIM_CACHE_DIR", tempfile.mkdtemp(prefix="gpusim-test-cache-"))
