"""``measurements/cold_gather.py``: the probe's kernel, its stamps, and the H200 record with the
README's table and claims."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernels_ir.errors import InputError
from measurements import cold_gather as cg

ROOT = Path(__file__).resolve().parents[1]
REC = json.loads((ROOT / "measurements" / "h200" / "cold_gather.json").read_text())


def test_the_kernel_gathers_what_its_check_expects():
    from gpusim.engine import execute
    mb = cg.cold_gather(32, ctas=4, pad=8)
    out = execute(mb.kernel, mb.inputs).globals
    assert mb.verify_result(out)
    bad = dict(out, out=np.asarray(out["out"]) + 1)
    assert not mb.verify_result(bad)
    # the placed table: every index lands past the pad
    assert int(np.min(mb.inputs["idx"])) >= 8 * 32


@pytest.mark.parametrize("kw", [{"lines": 0}, {"lines": 8, "pad": -1}, {"lines": True}])
def test_bad_sizes_are_refused(kw):
    with pytest.raises(InputError):
        cg.cold_gather(**kw)


def test_the_stamps_go_in_once():
    from gpusim.backends.cupy_backend import generate
    code = cg.instrumented_code(generate(cg._with_ts(cg.cold_gather(64).kernel)).code)
    assert code.count("g_ts[ts_i + 0]") == 1 and code.count("g_ts[ts_i + 2]") == 1
    assert code.index("g_ts[ts_i + 2]") < code.rindex("g_out[")


def test_gpu_summary_reads_cycles_and_the_timer():
    ts = np.array([[100, 1000, 400, 1150], [110, 1010, 610, 1300]], np.int64)
    s = cg.gpu_summary(ts)
    assert s["warp_cycles_median"] == 400 and s["span_ns"] == 300


def test_the_h200_record_and_its_table(measurements_section):
    earlier = json.loads((ROOT / "measurements" / "h200" / "cold_gather_earlier.json")
                         .read_text())["results"]
    assert REC["provenance"]["gpu_name"] == "NVIDIA H200"
    want = {cg._name(x, p, c, t, n) for x, p, c, t, n in cg.CASES}
    assert set(REC["results"]) == want and set(earlier) < want
    # the simulator's column is the model of that day, with the H100's contention-group map
    # (the H200's own map came later: test_l2_groups_h200 has the gathers at known places)
    assert REC["simulated"]["group_map"] == "h100_l2_groups.json"
    sim = REC["simulated"]["results"]
    section = measurements_section("## Every SM gathers one small table")
    spans = []
    for key, r in REC["results"].items():
        assert r["status"] == "ok" and len(r["runs"]) == 9
        g, m = r["summary"], sim[key]
        ear = f"{earlier[key]['summary']['warp_cycles_median']:.0f}" if key in earlier else "-"
        few, ch = r["threads"] // 32, r.get("chain")
        kind = " chained" if ch is True else " relaxed" if ch == "relaxed" else ""
        label = f"{r['lines']}{kind}" + (
            f", {few} warp{'s' if few > 1 else ''} an SM" if r["threads"] != cg.THREADS else "")
        row = (f"| {label} | {r.get('pad', 0)} | "
               f"{g['warp_cycles_median']:.0f} ({ear}) / {m['warp_cycles_median']:.0f} | "
               f"{g['warp_cycles_p90']:.0f} / {m['warp_cycles_p90']:.0f} | "
               f"{g['span_ns']:.0f} / {m['cycles'] / 1.98:.0f} |")
        assert row in section, row
        if ch == "relaxed":
            continue
        if r["threads"] == cg.THREADS:
            spans.append(m["cycles"] / 1.98 / g["span_ns"] - 1)
        if r["threads"] == cg.THREADS and not ch:
            # the GPU's warps spread out, the simulator's finish together
            assert g["warp_cycles_p90"] / g["warp_cycles_median"] >= 1.12
            assert m["warp_cycles_p90"] / m["warp_cycles_median"] <= 1.15
        elif r["lines"] == 64:   # one warp an SM or one gather in flight: still slow at 64 lines
            assert m["warp_cycles_median"] > 1.25 * g["warp_cycles_median"], key
    assert -0.22 < min(spans) and max(spans) < 0.35
    # relaxed (L1 bypassed, as the groups were measured): 2.2 times the GPU at 64 lines
    rx = {n: (REC["results"][f"cold_gather_rx_{n}"]["summary"]["warp_cycles_median"],
              sim[f"cold_gather_rx_{n}"]["warp_cycles_median"]) for n in (64, 256, 1024)}
    assert rx[64][1] > 2 * rx[64][0] and abs(rx[256][1] / rx[256][0] - 1) < 0.1
    assert rx[1024][1] > 1.3 * rx[1024][0]
    # placement matters on the GPU: the 64- and 256-line tables by 20% or more
    for n in (64, 256):
        got = [REC["results"][k]["summary"]["warp_cycles_median"] for k in want
               if k == f"cold_gather_{n}" or k.startswith(f"cold_gather_{n}_p")]
        assert max(got) / min(got) > 1.2, n


def test_measure_builds_every_case_once_with_its_own_sizes(monkeypatch):
    """``measure`` hands :func:`_record` one case per entry of CASES, each building the
    Microbench of its own sizes (no late-bound loop variable), without a table move."""
    seen = {}
    monkeypatch.setattr(cg, "_record", lambda out, argv, name, cases: seen.update(
        name=name, cases=list(cases(None, {}))))
    cg.measure("unused", [])
    assert seen["name"] == "cold_gather.json"
    keys = [k for k, _f, _b in seen["cases"]]
    assert keys == [cg._name(*c) for c in cg.CASES]
    for key, fields, build in seen["cases"][::7]:
        mb, move = build()
        assert move is None and mb.name == key and mb.kernel.block == fields["threads"]
        assert mb.params["lines"] == fields["lines"] and mb.params["pad"] == fields["pad"]
