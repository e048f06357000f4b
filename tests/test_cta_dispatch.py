"""measurements/cta_dispatch.py: the CTA-dispatch probe builds, stores every CTA's index (checked
by its own check, which fails on wrong data), refuses bad sizes naming the value, and its record
holds the GPU and simulator slopes of both CTA sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine.executor import execute
from kernels_ir.errors import InputError
from measurements import cta_dispatch as cd

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "cta_dispatch.json"


@pytest.mark.parametrize("per_sm", [1, 3])
def test_every_cta_stores_its_index(per_sm):
    m = cd.cta_dispatch(per_sm=per_sm, sms=4, threads=64)
    assert m.kernel.grid == 4 * per_sm and m.ops == per_sm
    g = {k: np.array(v, copy=True) for k, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    g["out"][-1] += 1
    assert not m.verify_result(g)


def test_bad_sizes_are_refused_naming_the_value():
    for kw, text in (({"per_sm": 0}, "per_sm=0"), ({"threads": 100}, "threads=100"),
                     ({"sms": -1}, "sms=-1"), ({"per_sm": 1.5}, "per_sm=1.5"),
                     ({"per_sm": "2"}, "per_sm='2'"), ({"per_sm": True}, "per_sm=True"),
                     ({"per_sm": 9}, "per_sm=9 x threads=256")):
        with pytest.raises(InputError, match=text):
            cd.cta_dispatch(**kw)


def test_the_record_has_both_sizes_measured_and_simulated():
    rec = json.loads(RECORD.read_text())
    for name, sizes in cd.SIZES.items():
        r = rec["results"][name]
        assert sorted(int(s) for s in r["sizes"]) == sorted(sizes)
        assert all(v["per_launch"]["n"] == rec["repeats"] for v in r["sizes"].values())
        assert name in rec["simulated"]["results"]
