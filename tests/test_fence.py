"""The fence benchmarks (kernels_ir/kernels/microbench/atomics.py ``fence_cost`` and the grid
barrier's parts, measurements/fence.py): they run in the simulator with their values checked
(and the check catches a wrong value), the engine's fence rule is what the spec says (the later
of its own latency from issue and its after-store time from the last acknowledgement), the H100
spec's two fence values are what the calibration fits to the record, and the held-out fence
benchmarks are priced within the bounds stated here, and the grid barrier's arrive and spin grow
with the number of CTAs as on the GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.calibrate import FITS, fit, simulated_cycles_per_op
from gpusim.engine import simulate
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb
from kernels_ir.kernels.microbench.atomics import fence_cost
from kernels_ir.kernels.microbench.registry import FENCE_BENCHES

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "measurements" / "h100" / "fence.json"


@pytest.mark.parametrize("name", ["fence_st1", "fence_st1_atom_w8", "fence_st8_c132",
                                  "grid_barrier_nofence_flag", "grid_barrier_nofence_c8"])
def test_benchmark_runs_and_its_check_catches_a_wrong_value(name):
    m = mb.build(name, 3)
    r = simulate(m.kernel, m.inputs, load_spec("h100"))
    assert m.verify_result(r.globals)
    bad = {k: np.asarray(v).copy() for k, v in r.globals.items()}
    bad["out"][0] -= 1 if name.startswith("fence") else 10 ** 6   # a store / a count missed
    assert not m.verify_result(bad)


def test_bad_store_count_is_refused():
    with pytest.raises(InputError, match="stores=33"):
        fence_cost(2, stores=33)


def test_fence_is_the_later_of_its_latency_and_the_acknowledgement_plus_its_tail():
    base = load_spec("h100")
    alone = dataclasses.replace(base, fence_latency_cycles=2000, fence_after_store_cycles=0)
    # nothing to wait for: the fence's own latency, with or without a store before it
    assert simulated_cycles_per_op(alone, "fence_st0", (8, 16), {}) == pytest.approx(2000, abs=2)
    assert simulated_cycles_per_op(alone, "fence_st1", (8, 16), {}) == pytest.approx(2000, abs=2)
    tail = dataclasses.replace(base, fence_latency_cycles=0, fence_after_store_cycles=1000)
    st0 = simulated_cycles_per_op(tail, "fence_st0", (8, 16), {})
    st1 = simulated_cycles_per_op(tail, "fence_st1", (8, 16), {})
    assert st0 < 50                      # no store: nothing to add the tail to
    assert 1000 + 200 < st1 < 1000 + 600  # a store: its round trip, then the tail


def test_record_and_the_spec_values_are_its_fit():
    rec = json.loads(RECORD.read_text())
    assert "H100" in rec["provenance"]["gpu_name"] and "fence.py" in rec["provenance"]["command"]
    micro = rec["results"]
    assert set(FENCE_BENCHES) | {"grid_barrier"} <= set(micro)
    assert all(v["status"] == "ok" for v in micro.values())
    spec = load_spec("h100")
    ours = {p: v for p, v in FITS.items() if v[0] in micro}
    assert set(ours) == {"fence_latency_cycles", "fence_after_store_cycles"}
    res = fit(spec, {k: micro[k] for k in ("fence_st0", "fence_st1")}, spec.clock_hz)["params"]
    for p in ours:
        assert res[p]["value"] == getattr(spec, p), p
    ns = {n: v["per_op_s"] * 1e9 for n, v in micro.items()}
    # what the docs quote: a fence alone about 342 ns, a store before it adds 20 ns; the grid
    # barrier's fence (with and without it, 132 CTAs: 361 ns) is about what a lone fence costs
    assert ns["fence_st0"] == pytest.approx(342, abs=2)
    assert ns["fence_st1"] - ns["fence_st0"] == pytest.approx(20, abs=3)
    assert ns["grid_barrier"] - ns["grid_barrier_nofence"] == pytest.approx(ns["fence_st0"],
                                                                             rel=0.1)


# held out (not fitted): measured / simulated within these bounds; the kernel's own pattern
# (every warp stores, a CTA barrier, thread 0 fences and arrives) on 132 CTAs is the loosest
HELD_OUT = {"fence_st8": 0.05, "fence_st0_atom": 0.10, "fence_st1_atom": 0.10,
            "fence_st1_w8": 0.05, "fence_st1_atom_w8": 0.20, "fence_st0_c132": 0.10,
            "fence_st1_c132": 0.05, "fence_st1_atom_w8_c132": 0.25, "grid_barrier_c1": 0.10}


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_fence_benchmarks(name):
    spec = load_spec("h100")
    meas = json.loads(RECORD.read_text())["results"][name]["per_op_s"] * spec.clock_hz
    sizes = (4, 8) if name.startswith("grid_barrier") else (8, 16)
    sim = simulated_cycles_per_op(spec, name, sizes, {})
    assert abs(sim / meas - 1) < HELD_OUT[name], (name, sim, meas)


def test_grid_barrier_grows_with_the_ctas_as_on_the_gpu():
    """The arrive and spin alone over 1-132 CTAs, and the whole grid barrier, within 17% each
    and 10% on average: the GPU's 470 -> 1194 cycles from one CTA to 132 come from the CTAs'
    poll phases (``_Timing._phase``); with the CTAs polling in step the simulator gave 520-817
    (and the fitted fence had hidden it in the whole barrier). The loop edges (the spin's exit
    test, its tests before each poll again; ``measurements/h200/loop_edges.json``) add 22-31
    cycles to every row: the one-CTA, 33-CTA and 132-CTA rows came closer (-12.8% -> -8.1%,
    -7.0% -> -4.5%, -8.0% -> -6.0%), the 2- and 8-CTA ones went further (+8.2% -> +11.9%,
    +11.8% -> +15.9%: the poll phases' spread at a few CTAs, not the edges); 9.1% -> 8.6% on
    average."""
    spec = load_spec("h100")
    rec = json.loads(RECORD.read_text())["results"]
    sim, errs = {}, []
    for name in ("grid_barrier_nofence_c1", "grid_barrier_nofence_c2", "grid_barrier_nofence_c8",
                 "grid_barrier_nofence_c33", "grid_barrier_nofence", "grid_barrier"):
        meas = rec[name]["per_op_s"] * spec.clock_hz
        sim[name] = simulated_cycles_per_op(spec, name, (4, 8), {})
        errs.append(abs(sim[name] / meas - 1))
        assert errs[-1] < 0.17, (name, sim[name], meas)
    assert sum(errs) / len(errs) < 0.10, errs
    assert sim["grid_barrier_nofence"] > 2.2 * sim["grid_barrier_nofence_c1"]   # GPU: 2.5x
