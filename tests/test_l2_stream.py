"""measurements/l2_stream.py: the probe sums what it loads (its check fails on wrong data), uses
L2-coherent loads (they bypass L1, so the stream measures the L2), refuses bad sizes naming the
value, and its record holds the GPU's and the simulator's cost per round."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine.executor import execute
from kernels_ir.errors import InputError
from kernels_ir.ir import Op, instructions
from measurements import l2_stream as ls

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "l2_stream.json"


def test_probe_values_and_loads():
    m = ls.stream(2, ctas=3, threads=64, region=64 * 16 * 2)
    g = {k: np.array(v, copy=True) for k, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    g["out"][0] += 1.0
    assert not m.verify_result(g)
    ops = {i.op for i in instructions(m.kernel)}
    assert Op.LDG_VOLATILE in ops and Op.LDG not in ops


def test_bad_sizes_are_refused_naming_the_value():
    for kw, text in (({"rounds": 0}, "rounds=0"), ({"threads": 100}, "threads=100"),
                     ({"region": 1000}, "region=1000")):
        with pytest.raises(InputError, match=text):
            ls.stream(**({"rounds": 1} | kw))


def test_the_record_has_both_costs():
    rec = json.loads(RECORD.read_text())
    assert sorted(int(k) for k in rec["sizes"]) == sorted(ls.GPU_ROUNDS)
    assert all(v["t"]["n"] == rec["repeats"] for v in rec["sizes"].values())
    assert rec["per_round_s"] > 0 and rec["simulated"]["results"]["per_round_s"] > 0
    assert rec["bandwidth_bytes_per_s"] == pytest.approx(ls.CTAS * ls.REGION / rec["per_round_s"])
