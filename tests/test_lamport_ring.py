"""measurements/lamport_ring.py: the IR ring exchange computes the right slots (its check fails
on a wrong one), refuses bad sizes naming the value, polls with L2-coherent loads, and its
record holds the GPU's and the simulator's ns per round that measurements/README.md quotes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine.executor import execute
from kernels_ir.errors import InputError
from kernels_ir.ir import Op, instructions
from measurements import lamport_ring as lr

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "lamport_ring_ir.json"


@pytest.mark.parametrize("k", [1, 33])
def test_ring_values_and_loads(k):
    m = lr.ring(2, k)
    g = {n: np.array(v, copy=True) for n, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    g["h"][lr.WORDS + 5] += 1.0
    assert not m.verify_result(g)
    ops = {i.op for i in instructions(m.kernel)}
    assert Op.LDG_VOLATILE in ops and Op.LDG not in ops


def test_bad_sizes_are_refused_naming_the_value():
    with pytest.raises(InputError, match="k=5"):
        lr.ring(2, 5)
    with pytest.raises(InputError, match="rounds=0"):
        lr.ring(0, 1)


def test_record_and_the_readme():
    rec = json.loads(RECORD.read_text())
    assert "lamport_ring.py" in rec["provenance"]["command"]
    sim = rec["simulated"]["results"]
    text = (RECORD.parents[1] / "README.md").read_text()
    for k in lr.LINES:
        g, s = rec["results"][str(k)]["per_op_s"] * 1e9, sim[str(k)]["per_op_s"] * 1e9
        assert f"{k}: {round(g)} / {round(s)}" in text, k
        assert 0.97 < s / g < 1.25, k      # within 3-22%, slow rather than fast
