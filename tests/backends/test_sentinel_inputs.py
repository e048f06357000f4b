"""A -0.0 in h_0 is the Lamport sentinel: the runner never draws one, and a program that holds one
is refused with one clear error instead of a bounded spin on the GPU.

The record: ``measurements/h100/spin_repro/`` (``measurements/spin_repro.py``), the s22 case that
stopped on its spin, re-launched 2000 times on fresh inputs drawn as the runner then drew them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.backends.cupy_backend import _check_first_slot, fresh_normal
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels.sparse_rnn import SENTINEL_BITS, build_sparse_rnn, make_layer

REC = Path(__file__).resolve().parents[2] / "measurements" / "h100" / "spin_repro"


class _Rng:
    """A generator whose normals hold both zeros (what CuPy's produced once)."""

    def standard_normal(self, shape, dtype):
        a = np.linspace(-1, 1, int(np.prod(shape)), dtype=dtype).reshape(shape)
        a.flat[1] = -0.0
        a.flat[2] = 0.0
        return a


def test_fresh_normal_has_no_negative_zero():
    a = fresh_normal(np, _Rng(), 64)
    assert np.signbit(_Rng().standard_normal(64, np.float32).flat[1])   # the input had one
    assert not (a.view(np.int32) == SENTINEL_BITS).any()
    assert a[1] == 0.0 and not np.signbit(a[1]) and a[10] != 0.0
    b = fresh_normal(np, np.random.default_rng(3), (4, 5))   # numpy's generator, the same API
    assert b.shape == (4, 5) and b.dtype == np.float32


def _program(sync="lamport"):
    return build_sparse_rnn(make_layer(256, 2, 0.1, 4, 0), load_spec("h100"), sync=sync)


def test_a_sentinel_in_h0_is_refused_before_any_launch():
    prog = _program()
    _check_first_slot(prog)                      # the layer's own h_0: accepted
    words = prog.inputs["hseq"].view(np.int32)
    words[7] = SENTINEL_BITS
    with pytest.raises(InputError, match=r"h_0 holds -0.0 at word\(s\) \[7\]"):
        _check_first_slot(prog)
    bar = _program("barrier")                     # no sentinel in the barrier kernels
    bar.inputs["hseq"].view(np.int32)[7] = SENTINEL_BITS
    _check_first_slot(bar)


def test_recorded_stop_was_a_sentinel_in_h0():
    rec = json.loads((REC / "spin_repro.json").read_text())
    opt, naive = rec["kernels"].values()
    assert rec["launches_each"] == 2000 and len(opt["stops"]) == 1 and not naive["stops"]
    stop = opt["stops"][0]
    # every slot the kernel writes was complete afterwards: no producer failed to write
    assert stop["first_incomplete_slot"] is None
    z = np.load(REC / "spin_repro_fail.npz")
    h0 = z["h0"]
    bad = np.nonzero(h0.view(np.int32) == SENTINEL_BITS)[0]
    assert bad.tolist() == [1643]
    # the stuck warp (4 of 8, 256 threads) polls words 512-639 and 1536-1663 of a slot
    assert int(z["err"][2]) == 4 and 1536 <= bad[0] < 1664


def test_the_builder_makes_a_negative_zero_of_h0_positive():
    """A layer whose h_0 holds -0.0 gets +0.0 in the Lamport kernel's slot 0 (its values are the
    same, its bits never the sentinel), so the backend's check passes."""
    from dataclasses import replace

    lay = make_layer(256, 2, 0.1, 4, 0)
    h0 = np.array(lay.h0, dtype=np.float32)
    h0.flat[5] = -0.0
    prog = build_sparse_rnn(replace(lay, h0=h0), load_spec("h100"), sync="lamport")
    slot0 = prog.inputs["hseq"][:256 * 2]
    assert not (slot0.view(np.int32) == SENTINEL_BITS).any() and (slot0 == 0).sum() >= 1
    _check_first_slot(prog)
