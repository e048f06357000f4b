"""measurements/l1_merge.py: both probes compute what their checks expect (and the checks fail
on wrong data), bad arguments are refused naming the value, the simulator's L1 merges in-flight
misses of one SM (one L2 request per sector and SM in ``same``), and the record holds the Nsight
counts and the simulator's next to them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.executor import execute
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from measurements import l1_merge as lm

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "l1_merge.json"
SPEC = dataclasses.replace(load_spec("h100"), sm_count=4)


@pytest.mark.parametrize("mode", lm.MODES)
def test_probe_values_and_check(mode):
    m = lm.probe(mode, rounds=3, ctas=4, warps=4)
    g = {k: np.array(v, copy=True) for k, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    g["out"][5] += 1.0
    assert not m.verify_result(g)


def test_simulator_merges_the_misses_of_one_sm():
    runs = {}
    for mode in lm.MODES:
        m = lm.probe(mode, rounds=3, ctas=4, warps=4)
        runs[mode] = simulate(m.kernel, m.inputs, SPEC, l2_warm=True)
    assert runs["same"].l2_transactions["data"] == 4 * 32 * 3          # per SM, per sector
    assert runs["distinct"].l2_transactions["data"] == 4 * 4 * 32 * 3   # per warp, per sector


def test_bad_arguments_are_refused_naming_the_value():
    for kw, text in (({"mode": "half"}, "mode='half'"), ({"rounds": 0}, "rounds=0"),
                     ({"warps": 33}, "warps=33"), ({"ctas": 1.5}, "ctas=1.5")):
        with pytest.raises(InputError, match=text):
            lm.probe(**({"mode": "same"} | kw))


def test_the_record_has_nsight_and_simulator_counts():
    rec = json.loads(RECORD.read_text())
    for mode in lm.MODES:
        name = f"l1_merge_{mode}"
        assert rec["results"][name]["values_ok"]
        metrics = rec["ncu"]["cases"][name]["metrics"]
        assert set(lm.METRICS) <= set(metrics)
        assert rec["simulated"]["results"][name]["l2_transactions"]["data"] > 0
