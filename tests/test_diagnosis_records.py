"""The diagnosis records of the exchange (measurements/h100/exchange_scan.json,
exchange_ncu.json) and the library profile: provenance present, recorded kernels still today's
kernels, and the claims measurements/README.md makes from them still true of the data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusim.engine import simulate
from gpusim.measurements import kernel_fingerprint
from gpusim.specs import load_spec

DATA = Path(__file__).resolve().parents[1] / "measurements" / "h100"
SPEC = load_spec("h100")


def _load(name):
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", ["exchange_scan.json", "exchange_ncu.json",
                                  "library_profile.json"])
def test_provenance(name):
    p = _load(name)["provenance"]
    assert "H100" in p["gpu_name"]
    for key in ("driver_version", "cuda_runtime_version", "cupy_version", "date", "command"):
        assert p[key], key


def _scan_case(cid):
    from measurements.exchange_scan import scan_cases

    return next(c for c in scan_cases() if c["id"] == cid)


def test_scan_kernels_are_todays_and_the_per_word_gap_holds():
    from measurements.campaign import STEPS, build_case

    data = _load("exchange_scan.json")
    ok = {c["id"]: c for c in data["cases"] if c["status"] == "ok"}
    assert len(ok) >= 16 and all(len(c["result"]["per_step_raw_s"]) >= 5 for c in ok.values())
    c = ok["exchange-h1024-b4-lamport"]
    assert kernel_fingerprint(build_case(c, STEPS, SPEC).kernel) == {
        k: c["kernel"][k] for k in ("cuda_sha256", "ir_sha256")}
    # the README's slopes: Lamport 4096 -> 32768 words ~0.22 ns/word measured, ~0.11 simulated
    lo, hi = ok["exchange-h1024-b4-lamport"], ok["exchange-h8192-b4-lamport"]
    meas = (hi["result"]["per_step_s"] - lo["result"]["per_step_s"]) / 28672
    sim = (hi["simulated_per_step_s"] - lo["simulated_per_step_s"]) / 28672
    assert 0.19e-9 < meas < 0.25e-9 and 0.09e-9 < sim < 0.13e-9
    # the recorded simulation is what the simulator says today (small case, 1 s)
    small = ok["exchange-h256-b4-lamport"]
    r = simulate(*(lambda p: (p.kernel, p.inputs))(build_case(small, 16, SPEC)), SPEC,
                 sample_steps=8)
    assert r.per_step_s == pytest.approx(small["simulated_per_step_s"], rel=1e-9)


@pytest.mark.slow
def test_ncu_instruction_counts_match_the_simulated_kernel():
    from measurements.campaign import build_case

    rec = _load("exchange_ncu.json")["cases"]["exchange-h1024-b4-lamport"]["metrics"]
    prog = build_case(_scan_case("exchange-h1024-b4-lamport"), 16, SPEC)
    r = simulate(prog.kernel, prog.inputs, SPEC)
    ratio = rec["smsp__inst_executed.sum"] / r.warp_instructions
    assert 0.8 < ratio < 1.25
    # and the wall time is the gap the README names: real ~1.8x the simulated launch
    assert rec["gpu__time_duration.sum"] * 1e-9 > 1.5 * r.time_s
