"""``measurements/l2_overlap.py``: the ``rate4`` loads on 66 H200 SMs by warps an SM (record
``h200/l2_overlap.json``): where the SM's own request rate binds, and why the simulator's IR form
of the probe left the round trip exposed (nvcc unrolls the CUDA kernel's loop)."""

from __future__ import annotations

import hashlib
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest

from measurements import l2_overlap as ov
from measurements.l2_group_rate import SOURCE, UNROLL
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
REC = read_record(str(ROOT / "measurements" / "h200" / "l2_overlap.json"))


def _per_request(name: str) -> float:
    r = REC["runs"][name]
    return statistics.median(r["cycles_per_round_per_sm"]) / (128 * r["warps"])


def test_the_record_is_an_h200_run_with_its_raw_repeats_and_lines():
    assert "H200" in REC["provenance"]["gpu_name"] and REC["simulated_spec"] == "h200"
    sets = ov.run_sets(REC["seed"])
    assert set(sets) == set(REC["runs"]) and len(sets) == 2 * len(ov.WARPS)
    for name, run in REC["runs"].items():
        assert len(run["cycles_per_round_per_cta"]) == REC["launches"] == 5
        assert all(len(x) == REC["ctas"] == 66 for x in run["cycles_per_round_per_cta"])
        arr = np.asarray(sets[name]["sets"], dtype=np.int32)
        assert hashlib.sha1(arr.tobytes()).hexdigest() == run["lines_sha1"], name


def test_from_four_warps_the_sm_sends_a_request_a_cycle():
    """0.995-1.003 cycles a one-line request per SM at 4, 8 and 16 warps, either sector
    pattern; 1.05-1.08 at 2 warps and 1.47-1.57 at one (a warp's own round trip shows)."""
    for place in ov.PLACES:
        for w in (4, 8, 16):
            assert _per_request(f"{place}_w{w}") == pytest.approx(1.0, abs=0.006), (place, w)
        assert 1.04 < _per_request(f"{place}_w2") < 1.09
        assert 1.45 < _per_request(f"{place}_w1") < 1.60


def test_the_simulator_follows_once_its_ir_is_unrolled_as_nvcc_unrolls_the_kernel():
    """The IR form with one round's 4 loads a loop iteration is 12-172% dear below 16 warps; with
    4 rounds' 16 loads in flight, as nvcc compiles the CUDA kernel, +3% to +31%, and both within
    0.1% at 16 warps."""
    for name, run in REC["runs"].items():
        gpu = statistics.median(run["cycles_per_round_per_sm"])
        one, four = run["simulated"] / gpu - 1, run["simulated_unrolled"] / gpu - 1
        if run["warps"] == 16:
            assert abs(one) < 0.002 and abs(four) < 0.002, name
        else:
            assert 0.1 < one < 1.8 and -0.01 < four < 0.32 and four < one / 2, name


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_unrolls_the_rate4_loop_four_times(tmp_path):
    """The CUDA kernel's PTX holds 20 relaxed loads: the loop's 4, unrolled 4 times, and a
    remainder (sm_90, the nvcc of this machine and of the device)."""
    cu = tmp_path / "rate4.cu"
    cu.write_text(SOURCE)
    out = tmp_path / "rate4.ptx"
    subprocess.run([shutil.which("nvcc"), "-arch=sm_90", "-ptx", "-o", str(out), str(cu)],
                   check=True, capture_output=True)
    assert out.read_text().count("ld.relaxed.gpu.global") == 4 * UNROLL + 4
