"""The split L2 (gpusim.engine.l2: near / far partitions) and its record,
measurements/h100/l2_partition.json (measurements/l2_partition.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.calibrate import fit, simulated_cycles_per_op
from gpusim.engine.l2 import unit_parity
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb

H100 = load_spec("h100")
ONE = dataclasses.replace(H100, l2_partitions=1, l2_far_extra_cycles=0)
RECORD = Path(__file__).resolve().parents[2] / "measurements" / "h100" / "l2_partition.json"


def _wide(spec, k):
    return simulated_cycles_per_op(spec, f"l2_latency_wide_{k}", (4, 16), {"lines": 4096})


def test_hash_splits_units_evenly_and_independently():
    p = unit_parity(np.arange(1 << 16))
    assert abs(p.mean() - 0.5) < 0.01
    assert abs((p[1:] != p[:-1]).mean() - 0.5) < 0.02    # neighbours: independent draws


def test_one_line_costs_the_mean_and_many_lines_the_far_latency():
    """Averaged over both partition assignments a one-sector chase costs l2_hit_latency (the
    mean); the slowest of k random lines rises towards mean + extra/2; one partition: flat."""
    mean, half = H100.l2_hit_latency_cycles, H100.l2_far_extra_cycles / 2
    one = _wide(H100, 1)
    assert one == pytest.approx(mean, abs=2)
    curve = [_wide(H100, k) for k in (2, 4, 8)]
    assert one < curve[0] < curve[1] <= curve[2] <= mean + half + 2
    assert curve[2] > mean + 0.8 * half
    # abs 3: the L1TEX tag stage (4 lines a cycle) and data stage (a line a cycle) add a cycle
    # or two to a load of 8 lines
    assert [_wide(ONE, k) for k in (1, 8)] == [pytest.approx(ONE.l2_hit_latency_cycles, abs=3)] * 2


def test_one_interleave_unit_is_one_draw():
    """A 512-byte block (inside one 1 KiB unit) costs about one line; a 4 KiB block (4 units)
    about the slowest of 4 draws."""
    small = simulated_cycles_per_op(H100, "l2_latency_block_4", (4, 16), {"blocks": 256})
    big = simulated_cycles_per_op(H100, "l2_latency_block_32", (4, 16), {"blocks": 256})
    assert small < H100.l2_hit_latency_cycles + 20 < big


def test_bad_sizes_are_refused():
    with pytest.raises(InputError, match="lanes=3"):
        mb.l2_latency_wide(lanes=3)
    with pytest.raises(InputError, match="lines=8"):
        mb.l2_latency_wide(lanes=8, lines=8)
    with pytest.raises(InputError, match="block_lines=3"):
        mb.l2_latency_block(block_lines=3)


def test_record_provenance_and_the_curve_it_shows():
    rec = json.loads(RECORD.read_text())
    p = rec["provenance"]
    assert "H100" in p["gpu_name"] and p["sm_clock_mhz_samples"]
    for key in ("driver_version", "cuda_runtime_version", "cupy_version", "date", "command"):
        assert p[key], key
    r = {k: v["per_op_s"] for k, v in rec["results"].items() if v["status"] == "ok"}
    # measurements/README.md: the slowest of k random lines rises from the mean; a 512-byte
    # block costs about one line; lines read again cost less than one read for the first time
    assert r["l2_latency_wide_1"] < r["l2_latency_wide_2"] < r["l2_latency_wide_4"] \
        < r["l2_latency_wide_8"] <= r["l2_latency_wide_32"]
    assert r["l2_latency_block_4"] < 1.05 * r["l2_latency_block_1"] < r["l2_latency_block_32"]
    assert r["l2_latency_wide_8_revisit"] < r["l2_latency_wide_1"]
    assert rec["simulated"]["results"]["l2_latency_wide_4"]["per_op_s"] == pytest.approx(
        r["l2_latency_wide_4"], rel=0.01)


def test_spec_values_are_the_fit_of_the_record():
    """The H100 spec's partition values are what gpusim.calibrate fits from the record (merged
    over the campaign's microbench.json, as its main does)."""
    micro = json.loads((RECORD.parent / "microbench.json").read_text())["results"]
    micro.update(json.loads(RECORD.read_text())["results"])
    micro = {k: v for k, v in micro.items() if v.get("status") == "ok"
             and k in ("l2_latency", "l2_latency_wide_4")}
    base = dataclasses.replace(H100, l2_hit_latency_cycles=300, l2_far_extra_cycles=100)
    got = fit(base, micro, H100.clock_hz)["params"]
    assert got["l2_hit_latency_cycles"]["value"] == H100.l2_hit_latency_cycles
    assert got["l2_far_extra_cycles"]["value"] == H100.l2_far_extra_cycles
