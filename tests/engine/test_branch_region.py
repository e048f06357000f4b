"""A warp whose lanes split over an if-block that holds an activation pays for the branch region
(``executor.branch_region``, ``timing.on_reconverge``, spec ``divergent_branch_cycles``): the
kernels' epilogue ``if (lane < B) { x add, tanh, store }``. The engine charges nothing to a warp
that all enters or all skips the region (on the H200 these cost some 30 cycles:
``measurements/h200/body_probe.json``, uncharged), nor for an if without an activation (which
ptxas may predicate or branch around by rules of its own)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.executor import branch_region
from gpusim.specs import load_spec
from kernels_ir.builder import Builder
from kernels_ir.ir import F32, I32
from kernels_ir.verify import verify

ROUNDS = (4, 8)


def _kernel(rounds: int, lanes: int | None, act: bool = True):
    """One warp: per round an FFMA chain link, then (``lanes`` None: on every lane, else inside
    ``if lane < lanes``) the activation of the link's value and its store."""
    b = Builder("branch", grid=1, block=32)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    out = b.global_buffer("out", F32, 32, role="out")
    v = b.i2f(lane, dst=b.reg(F32, "v"))
    b.fmul(v, 1.0 / 64.0, dst=v)
    y = b.reg(F32, "y")
    inside = b.isetp("lt", lane, lanes if lanes is not None else 32)

    def block():
        (b.tanh if act else b.mov)(v, dst=y)
        b.stg(out, lane, y)

    with b.loop("r", 0, rounds):
        b.ffma(v, 0.5, 0.25, dst=v)
        if lanes is None:
            block()
        else:
            with b.if_(inside):
                block()
    return verify(b.build())


def _per_round(spec, lanes, act=True) -> float:
    c = [simulate(_kernel(r, lanes, act), {"out": np.zeros(32, np.float32)}, spec).cycles
         for r in ROUNDS]
    return (c[1] - c[0]) / (ROUNDS[1] - ROUNDS[0])


def test_only_an_if_holding_an_activation_is_a_branch_region():
    assert branch_region(_kernel(1, 4).body[-1].body[-1].then)
    assert not branch_region(_kernel(1, 4, act=False).body[-1].body[-1].then)


def test_a_split_warp_pays_the_region():
    spec = load_spec("h200")
    flat = _per_round(spec, None)
    assert _per_round(spec, 4) == pytest.approx(flat + spec.divergent_branch_cycles, abs=2)
    free = dataclasses.replace(spec, divergent_branch_cycles=0)
    assert _per_round(free, 4) == pytest.approx(flat, abs=1)


def test_a_warp_that_does_not_split_pays_nothing():
    spec = load_spec("h200")
    flat = _per_round(spec, None)
    assert _per_round(spec, 32) == pytest.approx(flat, abs=1)          # every lane enters
    assert _per_round(spec, 4, act=False) == pytest.approx(_per_round(spec, None, act=False),
                                                            abs=1)      # predicated by ptxas
