"""A loop's own control (``measurements/h200/loop_edges.json``, ``kernels_ir.kernels.microbench.
control``): the H200's cycles an iteration, the spec's ``branch_cycles`` derived from them, the
simulator against them, and the stall counts of the SASS that the engine's loop edges take."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpusim.specs import load_spec
from kernels_ir import sass
from kernels_ir.codegen_cuda import SPIN_TESTS, generate
from kernels_ir.kernels.microbench.control import seq_count, spin_count
from measurements.loop_edges import ENTRIES, simulated_cycles

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h200" / "loop_edges.json").read_text())
H200 = load_spec("h200")
NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_cuobjdump()

# per benchmark: the SASS's (nvcc 13, sm_90) stall counts of an iteration other than the 13
# before each branch and the branches' own, and the number of branches (a compare before each;
# the vote form has one compare more, the vote's, 13 before the vote)
OTHER_STALLS = {"seq": (1 + 3, 1, 1), "spin": (2 + 3, SPIN_TESTS, SPIN_TESTS),
                "spin_vote": (2 + 2 + 3, SPIN_TESTS, SPIN_TESTS + 1)}


def _gpu_cycles(key: str) -> float:
    r = REC["results"][key]
    assert r["status"] == "ok"
    return r["per_op_s"] * H200.clock_hz


def test_the_record_holds_the_three_loops_measured_on_an_h200():
    assert REC["provenance"]["gpu_name"] == "NVIDIA H200"
    got = {key: round(_gpu_cycles(key), 1) for key, _ in ENTRIES}
    assert got == {"spin": 72.6, "spin_vote": 87.5, "seq": 26.6}


def test_branch_cycles_is_what_the_record_leaves_after_the_stall_counts():
    """(GPU cycles - other stall counts - 13 a compare) / branches: 9.65, 9.54, 9.50."""
    per_branch = {}
    for key, (other, branches, compares) in OTHER_STALLS.items():
        left = _gpu_cycles(key) - other - compares * H200.predicate_branch_cycles
        per_branch[key] = left / branches
    assert all(abs(v - H200.branch_cycles) < 0.2 for v in per_branch.values()), per_branch
    assert abs(per_branch["seq"] - 9.65) < 0.01 and abs(per_branch["spin_vote"] - 9.50) < 0.01


@pytest.mark.parametrize("key,kw", ENTRIES)
def test_the_simulator_runs_each_loop_within_4_percent(key, kw):
    """Before the loop edges the engine ran these loops at 4, 6 and 9 cycles an iteration."""
    sim = simulated_cycles(H200, key, kw)
    assert abs(sim / _gpu_cycles(key) - 1) < 0.04
    assert REC["simulated"]["results"][key]["per_op_cycles"] == sim   # the record is today's


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("bench", [spin_count(64), spin_count(64, vote=True), seq_count(64)],
                         ids=["spin", "spin_vote", "seq"])
def test_a_predicate_read_by_a_branch_or_a_vote_waits_13_cycles(bench, tmp_path):
    """Every compare (ISETP, LOP3 into a predicate) or vote right before the predicated
    branch or the vote that reads it carries ptxas's stall count of 13: the spec's
    ``predicate_branch_cycles``."""
    cu, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    cu.write_text(generate(bench.kernel).code)
    p = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(cu), "-o", str(cubin)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    code = sass.stall_counts(sass.disassemble(cubin, cuobjdump=CUOBJDUMP))
    pairs = [(a, s) for (a, s), (b, _) in zip(code, code[1:], strict=False)
             if (b.opcode == "BRA" and b.pred) or b.opcode.startswith("VOTE")
             if a.opcode.startswith(("ISETP", "VOTE")) or (a.opcode.startswith("LOP3")
                                                           and a.operands[0].startswith("P"))]
    assert len(pairs) >= (1 if bench.name == "seq_count" else 5)
    assert {s for _, s in pairs} == {H200.predicate_branch_cycles}, pairs
