"""``measurements/h200/lamport_batch.json`` and ``lamport_batch_work.json``: the persistent
kernel's exchange with no mat-vec at batch 1-8, with and without a chain of FFMAs before each
row's store, on the GPU and in the simulator. measurements/README.md's table is the records',
and what it says of them holds: from batch 2 up the GPU waits 0.80-1.06 of the simulator's wait
without compute and 0.66-1.02 with it, at batch 1 1.25-1.37 times; the chain runs (the free
rounds grow with it); a chain before the stores does not lengthen the GPU's wait; a row of the
mat-vec does (``lamport_batch_rows.json``), mostly through its shared loads
(``lamport_batch_parts.json``), while the simulator prices the rows' free rounds."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from measurements.lamport_batch import (  # noqa: E402
    ROW_WORK,
    SIZES,
    WORK,
    WORK_SIZES,
    wait_table,
)

H200 = ROOT / "measurements" / "h200"
BASE = json.loads((H200 / "lamport_batch.json").read_text())
WORKED = json.loads((H200 / "lamport_batch_work.json").read_text())
ROWS = json.loads((H200 / "lamport_batch_rows.json").read_text())
PARTS = json.loads((H200 / "lamport_batch_parts.json").read_text())


@pytest.mark.parametrize("rec", [BASE, WORKED, ROWS, PARTS])
def test_the_records_are_complete_and_their_means_are_the_passes(rec):
    assert "H200" in rec["provenance"]["gpu_name"] and rec["simulated"]["results"]
    assert set(rec["results"]) == set(rec["passes_s"]) == set(rec["simulated"]["results"])
    for key, r in rec["results"].items():
        runs = rec["passes_s"][key]
        assert len(runs) == rec["passes"] == 2
        assert r["per_op_s"] == pytest.approx(sum(runs) / len(runs), rel=1e-12)
        assert max(runs) / min(runs) < 1.12, key    # the passes: within 8%, 11% and 12%


def _waits(rec, sizes, work=0):
    return {(r["words"], r["batch"]): (r["gpu"], r["sim"]) for r in wait_table(rec, sizes, work)}


def test_the_readme_table_is_the_records():
    text = (ROOT / "measurements" / "README.md").read_text()
    base = _waits(BASE, SIZES)
    for w, b in WORK_SIZES:
        cells = [base[(w, b)]] + [_waits(WORKED, WORK_SIZES, f"f{f}")[(w, b)] for f in WORK]
        free = cells[-1]
        row = (f"| h{w // b}-b{b} ({w}) | "
               + " | ".join(f"{g['wait']:.0f} / {s['wait']:.0f}" for g, s in cells)
               + f" | {free[0]['xp']:.0f} / {free[1]['xp']:.0f} |")
        assert row in text, row


def test_the_wait_is_simulated_from_batch_two_up_and_short_at_batch_one():
    for label, rec, sizes, works, band in (("none", BASE, SIZES, ("",), (0.80, 1.06)),
                                           ("chain", WORKED, WORK_SIZES,
                                            tuple(f"f{f}" for f in WORK), (0.66, 1.02))):
        for f in works:
            for (w, b), (g, s) in _waits(rec, sizes, f).items():
                ratio = g["wait"] / s["wait"]
                if b == 1:
                    assert ratio > 1.1, (label, w, b, f, ratio)
                else:
                    assert band[0] - 0.005 <= ratio <= band[1] + 0.005, (label, w, b, f, ratio)
    b1 = [g["wait"] / s["wait"] for (w, b), (g, s) in _waits(BASE, SIZES).items() if b == 1]
    assert 1.245 <= min(b1) and max(b1) <= 1.375


def test_the_chain_runs_and_does_not_lengthen_the_wait():
    base = _waits(BASE, SIZES)
    for (w, b), (g, _) in _waits(WORKED, WORK_SIZES, f"f{max(WORK)}").items():
        assert g["xp"] > base[(w, b)][0]["xp"] + 300        # about 410 ns of FFMAs
        assert g["wait"] < base[(w, b)][0]["wait"] + 10     # not longer than without it


def test_the_row_table_is_the_records_and_the_wait_grows_with_rows_not_ffmas():
    text = (ROOT / "measurements" / "README.md").read_text()
    ratios = []
    for w, b in WORK_SIZES:
        cells = [_waits(ROWS, WORK_SIZES, f"r{f}")[(w, b)] for f in ROW_WORK]
        row = (f"| h{w // b}-b{b} ({w}) | "
               + " | ".join(f"{g['wait']:.0f} / {s['wait']:.0f}" for g, s in cells)
               + " | " + " | ".join(f"{g['xp']:.0f} / {s['xp']:.0f}" for g, s in cells) + " |")
        assert row in text, row
        ratios += [g["wait"] / s["wait"] for g, s in cells]
        assert all(343.5 <= s["wait"] <= 397.5 for _, s in cells)    # the simulator's: flat
        assert all(-0.045 < s["xp"] / g["xp"] - 1 < 0.135 for g, s in cells)   # -4% .. +13%
        if b <= 2:
            assert all(abs(s["xp"] / g["xp"] - 1) < 0.045 for g, s in cells)
    assert round(min(ratios), 2) == 1.02 and round(max(ratios), 2) == 1.91
    # batch 1, the longer row: the GPU waits ~340 ns more than with FFMAs alone; the simulator not
    g_row, s_row = _waits(ROWS, WORK_SIZES, "r192")[(1024, 1)]
    g_ffma, s_ffma = _waits(WORKED, WORK_SIZES, "f192")[(1024, 1)]
    assert g_row["wait"] - g_ffma["wait"] > 200 and abs(s_row["wait"] - s_ffma["wait"]) < 20


def test_the_parts_table_is_the_records_and_the_shuffles_alone_wait_less_than_the_row():
    text = (ROOT / "measurements" / "README.md").read_text()
    shuffles = []
    for w, b in WORK_SIZES:
        (gl, sl), (gs, ss) = (_waits(PARTS, WORK_SIZES, k)[(w, b)] for k in ("l192", "s192"))
        row = (f"| h{w // b}-b{b} ({w}) | {gl['wait']:.0f} / {sl['wait']:.0f} | "
               f"{gs['wait']:.0f} / {ss['wait']:.0f} | {gl['xp']:.0f} / {sl['xp']:.0f} | "
               f"{gs['xp']:.0f} / {ss['xp']:.0f} |")
        assert row in text, row
        shuffles.append(gs["wait"] / ss["wait"])
        assert abs(ss["xp"] / gs["xp"] - 1) < 0.07          # the shuffles' free round: within 7%
        assert 343.5 <= min(sl["wait"], ss["wait"]) and max(sl["wait"], ss["wait"]) <= 403.5
    assert (round(min(shuffles), 2), round(max(shuffles), 2)) == (0.85, 1.41)
    # the loads-only row runs 394 ns faster on the GPU than the whole row (ptxas sank it into
    # the store's branch: test_ptxas_sinks_the_loads_only_row_into_the_stores_branch)
    (g_l, _), (g_r, _) = (_waits(w_rec, WORK_SIZES, k)[(1024, 1)]
                          for w_rec, k in ((PARTS, "l192"), (ROWS, "r192")))
    assert abs(g_r["xp"] - g_l["xp"] - 394) < 1


def _sass(tmp_path, m, tag):
    import subprocess

    from kernels_ir import sass
    from kernels_ir.codegen_cuda import generate

    cu = tmp_path / f"{tag}.cu"
    cu.write_text(generate(m.kernel).code)
    subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cu.with_suffix(".cubin")),
                    str(cu)], check=True, capture_output=True)
    code = [i.text for i in sass.parse(sass.disassemble(cu.with_suffix(".cubin")))]
    assert len(code) > 100, code     # the kernel's instructions, not the listing's headers
    return code


@pytest.mark.slow
@pytest.mark.parametrize("work", ["r64", "r192", "l192"])
def test_the_rows_measured_in_ir_order_are_the_pipelined_rows_in_sass(tmp_path, work):
    """The row records were measured with each load right before its FFMAs in the IR; the
    simulator now runs them pipelined (each load before the previous one's FFMAs), which is what
    ptxas makes of both: the same SASS, so the GPU's times hold for the kernels simulated."""
    import shutil

    from kernels_ir import sass
    from measurements.lamport_batch import _bench

    if shutil.which("nvcc") is None or sass.find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump")
    for w, b in WORK_SIZES:
        for present in (False, True):
            old, new = (_bench(4, w, b, present, work, order) for order in
                        ("interleaved", "pipelined"))
            a, c = _sass(tmp_path, old, "old"), _sass(tmp_path, new, "new")
            assert a and a == c, (w, b, present)


@pytest.mark.slow
def test_ptxas_sinks_the_loads_only_row_into_the_stores_branch(tmp_path):
    """Without a shuffle the loads-only row's result is used only by the storing lanes, and
    ptxas moves the row into the store's branch (a predicated branch right after the staging
    barrier); the whole row's shuffles keep every lane in it, and the shuffles' chain keeps
    its shuffles (measurements/README.md)."""
    import shutil

    from kernels_ir import sass
    from measurements.lamport_batch import _bench

    if shutil.which("nvcc") is None or sass.find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump")

    def after_barrier(work):
        code = _sass(tmp_path, _bench(4, 1024, 1, True, work), work)
        i = next(k for k, t in enumerate(code) if t.startswith("BAR.SYNC"))
        return code[i + 1]
    assert after_barrier("l192").startswith("@!P") and "BRA" in after_barrier("l192")
    assert "BRA" not in after_barrier("r192")
    # the shuffles' chain keeps its 45 shuffles (a warp-uniform start lost them all)
    assert sum(t.split()[0].startswith("SHFL") for t in
               _sass(tmp_path, _bench(4, 1024, 1, True, "s192"), "s192")) == 45


def test_the_small_layers_record_and_its_table():
    """``lamport_batch_small.json``: the exchange at hidden 256-1024; the README's table is the
    record's, and the simulator's wait at batch 4 is never much longer than the GPU's, while
    batch 1 waits too briefly (measurements/README.md, "The exchange at the smaller layers")."""
    from measurements.lamport_batch import SMALL_EXPERIMENTS, SMALL_ROW_SIZES, SMALL_SIZES

    rec = json.loads((H200 / "lamport_batch_small.json").read_text())
    assert "H200" in rec["provenance"]["gpu_name"]
    keys = {k for k, *_ in SMALL_EXPERIMENTS}
    assert set(rec["results"]) == set(rec["simulated"]["results"]) == keys
    text = (ROOT / "measurements" / "README.md").read_text()
    rows = _waits(rec, SMALL_SIZES)
    r64 = _waits(rec, SMALL_ROW_SIZES, "r64")
    for (w, b), (g, s) in rows.items():
        cells = [f"{g['wait']:.0f} / {s['wait']:.0f}", f"{g['xp']:.0f} / {s['xp']:.0f}"]
        if (w, b) in r64:
            rg, rs = r64[(w, b)]
            cells += [f"{rg['wait']:.0f} / {rs['wait']:.0f}", f"{rg['xp']:.0f} / {rs['xp']:.0f}"]
        else:
            cells += ["-", "-"]
        row = f"| h{w // b}-b{b} ({w}) | " + " | ".join(cells) + " |"
        assert row in text, row
        assert abs(s["xp"] / g["xp"] - 1) < 0.13                  # the free rounds agree
        if b == 4:
            assert s["wait"] < 1.2 * g["wait"], (w, b)            # batch 4: not much longer
    g1, s1 = rows[(1024, 1)]
    assert g1["wait"] > 1.3 * s1["wait"]                          # batch 1: too brief
