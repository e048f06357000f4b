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


@pytest.mark.parametrize("k, order, writes", [(1, "rotated", "line"), (33, "rotated", "line"),
                                              (132, "same", "line"), (132, "same", "sectors")])
def test_ring_values_and_loads(k, order, writes):
    m = lr.ring(2, k, order, writes)
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
    with pytest.raises(InputError, match="order='same' with k=4"):
        lr.ring(2, 4, "same")


def test_record_and_the_readme():
    rec = json.loads(RECORD.read_text())
    assert "lamport_ring.py" in rec["provenance"]["command"]
    sim = rec["simulated"]["results"]
    text = (RECORD.parents[1] / "README.md").read_text()
    flat = text.replace("\n  ", " ")
    labels = {"132_same": "same order, as the kernel's staging does: ",
              "132_sec": "at k = 132: rotated ", "132_same_sec": "same order "}
    for key, k, _order, writes in lr.EXPERIMENTS:
        g, s = rec["results"][key]["per_op_s"] * 1e9, sim[key]["per_op_s"] * 1e9
        label = labels.get(key, f"{k}: ")
        assert f"{label}{round(g)} / {round(s)}" in flat, key
        if writes == "line":   # whole-line writers: never more than 3% fast (-2% to +33%)
            assert 0.97 < s / g < 1.35, key
    res = {x: rec["results"][x]["per_op_s"] * 1e9 for x in rec["results"]}
    sres = {x: sim[x]["per_op_s"] * 1e9 for x in sim}
    assert 1.25 < res["132_same"] / res["132"] < 1.35
    assert 1.6 < sres["132_same"] / sres["132"] < 1.75
    # four writer SMs per line: +400-415 ns on the GPU, +2-19 ns in the simulator
    for sec, line in (("132_sec", "132"), ("132_same_sec", "132_same")):
        assert 400 <= res[sec] - res[line] <= 416 and 1 <= sres[sec] - sres[line] <= 20
