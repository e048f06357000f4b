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


@pytest.mark.parametrize("chunks,load", [(0, False), (4, False), (2, True)])
def test_staging_link_runs_checked_and_compiles(chunks, load, tmp_path):
    """``stage_bar`` (measurements/stage_bar.py): values checked in the simulator, the check
    catches a wrong value, and its CUDA compiles with the stores as 128-bit shared stores."""
    import shutil
    import subprocess

    from kernels_ir.codegen_cuda import generate

    m = mb.build("stage_bar", 2, chunks=chunks, load=load)
    r = simulate(m.kernel, m.inputs, load_spec("h100"))
    assert m.verify_result(r.globals)
    bad = {k: np.asarray(v).copy() for k, v in r.globals.items()}
    bad["out"][5] += 1
    assert not m.verify_result(bad)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("needs nvcc")
    cu = tmp_path / "k.cu"
    cu.write_text(generate(m.kernel).code)
    p = subprocess.run([nvcc, "-ptx", "-arch=sm_90", str(cu), "-o", str(tmp_path / "k.ptx")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    ptx = (tmp_path / "k.ptx").read_text()
    stores = [ln for ln in ptx.splitlines() if "st.shared" in ln]
    assert all("st.shared.v4" in ln for ln in stores) and bool(stores) == (chunks > 0)
    assert ("ld.shared" in ptx) == load


def test_staging_link_refuses_a_load_without_stores():
    with pytest.raises(InputError, match="chunks=0"):
        mb.build("stage_bar", 2, chunks=0, load=True)


def test_the_barrier_waits_for_the_staging_stores():
    """The simulator's side of ``stage_bar``: a barrier alone costs its latency; after 128-bit
    stores it releases once the SM's shared pipe has served them (4 wavefronts a warp and
    chunk) plus ``cta_barrier_drain_cycles``, so a link grows by the CTA's wavefronts per chunk;
    a load after the barrier then finds the pipe free (its latency and the dependent add)."""
    spec = load_spec("h100")
    cyc = {(c, ld): simulated_cycles_per_op(spec, "stage_bar", (2, 4), {"chunks": c, "load": ld})
           for c, ld in ((0, False), (4, False), (8, False), (4, True), (8, True))}
    assert cyc[0, False] == pytest.approx(spec.cta_barrier_latency_cycles + 3, abs=3)
    per_chunk = 8 * 4 / spec.smem_wavefronts_per_cycle
    assert cyc[8, False] - cyc[4, False] == pytest.approx(4 * per_chunk, rel=0.05)
    assert cyc[4, False] == pytest.approx(4 * per_chunk + spec.cta_barrier_drain_cycles + 5,
                                          abs=3)
    for c in (4, 8):
        assert cyc[c, True] - cyc[c, False] == pytest.approx(
            spec.smem_latency_cycles + spec.alu_latency_cycles, abs=2)
    # and the record it is fitted to: measured within 2% at 2 to 8 chunks without a load
    rec = json.loads((ROOT / "measurements" / "h100" / "stage_bar.json").read_text())
    clock = spec.clock_hz
    for c in (2, 4, 8):
        meas = rec["results"][f"stage_bar_c{c}"]["per_op_s"] * clock
        sim = simulated_cycles_per_op(spec, "stage_bar", (2, 4), {"chunks": c, "load": False})
        assert sim == pytest.approx(meas, rel=0.02), c
