"""The persistent kernels' row body between two CTA barriers (measurements/body_probe.py, record
measurements/h200/body_probe.json): the record is of today's probe kernels; on the GPU the
epilogue inside ``if (lane < B)`` costs a round 37-57 cycles more than the same epilogue on every
lane, the spec's ``divergent_branch_cycles`` is that record's median, and with it the simulator
prices the one-slot bodies within 12% (3% on average). A strict expected failure holds what it
does not yet do: branch regions that do not split a warp or hold no activation. The record of 2
to 8 row slots (measurements/h200/body_probe_slots.json): the bodies with the branch region
between the slots (the kernels' form) within 5%; without it, not yet (a strict expected
failure)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from gpusim.measurements import kernel_fingerprint
from gpusim.specs import load_spec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "measurements"))
import body_probe as bp  # noqa: E402

REC = json.loads((ROOT / "measurements" / "h200" / "body_probe.json").read_text())
HZ = load_spec("h200").clock_hz
GPU = {k: r["per_op_s"] * HZ for k, r in REC["results"].items()}
SIM = {k: r["per_op_cycles"] for k, r in REC["simulated"]["results"].items()}
# the pairs that price the region: every one-slot body with and without the if
PAIRS = [k[len("full_"):] for k in GPU if k.startswith("full_") and "_r1_" in k]


def test_the_record_is_of_todays_probe():
    assert REC["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(GPU) == set(SIM) == {k for k, _ in bp.ENTRIES}
    for key, kw in bp.ENTRIES:
        r = REC["results"][key]
        assert r["status"] == "ok"
        for n in bp.SIZES:
            assert r["sizes"][str(n)]["kernel"] == kernel_fingerprint(bp.body(n, **kw).kernel)


def test_a_split_branch_region_costs_a_warp_about_46_cycles():
    """Batch 4, 2 or 1, one or four loads, 1 to 8 warps, one CTA or 132: 37-57 cycles."""
    assert len(PAIRS) == 8
    cost = [GPU[f"full_{p}"] - GPU[f"no_if_{p}"] for p in PAIRS]
    assert all(30 < c < 65 for c in cost), cost
    assert load_spec("h200").divergent_branch_cycles == round(statistics.median(cost))


def test_the_simulator_prices_the_one_slot_bodies():
    """Within 12% each, 4% on average, and the region costs the simulator's split warps as it
    costs the GPU's."""
    err = []
    for p in PAIRS:
        for v in ("full", "no_if"):
            assert SIM[f"{v}_{p}"] == pytest.approx(GPU[f"{v}_{p}"], rel=0.12), (v, p)
            err.append(abs(SIM[f"{v}_{p}"] / GPU[f"{v}_{p}"] - 1))
        assert SIM[f"full_{p}"] - SIM[f"no_if_{p}"] > 25, p
    assert statistics.mean(err) < 0.04


@pytest.mark.xfail(strict=True, reason="the engine charges a branch region only to a warp whose "
                   "lanes split over it and only when it holds an activation: on the H200 a "
                   "region every lane enters or skips costs about 30 cycles, a split one without "
                   "an activation 70 (measurements/README.md, 'The row body alone')")
def test_the_simulator_prices_the_other_branch_regions():
    for k in ("uniform_b4_r1_c1", "skip_b4_r1_c1", "no_tanh_b4_r1_c1"):
        assert SIM[k] == pytest.approx(GPU[k], rel=0.08), k


def test_the_simulator_prices_two_row_slots():
    """ptxas moves the second slot's shared loads and FFMAs above the first slot's branch region,
    among its shuffles (the SASS), and the engine issues them there, in order: the two-slot
    bodies within 8% (they were 17-44% slow when the engine issued in IR order), but the one
    without the region and the tanh, 11% slow since the engine took the SASS's static stall
    counts (its two rows' reductions, kept in the IR's order, each a mask longer)."""
    for v in ("full", "no_if", "no_tanh", "no_if_no_tanh"):
        bound = 0.11 if v == "no_if_no_tanh" else 0.08
        assert SIM[f"{v}_b2_r2_c4"] == pytest.approx(GPU[f"{v}_b2_r2_c4"], rel=bound), v


def test_the_whole_probe_is_priced_within_5_percent_on_average():
    err = [abs(SIM[k] / GPU[k] - 1) for k in GPU]
    assert statistics.mean(err) < 0.05


@pytest.mark.parametrize("key", ["full_b2_r2_c4", "no_if_no_tanh_b2_r2_c4", "full_b4_r1_c4"])
def test_the_records_simulated_values_are_todays(key):
    kw = dict(bp.ENTRIES)[key]
    assert SIM[key] == pytest.approx(bp.simulated_cycles(load_spec("h200"), kw), abs=0.01)


SLOTS = json.loads((ROOT / "measurements" / "h200" / "body_probe_slots.json").read_text())
GPU_S = {k: r["per_op_s"] * HZ for k, r in SLOTS["results"].items()}
SIM_S = {k: r["per_op_cycles"] for k, r in SLOTS["simulated"]["results"].items()}


def test_the_slots_record_is_of_todays_probe():
    assert SLOTS["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(GPU_S) == set(SIM_S) == {k for k, _ in bp.SLOT_ENTRIES}
    for key, kw in bp.SLOT_ENTRIES:
        assert SLOTS["results"][key]["status"] == "ok"
        for n in bp.SIZES:
            assert SLOTS["results"][key]["sizes"][str(n)]["kernel"] == \
                kernel_fingerprint(bp.body(n, **kw).kernel)


def test_the_simulator_prices_three_to_eight_row_slots_with_the_region():
    """The kernels' form (the epilogue under ``if (lane < B)`` after every slot): 2 to 8 slots
    at batch 1, 2 and 4 within 8% each, 3.5% on average (the engine with an order floor, before
    it issued in ptxas's order: 5-15% fast). With the SASS's static stall counts the batch-2
    bodies went from +2-4% to +4-7% (their two reduction chains 32 cycles a mask, as
    ``shfl_pipe_chains.json`` measures them, not 29); before those, every body within 4%."""
    full = [k for k in GPU_S if k.startswith("full_")]
    assert len(full) == 7
    for k in full:
        assert SIM_S[k] == pytest.approx(GPU_S[k], rel=0.08), k
    assert statistics.mean(abs(SIM_S[k] / GPU_S[k] - 1) for k in full) < 0.04


@pytest.mark.xfail(strict=True, reason="without a region between them ptxas interleaves the "
                   "slots' reductions; the engine keeps the shuffles in the IR's order, and is "
                   "12% fast to 43% slow on these bodies (interleaved: 4-22% fast); what the "
                   "GPU does there is not modelled (measurements/README.md, 'Three to eight "
                   "row slots')")
def test_the_simulator_prices_row_slots_without_the_region():
    for k in (k for k in GPU_S if k.startswith("no_if")):
        assert SIM_S[k] == pytest.approx(GPU_S[k], rel=0.10), k


@pytest.mark.parametrize("key", ["full_b4_r8_c1", "no_if_b2_r4_c4"])
def test_the_slots_records_simulated_values_are_todays(key):
    kw = dict(bp.SLOT_ENTRIES)[key]
    assert SIM_S[key] == pytest.approx(bp.simulated_cycles(load_spec("h200"), kw), abs=0.01)
