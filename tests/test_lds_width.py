"""A lone warp's shared loads by width and by loads in flight (measurements/lds_width.py, record
measurements/h200/lds_width.json): the record is of today's probe kernels; on the GPU a 64- or
128-bit load's chain is 15-26 cycles longer than a 32-bit one's, and two warps on one scheduler
share its wide loads' service while two on two schedulers do not; the simulator prices the SM's
rate but not the lone warp's wait (a strict expected failure)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

from gpusim.measurements import kernel_fingerprint
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "measurements"))
import lds_width as lw  # noqa: E402

REC = read_record(str(ROOT / "measurements" / "h200" / "lds_width.json"))      # kept gzipped
GPU = {k: r["cycles_per_round"] for k, r in REC["results"].items()}
SIM = {k: r["cycles_per_round"] for k, r in REC["simulated"]["results"].items()}


def test_the_record_is_of_todays_probe():
    assert REC["provenance"]["gpu_name"] == "NVIDIA H200"
    keys = {lw._key(*c) for c in lw.CONFIGS}
    assert set(GPU) == set(SIM) == keys
    assert REC["sizes"] == list(lw.SIZES) and REC["passes"] == lw.PASSES
    assert REC["simulated"]["sizes"] == list(lw.SIM_SIZES)
    for w, k, a in lw.CONFIGS:
        r = REC["results"][lw._key(w, k, a)]
        assert len(r["passes"]) == lw.PASSES
        assert r["cycles_per_round"] == pytest.approx(
            statistics.median(x["cycles_per_round"] for x in r["passes"]), abs=1e-9)
        for n in lw.SIZES:
            assert r["passes"][0]["sizes"][str(n)]["kernel"] == kernel_fingerprint(
                lw.build(n, w, k, a).kernel)


def test_a_wide_loads_chain_is_longer_on_the_gpu():
    """One load a round: 32-bit 35 cycles, 64-bit 55, 128-bit 61, with one to eight warps."""
    for a in ("1", "4"):
        assert GPU[f"w2_k1_a{a}"] - GPU[f"w1_k1_a{a}"] > 15
        assert GPU[f"w4_k1_a{a}"] - GPU[f"w1_k1_a{a}"] > 20


def test_wide_loads_share_their_scheduler():
    """Eight 128-bit loads a round: two warps on one scheduler take 177 cycles, on two 139, one
    warp alone 129; eight warps are bound by the SM's wavefront a cycle (261 for 256)."""
    assert GPU["w4_k8_a2same"] > 1.2 * GPU["w4_k8_a2"]
    assert GPU["w4_k8_a2"] < 1.15 * GPU["w4_k8_a1"]
    assert GPU["w4_k8_a8"] == pytest.approx(8 * 8 * 4, rel=0.05)


def test_the_simulator_prices_the_sms_rate():
    """Where the SM's pipe binds (eight warps, 128-bit loads) the simulator is within 10%."""
    for k in ("w4_k4_a8", "w4_k8_a8", "w2_k8_a4"):
        assert SIM[k] == pytest.approx(GPU[k], rel=0.10), k


@pytest.mark.xfail(strict=True, reason="the simulator's wide shared load waits as long as a "
                   "32-bit one plus its wavefronts: a lone warp's 128-bit chain is 46 cycles "
                   "against 61 (measurements/README.md, 'A lone warp's shared loads')")
def test_the_simulator_prices_a_lone_warps_wide_loads():
    for k in ("w2_k1_a1", "w4_k1_a1", "w4_k4_a1", "w4_k8_a1"):
        assert SIM[k] == pytest.approx(GPU[k], rel=0.10), k
