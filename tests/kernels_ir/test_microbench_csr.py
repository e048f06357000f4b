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
    # 264 CTAs of 1024 threads; the 128-bit random ones hold more registers: 132; the miss
    # pieces' 128-bit ones 132 of 512 threads, their 4-warp ones 132 of 128
    grid, block = 264, 1024
    if "rand_32_w4" in name or ("_w4" in name and name.endswith("_p")):
        grid, block = 132, (512 if name.endswith("_p") else 1024)
    if name.endswith("_lo"):
        grid, block = 132, 128
    assert m.kernel.name == f"mb_{name}" and (m.kernel.grid, m.kernel.block) == (grid, block)
    assert m.ops == 2 * 4 * grid * block // 32
    s = _small(name)
    g = {k: np.array(v, copy=True) for k, v in execute(s.kernel, s.inputs).globals.items()}
    assert s.verify_result(g)
    g["out"].view(np.int32)[5] += 1
    assert not s.verify_result(g)


@pytest.mark.parametrize("name", ["cmech_rand_32", "cmech_reuse_same_32", "cmech_miss_rand_32",
                                  "cmech_spread_32_w4", "cmech_miss_pair_rand_32_w4"])
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
                                      ({"rounds": 0}, "rounds"),
                                      ({"pair": True, "width": 1}, "pair=True")])
def test_bad_parameters_are_refused(kw, what):
    with pytest.raises(InputError, match=what):
        cm.csr_gather(**kw)


def test_the_pair_reads_both_halves_of_one_sector_and_every_word_is_used():
    """``cmech_pair_rand_32_w4``: each lane's two 128-bit loads are the halves of one 32-byte
    sector (words 8 j .. 8 j + 7), the second half of every sector holds 0s (so adding it keeps
    the chase), and the random-chunk 128-bit benchmarks use every loaded word (``sink``), so
    that the compiler keeps them 128 bits wide."""
    from kernels_ir.ir import Op, instructions

    m = mb.build("cmech_pair_rand_32_w4", 2)
    loads = [i for i in instructions(m.kernel) if i.op is Op.LDG and i.attr("width") == 4]
    assert len(loads) == 2 * 4 and {i.srcs[0].offset for i in loads} == {0, 4}
    assert np.all(cm.lane_words("rand", 8) % 8 == 0)
    tab = m.inputs["table"].reshape(-1, 8)
    assert np.all(tab[:, 4:] == 0) and np.all(tab[:, 0] % 8 == 0)
    assert "sink" in m.inputs and "sink" not in mb.build("cmech_spread_32_w4", 2).inputs
