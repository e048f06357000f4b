"""``gpusim.backends.cupy_backend.placement``: each timed buffer's start within its 2 MiB
region, recorded with every measured case (no GPU needed: device arrays stand in)."""

from __future__ import annotations

from types import SimpleNamespace

from gpusim.backends.cupy_backend import PLACEMENT_BYTES, placement


def _array(ptr: int):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr))


def test_placement_is_the_offset_within_2_mib():
    bufs = {"hseq": _array(0x7F0000000000 + 3 * PLACEMENT_BYTES + 4096),
            "__err": _array(0x7F0000000000 + PLACEMENT_BYTES - 512),
            "w": _array(0x7F0000200000)}
    assert PLACEMENT_BYTES == 2 * 1024 * 1024
    assert placement(bufs) == {"__err": PLACEMENT_BYTES - 512, "hseq": 4096, "w": 0}
    assert list(placement(bufs)) == ["__err", "hseq", "w"]
