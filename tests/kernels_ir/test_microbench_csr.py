"""The CSR gather mechanism microbenchmarks (``cmech_*``): every one builds and checks its values
in the executor and (small) in the simulator, the check fails on wrong data, the word patterns
are what the names say, and bad parameters are refused naming the value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.executor import execute
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb
from kernels_ir.kernels.microbench import csr_gathers as cm

SPEC = dataclasses.replace(load_spec("h100"), sm_count=4)


def _small(name: str, rounds: int = 3):
    return mb.MICROBENCHES[name](rounds=rounds, ctas=4, threads=64)


@pytest.mark.parametrize("name", sorted(cm.REGISTRY))
def test_builds_and_checks_in_the_executor_and_fails_on_wrong_data(name):
    assert mb.SIZE_ARG[name] == "rounds"
    m = mb.build(name, 2)
    assert m.kernel.name == f"mb_{name}" and m.ops == 2 * 4 * 264 * 32
    s = _small(name)
    g = {k: np.array(v, copy=True) for k, v in execute(s.kernel, s.inputs).globals.items()}
    assert s.verify_result(g)
    g["out"].view(np.int32)[5] += 1
    assert not s.verify_result(g)


@pytest.mark.parametrize("name", ["cmech_rand_32", "cmech_reuse_same_32", "cmech_miss_rand_32",
                                  "cmech_spread_32_w4"])
def test_small_runs_in_the_simulator_with_its_values(name):
    s = _small(name)
    r = simulate(s.kernel, s.inputs, SPEC)
    assert s.verify_result(r.globals)


def test_word_patterns():
    assert set(cm.lane_words("same")) == {0}
    assert sorted(cm.lane_words("spread")) == list(range(32))
    assert sorted(set(cm.lane_words("spread4"))) == list(range(0, 32, 4))
    w4 = cm.lane_words("spread", 4)
    assert set(np.bincount(w4 // 4)) == {4} and np.all(w4 % 4 == 0)
    r = cm.lane_words("rand")
    assert np.all((0 <= r) & (r < 32)) and len(set(r)) > 8


@pytest.mark.parametrize("kw, what", [({"pattern": "odd"}, "pattern='odd'"),
                                      ({"path": "dram"}, "path='dram'"),
                                      ({"k": 5}, "k=5"), ({"width": 2}, "width=2"),
                                      ({"rounds": 0}, "rounds")])
def test_bad_parameters_are_refused(kw, what):
    with pytest.raises(InputError, match=what):
        cm.csr_gather(**kw)
