"""measurements/l1_pair.py: both probes compute what their checks expect, the H100 record says
that two 16-byte loads of one sector of a buffer far larger than L1 cost the L2 what one does
(the second hits in L1), and the simulator's L1 does the same for a buffer it cannot keep, while
a sector that comes back after the left-over capacity was filled misses again."""

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
from measurements import l1_pair as lp

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "l1_pair.json"
SPEC = dataclasses.replace(load_spec("h100"), sm_count=4)


@pytest.mark.parametrize("mode", lp.MODES)
def test_probe_values_and_check(mode):
    m = lp.probe(mode, rounds=2, ctas=4, warps=2)
    g = {k: np.array(v, copy=True) for k, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    g["out"][3] += 1.0
    assert not m.verify_result(g)


def test_bad_arguments_are_refused():
    with pytest.raises(InputError, match="mode='triple'"):
        lp.probe("triple")
    with pytest.raises(InputError, match="warps=33"):
        lp.probe("pair", warps=33)


def test_the_gpu_merges_the_second_load_of_a_sector_of_a_large_buffer():
    rec = json.loads(RECORD.read_text())
    assert "l1_pair.py" in rec["ncu"]["provenance"]["command"]
    m = {k: v["metrics"] for k, v in rec["ncu"]["cases"].items()}
    single, pair = m["l1_pair_single"], m["l1_pair_pair"]
    sectors = rec["results"]["l1_pair_pair"]["params"]["sectors"]
    assert sectors * 32 > 16 * 2 ** 20                       # far more than any L1
    l2 = "lts__t_sectors_srcunit_tex_op_read.sum"
    assert single[l2] == pair[l2] == sectors                  # one L2 sector per sector
    assert pair["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 2 * sectors
    assert pair["l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"] == sectors
    assert all(r["values_ok"] for r in rec["results"].values())


def test_the_simulator_merges_it_too_and_the_record_says_so():
    runs = {mode: simulate(lp.probe(mode, rounds=2, ctas=4).kernel,
                           lp.probe(mode, rounds=2, ctas=4).inputs, SPEC, l2_warm=True)
            for mode in lp.MODES}
    sectors = 2 * 4 * lp.WARPS * 32
    assert runs["single"].l2_transactions["data"] == runs["pair"].l2_transactions["data"] \
        == sectors
    sim = json.loads(RECORD.read_text())["simulated"]["results"]
    assert sim["l1_pair_pair"]["l2_transactions"]["data"] == \
        sim["l1_pair_single"]["l2_transactions"]["data"] == lp.ROUNDS * lp.CTAS * lp.WARPS * 32


def test_the_left_over_capacity_decides_how_much_passes_through():
    """One warp, two rounds of 32 sectors, each read by two loads: with no capacity left over
    nothing is merged (every load goes to L2); with room for every sector the second loads all
    hit; with room for 16 sectors (direct-mapped: two of the 32 to a slot) half of them do."""
    m = lp.probe("pair", rounds=2, ctas=1, warps=1)
    got = {}
    for room in (0, 16, 4096):
        spec = dataclasses.replace(SPEC, l1_unified_bytes_per_sm=room * 32)
        got[room] = simulate(m.kernel, m.inputs, spec, l2_warm=True).l2_transactions["data"]
    assert got[0] == 2 * 2 * 32 and got[4096] == 2 * 32
    assert got[16] == 2 * (32 + 16)
