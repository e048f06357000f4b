"""The analytical model's h staging against its microbenchmark: the pipelined broadcast of the
Lamport kernel (``models/analytical/l2.py``, ``_stage_parts``) and the busiest L2 contention
group of a slot that starts anywhere in the group map (``_busiest_anywhere``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_group_map, load_spec
from kernels_ir.kernels.sparse_rnn import make_layer
from models.analytical.l2 import ANYWHERE_STARTS, _busiest_anywhere, _busiest_counts
from models.analytical.persistent import builder_mapping, predict_mapping
from models.analytical.variants import Variant

ROOT = Path(__file__).resolve().parents[2]
PASSES = json.loads((ROOT / "measurements" / "h200" / "exchange_passes.json").read_text())


def test_the_busiest_group_anywhere_is_the_mean_over_start_lines():
    """Brute force over the same start lines: n consecutive lines from each start (wrapping at
    the map's end), the lines of the busiest group, averaged."""
    spec = load_spec("h200")
    table = np.asarray(load_group_map(spec.l2_group_map))
    table_anywhere = _busiest_anywhere(spec.l2_group_map)
    starts = (np.arange(ANYWHERE_STARTS) * 7919) % table.size
    for n in (1, 8, 39, 256, 640, 2048, table.size):
        want = np.mean([np.bincount(table[(s + np.arange(n)) % table.size]).max()
                        for s in starts])
        assert table_anywhere[n] == pytest.approx(want)
    # a slot that starts a map period is the map's worst start for small slots (two groups a
    # KiB); anywhere it lies in fewer lines of its busiest group
    first = _busiest_counts(spec.l2_group_map)
    assert table_anywhere[39] < 0.6 * first[39]


@pytest.mark.parametrize("name", sorted(PASSES["results"]))
def test_the_lamport_step_is_the_passes_records(name):
    """``h200/exchange_passes.json``: the unrolled Lamport kernel with every slot written (no
    closing wait, so no tick): the model's step within 5.5% of the GPU's on each of the four
    layers of two to five staging groups (-4.3% to +5.3% when written; with every round's share
    of the broadcast summed, +7% to +30%), and its exchange shorter than the GPU's by at most
    150 ns (45-145 ns: the later groups' queueing the pipelined broadcast leaves out)."""
    spec = load_spec("h200")
    r = PASSES["results"][name]
    gpu = r["lamport_inplace_unrolled"]["summary"]
    v = Variant("x", "persistent", True, "lamport", True, "optimal", step_wait=0)
    layer = make_layer(r["hidden"], r["batch"], r["density"], 4, seed=7)
    t = predict_mapping(spec, v, builder_mapping(spec, v, layer, seed=7), r["batch"])
    step = float(t.per_step_s[0]) * 1e9
    exchange = float(t.breakdown["h_exchange_s"][0] + t.breakdown["h_broadcast_s"][0]) * 1e9
    assert abs(step / gpu["step_ns"] - 1) < 0.055
    assert 0 < gpu["exchange_ns"] - exchange < 150
