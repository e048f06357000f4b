"""The warp-shuffle probe (``measurements/shfl_pipe.py``, ``h100/shfl_pipe.json``): what the H100
measured, that the spec's ``shfl_per_cycle_per_sm`` is that record's, and that the simulated
values in the record are today's engine's."""

import json
from pathlib import Path

import pytest

from gpusim.specs import load_spec
from measurements.shfl_pipe import NAMES, SIM_ARGS, SIM_SIZES, stream

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h100" / "shfl_pipe.json").read_text())
CLOCK = load_spec("h100").clock_hz


def _per_instr(name: str) -> float:
    shfl, lds = stream(name)
    return REC["results"][name]["per_op_s"] * CLOCK / (shfl + lds)


def test_record_is_a_checked_h100_run_of_every_benchmark():
    assert "H100" in REC["provenance"]["gpu_name"]
    assert "shfl_pipe.py" in REC["provenance"]["command"]
    assert set(REC["results"]) == set(NAMES)
    assert all(r["status"] == "ok" for r in REC["results"].values())


def test_one_shuffle_a_cycle_per_sm_shared_with_the_shared_loads():
    """From 4 warps up an SM issues one shuffle a cycle whatever the warps; a shared load beside
    each shuffle costs as much again (one pipe); fewer warps are latency-bound."""
    for w in (4, 8, 16, 32):
        assert 0.95 < _per_instr(f"shfl_tput_w{w}") < 1.05, w
    for w in (4, 8, 16):
        assert 0.95 < _per_instr(f"shfl_tput_w{w}_lds") < 1.10, w      # SHFL + LDS together
    assert _per_instr("shfl_tput_w1") > 3.0 and _per_instr("shfl_tput_w2") > 1.5
    assert load_spec("h100").shfl_per_cycle_per_sm == 1.0
    assert "shfl_pipe.json" in load_spec("h100").source("shfl_per_cycle_per_sm")


@pytest.mark.parametrize("name", ["shfl_tput_w8", "shfl_tput_w8_red", "shfl_tput_w4_lds"])
def test_simulated_values_are_todays(name):
    from gpusim.calibrate import simulated_cycles_per_op

    sim = REC["simulated"]["results"][name]
    assert sim["per_op_cycles"] == pytest.approx(
        simulated_cycles_per_op(load_spec("h100"), name, SIM_SIZES, SIM_ARGS))


def test_the_engine_is_within_3_percent_from_4_warps_up():
    """The READMEs' claim: the shuffle-only, reduction, shuffle-beside-load and shared-load-only
    benchmarks of 4+ warps within 3% (the 4-warp shuffle beside a load 4.2%, the 4-warp
    reduction 3.9% fast: 8.5% before the engine took the SASS's static stall counts, which
    price a warp's interleaved shuffle chains with their adds), the FFMA mix within 5% from 8
    warps (not at 4 warps). The shared loads
    alone were 11-70% slow while the engine issued in IR order. One and two warps: a warp's
    shuffles 4 cycles apart (the SASS's stall count), within 3% and 6% (27-29% fast before)."""
    sim = REC["simulated"]["results"]
    bounds = {"shfl_tput_w4_lds": 0.05, "shfl_tput_w4_red": 0.05, "shfl_tput_w1": 0.03,
              "shfl_tput_w2": 0.06}
    for name in NAMES:
        if name.endswith("w4_ffma"):
            continue
        gpu = REC["results"][name]["per_op_s"] * CLOCK
        bound = 0.05 if name.endswith("_ffma") else bounds.get(name, 0.035)
        assert abs(sim[name]["per_op_cycles"] / gpu - 1) < bound, name


def test_the_chains_record_and_what_it_says():
    """measurements/h200/shfl_pipe_chains.json: shuffles alone within 4% at every count; the
    shuffle-then-add chains within 8% at every count of chains and warps, and one warp's two
    interleaved chains within 1% (32 cycles a link: the SASS's static stall counts, README
    'The SASS's stall counts are static'; the engine gave 29, 10-15% fast from two chains on,
    before it took them); the simulated values are today's."""
    import json

    from measurements import shfl_pipe
    from measurements.probe import simulated_slope

    rec = json.loads((ROOT / "measurements" / "h200" / "shfl_pipe_chains.json").read_text())
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(rec["results"]) == {k for k, _ in shfl_pipe.CHAIN_ENTRIES}
    hz = load_spec("h200").clock_hz
    gpu = {k: r["per_op_s"] * hz for k, r in rec["results"].items()}
    sim = {k: r["per_op_cycles"] for k, r in rec["simulated"]["results"].items()}
    for k in gpu:
        assert abs(sim[k] / gpu[k] - 1) < (0.08 if k.endswith("_red") else 0.04), k
    assert abs(sim["shfl_tput_w1_c2_red"] / gpu["shfl_tput_w1_c2_red"] - 1) < 0.01
    key, kw = shfl_pipe.CHAIN_ENTRIES[1]
    assert sim[key] == pytest.approx(simulated_slope(
        load_spec("h200"), shfl_pipe._chain_builder({**kw, **shfl_pipe.SIM_ARGS}),
        shfl_pipe.SIM_SIZES))
