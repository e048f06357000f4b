"""The SM pipes' chains (kernels_ir/kernels/microbench/pipes.py, measurements/pipes.py): every
chain runs in the simulator with its values checked (and the check catches a wrong value), the
simulator's cost per link is the spec's latency, the H100 spec's pipe latencies are what the
calibration fits to the recorded chains, and the engine prices tanh / exp / sigmoid apart."""

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
from kernels_ir.kernels.microbench.pipes import CHAIN_OPS, chain_latency

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "measurements" / "h100" / "pipes.json"
NAMES = [f"{op}_latency" for op in CHAIN_OPS] + ["bar_latency"]


@pytest.mark.parametrize("name", NAMES)
def test_chain_runs_and_its_check_catches_a_wrong_value(name):
    m = mb.build(name, 2)
    r = simulate(m.kernel, m.inputs, load_spec("h100"))
    assert m.verify_result(r.globals)
    bad = {k: np.asarray(v).copy() for k, v in r.globals.items()}
    bad["out"][3] += 1
    assert not m.verify_result(bad)


def test_bad_op_is_refused():
    with pytest.raises(InputError, match="op='fdiv'"):
        chain_latency(2, op="fdiv")


def test_simulated_link_costs_the_spec_latency():
    spec = load_spec("h100")
    want = {"ffma_latency": spec.fma_latency_cycles, "imad_latency": spec.alu_latency_cycles,
            "shfl_latency": spec.shfl_latency_cycles,
            "tanh_latency": spec.fma_latency_cycles + spec.sfu_latency_cycles,
            "exp_latency": spec.fma_latency_cycles + spec.exp_latency_cycles,
            "sigmoid_latency": spec.fma_latency_cycles + spec.sigmoid_latency_cycles}
    for name, cycles in want.items():
        assert simulated_cycles_per_op(spec, name, (2, 4), {}) == pytest.approx(cycles), name


def test_the_three_functions_have_their_own_latency():
    spec = dataclasses.replace(load_spec("h100"), sfu_latency_cycles=10, exp_latency_cycles=100,
                               sigmoid_latency_cycles=1000)
    got = [simulated_cycles_per_op(spec, f"{op}_latency", (2, 4), {})
           for op in ("tanh", "exp", "sigmoid")]
    assert got == pytest.approx([14, 104, 1004])


def test_record_and_the_spec_values_are_its_fit():
    rec = json.loads(RECORD.read_text())
    assert "H100" in rec["provenance"]["gpu_name"] and "pipes.py" in rec["provenance"]["command"]
    micro = rec["results"]
    assert all(micro[n]["status"] == "ok" for n in NAMES)
    spec = load_spec("h100")
    ours = {p: v for p, v in FITS.items() if v[0] in micro}
    assert set(ours) == {"fma_latency_cycles", "alu_latency_cycles", "shfl_latency_cycles",
                         "sfu_latency_cycles", "exp_latency_cycles", "sigmoid_latency_cycles",
                         "cta_barrier_latency_cycles"}
    res = fit(spec, micro, spec.clock_hz)["params"]
    for p in ours:
        assert res[p]["value"] == getattr(spec, p), p
    # the measured latencies the README quotes (cycles at the SM clock)
    cyc = {n: micro[n]["per_op_s"] * spec.clock_hz for n in NAMES}
    assert cyc["tanh_latency"] == pytest.approx(68.0, abs=0.5)
    assert cyc["sigmoid_latency"] == pytest.approx(133.5, abs=0.5)
    assert cyc["shfl_latency"] == pytest.approx(24.2, abs=0.2)
